"""EchoDataset under Hugging Face accelerate and the Trainer: reads, counts, exact resume.

The multi-process jobs run on two gloo processes under torchrun; each resume runs in a
new process, from the checkpoint the job's own mechanism wrote. One run of each job
serves several tests (module-scoped fixtures): 48 examples, factor 2, three epochs.
"""
import collections
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("accelerate")

from dataecho.torch.accelerated import split_of
from helpers.launch import HELPERS, run_two_processes

pytestmark = pytest.mark.torch

N, FACTOR, EPOCHS = 48, 2, 3
WHOLE = {i: FACTOR * EPOCHS for i in range(N)}  # how often each example is trained


def _two_phases(script, factory):
    """Both phases of a two-process job; per rank, the runs of both."""
    ckpt = factory.mktemp("checkpoints")
    first = run_two_processes(script, factory.mktemp("first"), "first", ckpt)
    resumed = run_two_processes(script, factory.mktemp("resume"), "resume", ckpt)
    return [{**a, **b} for a, b in zip(first, resumed, strict=True)]


def _one_process(script, out_dir, *args):
    """Runs ``helpers/<script> out_dir *args`` as one plain process; its JSON result."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(HELPERS / script), str(out_dir), *map(str, args)],
                          capture_output=True, text=True, timeout=240, env=env, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out_dir / "rank0.json").read_text())


@pytest.fixture(scope="module")
def accelerate_runs(tmp_path_factory):
    return _two_phases("accelerate_job.py", tmp_path_factory)


@pytest.fixture(scope="module")
def trainer_runs(tmp_path_factory):
    pytest.importorskip("transformers")
    return _two_phases("trainer_job.py", tmp_path_factory)


@pytest.fixture(scope="module")
def sliced_stream_runs(tmp_path_factory):
    pytest.importorskip("transformers")
    return _two_phases("sliced_stream_job.py", tmp_path_factory)


@pytest.fixture(scope="module")
def stateful_runs(tmp_path_factory):
    ckpt = tmp_path_factory.mktemp("checkpoints")
    first = _one_process("accelerate_state_job.py", tmp_path_factory.mktemp("first"),
                         "first", ckpt)
    return {**first, **_one_process("accelerate_state_job.py",
                                    tmp_path_factory.mktemp("resume"), "resume", ckpt)}


SPLITS = [(split, workers) for split in ("dispatched", "sliced") for workers in (0, 2)]


@pytest.mark.parametrize(("split", "workers"), SPLITS)
def test_every_example_is_trained_factor_times_per_epoch_across_two_processes(
        accelerate_runs, split, workers):
    # Fails on the code before this test: dispatched, half the examples were trained
    # each epoch; sliced, some examples got one of their two copies.
    key = f"full/{split}/{workers}"
    assert collections.Counter(i for r in accelerate_runs for i in r[key]["seen"]) == WHOLE
    for r in accelerate_runs:  # the counts summed over ranks are what the ranks trained on
        assert (r[key]["fresh"], r[key]["emitted"]) == (EPOCHS * N, EPOCHS * N * FACTOR)


@pytest.mark.parametrize("workers", [0, 2])
def test_sliced_processes_each_read_their_own_half_of_every_epoch_once(
        accelerate_runs, workers):
    # Fails before issue 33: under dispatch_batches=False every process read all 48 ids
    # each epoch (96 reads between the two) and accelerate kept half of what each read.
    for epoch in range(EPOCHS):
        reads = [r[f"full/sliced/{workers}"]["reads"][epoch] for r in accelerate_runs]
        assert [len(read) for read in reads] == [N // 2, N // 2]
        assert all(set(read.values()) == {1} for read in reads)  # none twice
        assert set(reads[0]) | set(reads[1]) == {str(i) for i in range(N)}


@pytest.mark.parametrize("workers", [0, 2])
def test_dispatched_process_zero_reads_every_epoch_once_for_both(accelerate_runs, workers):
    for epoch in range(EPOCHS):
        reads = [r[f"full/dispatched/{workers}"]["reads"][epoch] for r in accelerate_runs]
        assert reads[0] == {str(i): 1 for i in range(N)} and reads[1] == {}


@pytest.mark.parametrize(("split", "workers", "stop", "epochs_read"), [
    *((split, workers, 18, 2) for split, workers in SPLITS),  # mid second epoch
    ("dispatched", 2, 24, 1),  # after the second epoch's last batch
])
def test_accelerate_resumes_exactly_on_two_processes_by_skipping_first_batches(
        accelerate_runs, split, workers, stop, epochs_read):
    # Stopped, resumed in a new process with load_state and skip_first_batches: the ids
    # trained after the resume follow those before as in the uninterrupted run, on each
    # rank. Fails without loader.set_epoch(epoch) in the loop: accelerate's loader
    # numbers its passes from 0 in every process, so the resumed epoch would be read
    # with epoch 0's order.
    case = f"{split}/{workers}/{stop}"
    for r in accelerate_runs:
        stopped, resumed = r[f"stopped/{case}"], r[f"resumed/{case}"]
        assert stopped["seen"] + resumed["seen"] == r[f"full/{split}/{workers}"]["seen"]
        # Counted from the resume on, the skipped batches read again (the counts before
        # the stop are not in the checkpoint).
        assert (resumed["fresh"], resumed["emitted"]) == (epochs_read * N,
                                                          epochs_read * N * FACTOR)


def test_a_stateful_prepared_loader_on_two_processes_trains_the_whole_first_epoch(
        accelerate_runs):
    # accelerate begins a stateful loader's first iteration when it prepares it, before
    # it records the loader that splits the data: the iteration is built again at its
    # first item (before: 240 of 288 copies trained, each rank its own part).
    assert collections.Counter(i for r in accelerate_runs for i in r["stateful"]["seen"]) == WHOLE


@pytest.mark.parametrize(("workers", "stop"), [
    (0, 10), (0, 24), (0, 30), (2, 10), (2, 24), (2, 30)])
def test_save_state_with_a_stateful_loader_resumes_exactly_on_one_process(
        stateful_runs, workers, stop):
    # DataLoaderConfiguration(use_stateful_dataloader=True): save_state saves the
    # loader's position, load_state restores it in a new process (stop 24: after the
    # first epoch's last batch). Fails without set_epoch(epoch) in the loop (the epoch
    # after a resumed one is read with the resumed one's order).
    run = f"{workers}/{stop}"
    assert (stateful_runs[f"stopped/{run}"]["seen"] + stateful_runs[f"resumed/{run}"]["seen"]
            == stateful_runs[f"full/{workers}"]["seen"])


@pytest.mark.parametrize(("workers", "stop"), [
    (0, 10), (0, 24), (0, 30), (2, 10), (2, 24), (2, 30)])
def test_a_stateful_loader_restores_the_counts_of_the_uninterrupted_run(
        stateful_runs, workers, stop):
    resumed, full = stateful_runs[f"resumed/{workers}/{stop}"], stateful_runs[f"full/{workers}"]
    assert (resumed["fresh"], resumed["emitted"]) == (full["fresh"], full["emitted"])


@pytest.mark.parametrize("case", ["dispatched/0", "sliced/2"])
def test_an_echo_dataset_inside_a_wrapper_is_read_whole_under_accelerate(
        accelerate_runs, case):
    # Fails on 8beab11: a thin IterableDataset wrapper hid the EchoDataset from the
    # prepared loader's record, so each process read its own half and accelerate split
    # that again: 48 of 96 copies per epoch, and the counts over ranks said 96.
    run = [r[f"wrapped/{case}"] for r in accelerate_runs]
    assert collections.Counter(i for r in run for i in r["seen"]) == WHOLE
    for r in run:
        assert (r["fresh"], r["emitted"]) == (EPOCHS * N, EPOCHS * N * FACTOR)


STREAM = 51  # ids of sliced_stream_job's stream: parts of 26 and 25


@pytest.mark.parametrize("workers", [0, 2])
def test_a_sliced_stream_is_read_once_between_the_processes_in_equal_steps(
        sliced_stream_runs, workers):
    # Before: every process read the whole stream each epoch (twice the reading) and
    # kept its slice. Now each reads its own part; EqualSteps ends both epochs together.
    runs = [r[f"stream/{workers}"] for r in sliced_stream_runs]
    for epoch in range(2):
        done = [run["epochs"][epoch] for run in runs]
        reads = collections.Counter(i for d in done for i in d["read"])
        assert reads == {i: 1 for i in range(STREAM)}  # once, between the two
        assert len(done[0]["trained"]) == len(done[1]["trained"])  # the same steps
        for d in done:
            assert set(d["trained"]) <= set(d["read"])  # its own part only
        trained = collections.Counter(i for d in done for i in d["trained"])
        if workers == 0:  # parts of 52 and 50 copies: 13 batches each, 2 copies to pad
            assert min(trained.values()) == FACTOR and trained.total() == 13 * 4 * 2
        else:  # 14 and 13 batches: process 0's last batch is not trained, and counted
            assert sum(trained[i] < FACTOR for i in range(STREAM)) <= 4
    assert [run["dropped"] for run in runs] == [0, 0] if workers == 0 else [2, 0]
    assert all((run["fresh"], run["emitted"]) == (2 * STREAM, 2 * STREAM * FACTOR)
               for run in runs)


def test_an_adaptive_factor_sliced_is_read_once_between_the_processes(sliced_stream_runs):
    runs = [r["auto/2"] for r in sliced_stream_runs]
    for epoch in range(2):
        done = [run["epochs"][epoch] for run in runs]
        assert collections.Counter(i for d in done for i in d["read"]) == {
            i: 1 for i in range(48)}
        assert len(done[0]["trained"]) == len(done[1]["trained"])
    assert all(run["fresh"] == 2 * 48 for run in runs)


def test_the_hf_trainer_reads_a_sliced_stream_once_and_resumes_it_exactly(
        sliced_stream_runs):
    # EqualSteps returned by get_train_dataloader, two batches an optimizer step, stopped
    # mid second epoch and resumed in new processes with ExactResume.
    for r in sliced_stream_runs:
        full = r["trainer/full"]
        assert r["trainer/stopped"]["seen"] + r["trainer/resumed"]["seen"] == full["seen"]
        # its own part: readers 2 * rank and 2 * rank + 1 of 4 (2 workers a process)
        assert set(full["read"]) == {i for i in range(STREAM) if i % 4 // 2 == r["rank"]}
    assert len({len(r["trainer/full"]["seen"]) for r in sliced_stream_runs}) == 1


def test_a_dataset_is_found_inside_wrappers_but_not_inside_large_data():
    from dataecho.torch.accelerated import _holds
    target = object()

    class Wrapper:
        def __init__(self, inner):
            self.inner = inner

    assert _holds(Wrapper(Wrapper([target])), target, 4)
    assert not _holds(Wrapper([*range(100), target]), target, 4)
    assert not _holds(Wrapper(Wrapper(Wrapper(Wrapper(Wrapper(target))))), target, 4)


def test_a_dataset_not_read_by_a_prepared_loader_is_split_by_dataecho():
    assert split_of(object()) is None


@pytest.mark.parametrize("workers", [0, 2])
def test_the_hf_trainer_on_two_processes_trains_every_example_factor_times(
        trainer_runs, workers):
    # Fails on the code before this test: with 96 examples, 69 were seen in one epoch,
    # 27 of them four times and 27 never.
    key = f"full/{workers}"
    assert collections.Counter(i for r in trainer_runs for i in r[key]["seen"]) == WHOLE
    assert all((r[key]["fresh"], r[key]["emitted"]) == (EPOCHS * N, EPOCHS * N * FACTOR)
               for r in trainer_runs)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_hf_trainer_sliced_reads_each_example_once_between_two_processes(
        trainer_runs, workers):
    # accelerator_config={"dispatch_batches": False}: each process reads half the ids
    # each epoch (before issue 33 each read all 48, twice the reading); every id is
    # still trained twice an epoch, and the counts summed over the ranks are exact.
    runs = [r[f"full/sliced/{workers}"] for r in trainer_runs]
    assert collections.Counter(i for r in runs for i in r["seen"]) == WHOLE
    assert [sum(r["reads"]) for r in runs] == [EPOCHS * N // 2] * 2
    assert [a + b for a, b in zip(runs[0]["reads"], runs[1]["reads"], strict=True)] == [EPOCHS] * N
    assert all((r["fresh"], r["emitted"]) == (EPOCHS * N, EPOCHS * N * FACTOR) for r in runs)


def test_the_hf_trainer_dispatched_reads_every_example_on_process_zero(trainer_runs):
    runs = [r["full/2"] for r in trainer_runs]
    assert runs[0]["reads"] == [EPOCHS] * N and runs[1]["reads"] == [0] * N


@pytest.mark.parametrize(("workers", "accumulation", "stop", "epochs_read"), [
    ("sliced/2", 1, 18, 2),  # the same, each process reading its own part
    (2, 1, 18, 2),  # mid second epoch: the second epoch is read again from its start
    (0, 1, 24, 1),  # after the second epoch's last batch: the third epoch only
    (0, 2, 9, 2),  # mid second epoch, two batches an optimizer step
])
def test_exact_resume_resumes_the_trainer_exactly_past_the_first_epoch(
        trainer_runs, workers, accumulation, stop, epochs_read):
    # Fails without ExactResume: the Trainer's own resume trained the second epoch's
    # first batches again (resumed in it: from its start; in the third: 80 items).
    case = f"{workers}/{accumulation}/{stop}"
    for r in trainer_runs:
        stopped, resumed = r[f"stopped/{case}"], r[f"resumed/{case}"]
        assert len(stopped["seen"]) == stop * accumulation * 4
        assert stopped["seen"] + resumed["seen"] == r[f"full/{workers}"]["seen"]
        # Counted from the resume on, the skipped batches read again.
        assert (resumed["fresh"], resumed["emitted"]) == (epochs_read * N,
                                                          epochs_read * N * FACTOR)


def _rows(n=8):
    import torch
    return [{"x": torch.full((3,), float(i)), "y": torch.tensor(float(i % 2))}
            for i in range(n)]


@pytest.mark.parametrize(("dataset", "ignore_data_skip", "error", "match"), [
    ("echo", False, ValueError, r"needs TrainingArguments\(ignore_data_skip=True\)"),
    ("auto", True, ValueError, r"Auto\(.*\) echoes by timing; pass a fixed factor"),
    ("rows", True, TypeError, r"an EchoBatches or a loader that accelerate prepared over "
                              r"an EchoDataset; got a DataLoaderShard over a list; pass the "
                              r"EchoDataset as the Trainer's train_dataset, or return "
                              r"EchoBatches\("),
])
def test_exact_resume_refuses_a_setup_it_cannot_resume_exactly_with_the_fix(
        tmp_path, dataset, ignore_data_skip, error, match):
    pytest.importorskip("transformers")
    from torch import nn
    from transformers import Trainer, TrainingArguments

    from dataecho import Auto
    from dataecho.torch import EchoDataset
    from dataecho.torch.hf import ExactResume

    class Regression(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def forward(self, x, y):
            return {"loss": (self.layer(x).squeeze(1) - y).pow(2).mean()}

    train = {"echo": EchoDataset(_rows(), factor=2), "rows": _rows(),
             "auto": EchoDataset(_rows(), factor=Auto())}[dataset]
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=2, use_cpu=True,
        report_to=[], save_strategy="no", disable_tqdm=True, ignore_data_skip=ignore_data_skip)
    trainer = Trainer(model=Regression(), args=args, train_dataset=train,
                      callbacks=[ExactResume()])
    with pytest.raises(error, match=match):
        trainer.train()


def test_echo_batches_wraps_a_prepared_loader_and_refuses_a_skip_with_the_fix():
    # Fails on the code before this test: accelerate's loader has a state_dict() that
    # raises unless it was made stateful, and EchoBatches called it at the first batch.
    import torch
    from accelerate import Accelerator
    from accelerate.data_loader import skip_first_batches
    from torch.utils.data import DataLoader

    from dataecho.torch import EchoBatches

    loader = Accelerator(cpu=True).prepare(DataLoader(torch.arange(12), batch_size=4))
    batches = EchoBatches(loader, factor=2)
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3]] * 2 + [[4, 5, 6, 7]] * 2 + [
        [8, 9, 10, 11]] * 2
    with pytest.raises(AttributeError, match=r"cannot be resumed by skipping batches .* "
                                             r"resume it exactly from its own state_dict"):
        skip_first_batches(batches, 2)
