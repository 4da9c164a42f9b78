"""ExactResume checks the state it reads from a Trainer checkpoint before it resumes.

One process, in this one: 16 examples, factor 2, batches of 4, so an epoch is 8 batches.
A run with ``callbacks=[ExactResume()]`` saves a checkpoint at step 10 (epoch 1, 2 of
its batches trained, begun at global step 8); each test copies it, edits its
``trainer_state.json`` as damage or a mix-up would, and resumes from the copy. The
two-process runs of an EchoDataset, workers and gradient accumulation are in
tests/test_accelerated.py.

``EchoBatches`` returned by a Trainer subclass's ``get_train_dataloader``: a job on one
process and on two (torchrun, gloo), resumed in new processes
(tests/helpers/trainer_batches_job.py), and the checks of its state in this process.
"""
import collections
import json
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments

from dataecho import Auto
from dataecho.torch import EchoBatches, EchoDataset
from dataecho.torch.hf import ExactResume
from helpers.launch import run_one_process, run_two_processes

pytestmark = pytest.mark.torch

N, FACTOR, BATCH = 16, 2, 4
STEPS_PER_EPOCH = N * FACTOR // BATCH  # 8
STOP = STEPS_PER_EPOCH + 2  # the checkpoint: mid second epoch


class Recorder(nn.Module):
    """Records the ids of the examples it trains on."""

    def __init__(self):
        super().__init__()
        self.layer, self.seen = nn.Linear(3, 1), []

    def forward(self, i, x):
        self.seen += i.tolist()
        return {"loss": self.layer(x).pow(2).mean()}


ROWS = [{"i": torch.tensor(i), "x": torch.full((3,), i / N)} for i in range(N)]


def train(output_dir, max_steps, *, accumulation=1, resume=None, save_steps=None,
          callbacks=None):
    """The ids trained by one Trainer run (``save_steps``: a checkpoint every so many)."""
    args = TrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=BATCH, max_steps=max_steps,
        gradient_accumulation_steps=accumulation, ignore_data_skip=True, use_cpu=True,
        report_to=[], logging_strategy="no", disable_tqdm=True,
        save_strategy="no" if save_steps is None else "steps", save_steps=save_steps or 1)
    model = Recorder()
    Trainer(model=model, args=args, train_dataset=EchoDataset(ROWS, factor=FACTOR, seed=0),
            callbacks=[ExactResume()] if callbacks is None else callbacks
            ).train(resume_from_checkpoint=None if resume is None else str(resume))
    return model.seen


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A checkpoint at step STOP of a run with ExactResume."""
    out = tmp_path_factory.mktemp("run")
    train(out, STOP, save_steps=STOP)
    return out / f"checkpoint-{STOP}"


def resume_edited(checkpoint, tmp_path, edit, **kwargs):
    """Resumes from a copy of ``checkpoint`` whose ExactResume state ``edit`` changed."""
    copy = tmp_path / checkpoint.name
    shutil.copytree(checkpoint, copy)
    path = copy / "trainer_state.json"
    state = json.loads(path.read_text())
    edit(state["stateful_callbacks"]["ExactResume"]["attributes"], state)
    path.write_text(json.dumps(state))
    return train(tmp_path / "resumed", 3 * STEPS_PER_EPOCH, resume=copy, **kwargs)


def test_the_checkpoint_holds_the_epoch_its_batches_and_the_step_it_began_at(checkpoint):
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["global_step"] == STOP
    assert state["stateful_callbacks"]["ExactResume"]["attributes"] == {
        "epoch": 1, "batches": 2, "start_step": STEPS_PER_EPOCH}


@pytest.mark.parametrize(("accumulation", "stop"), [
    (1, STOP),
    (2, STOP // 2),  # 2 batches a step: the same place in the data
    (3, 3),  # an epoch of 8 batches is 2 steps and 2 batches carried into the next
])
def test_a_checkpoint_that_exact_resume_wrote_passes_its_checks_and_resumes_exactly(
        tmp_path, accumulation, stop):
    # The checks must not refuse what ExactResume writes, with gradient accumulation
    # too, where an epoch ends between two optimizer steps.
    total = 3 * STEPS_PER_EPOCH // accumulation
    whole = train(tmp_path / "whole", total, accumulation=accumulation)
    before = train(tmp_path / "out", stop, accumulation=accumulation, save_steps=stop)
    after = train(tmp_path / "out", total, accumulation=accumulation,
                  resume=tmp_path / "out" / f"checkpoint-{stop}")
    assert before + after == whole


def _set(key, value):
    def edit(attributes, state):
        attributes[key] = value
    return edit


def _drop(key):
    def edit(attributes, state):
        del attributes[key]
    return edit


@pytest.mark.parametrize(("edit", "error", "match"), [
    # Before these checks: the whole rest of the epoch skipped, training stopped at once.
    (_set("batches", 10**9), ValueError,
     r"batches=1000000000.*global_step 10.*2 optimizer steps.*2 batches with "
     r"gradient_accumulation_steps=1"),
    # Before: 3 batches trained again.
    (_set("batches", -3), ValueError, r"batches=-3, but it must be an int >= 0"),
    # Before: int(2.7), one batch trained again; True read as 1.
    (_set("batches", 2.7), TypeError, r"batches=2.7 of type float, but it must be an int"),
    (_set("batches", True), TypeError, r"batches=True of type bool, but it must be an int"),
    # Before: a bare TypeError of int(None).
    (_set("epoch", None), TypeError, r"epoch=None of type NoneType, but it must be an int"),
    # Before: the run went on from epoch 0.
    (_drop("epoch"), ValueError, r"lacks the key 'epoch' that ExactResume.state\(\) writes "
                                 r"\(it has 'batches', 'start_step'\)"),
    (_drop("start_step"), ValueError, r"lacks the key 'start_step'"),
    # In range, but not what 2 optimizer steps since the epoch began trained.
    (_set("batches", 1), ValueError, r"batches=1 .*global_step 10 means 2 optimizer steps"),
    (_set("start_step", 11), ValueError, r"start_step=11, but it must be an int in \[0, 10\]"),
    (_set("epoch", 0), ValueError, r"epoch=0 and start_step=8, but the first epoch begins "
                                   r"at global step 0"),
])
def test_exact_resume_refuses_a_damaged_state_naming_the_key_the_rule_and_the_fix(
        checkpoint, tmp_path, edit, error, match):
    with pytest.raises(error, match=match) as caught:
        resume_edited(checkpoint, tmp_path, edit)
    assert "resume from a checkpoint that a run with callbacks=[ExactResume()] wrote" in str(
        caught.value)


def test_exact_resume_refuses_a_state_that_is_not_a_dict(checkpoint, tmp_path):
    def edit(attributes, state):
        state["stateful_callbacks"]["ExactResume"] = [7]
    with pytest.raises(TypeError, match=r"holds 7 of type int as ExactResume's state, but it "
                                        r"must be a dict"):
        resume_edited(checkpoint, tmp_path, edit)


def test_exact_resume_refuses_a_checkpoint_saved_without_it_with_the_fix(tmp_path):
    # Before: the run restarted at epoch 0, training the first 10 batches again.
    out = tmp_path / "plain"
    train(out, STOP, save_steps=STOP, callbacks=[])
    with pytest.raises(ValueError, match=r"no state of its own in the checkpoint .*global "
                                         r"step 10.*trained without ExactResume.*start a "
                                         r"new run with callbacks=\[ExactResume\(\)\]"):
        train(tmp_path / "resumed", 3 * STEPS_PER_EPOCH, resume=out / f"checkpoint-{STOP}")


def test_exact_resume_refuses_another_gradient_accumulation_than_the_checkpoints(
        checkpoint, tmp_path):
    # 2 steps of 2 batches would be 4 batches of the epoch; the checkpoint says 2.
    with pytest.raises(ValueError, match=r"batches=2 .*2 optimizer steps.*3 to 4 batches "
                                         r"with gradient_accumulation_steps=2.*resume with "
                                         r"the gradient_accumulation_steps"):
        resume_edited(checkpoint, tmp_path, lambda attributes, state: None, accumulation=2)


class Trained(TrainerCallback):
    """Counts the batches trained."""

    def __init__(self):
        self.batches = 0

    def on_substep_end(self, args, state, control, **kwargs):
        self.batches += 1

    def on_step_end(self, args, state, control, **kwargs):
        self.batches += 1


def test_exact_resume_refuses_a_count_past_the_epochs_end_when_the_epoch_is_read(
        checkpoint, tmp_path):
    # Consistent with the global step (10 batches in 10 steps since step 0), but the
    # epoch has 8 batches: the skip passed its end. Before: the resumed run trained
    # nothing and stopped with a warning.
    def edit(attributes, state):
        attributes.update(batches=STOP, start_step=0)

    counted = Trained()
    with pytest.raises(ValueError, match=r"batches=10 .*but epoch 1 has no more than 10 "
                                         r"batches.*another data set, batch size"):
        resume_edited(checkpoint, tmp_path, edit, callbacks=[ExactResume(), counted])
    assert counted.batches == 0


# EchoBatches in the Trainer.


@pytest.fixture(scope="module", params=[1, 2], ids=["one process", "two processes"])
def batches_runs(request, tmp_path_factory):
    """Both phases of trainer_batches_job.py on 1 or 2 processes; per rank, all runs."""
    run = run_one_process if request.param == 1 else run_two_processes
    ckpt = tmp_path_factory.mktemp("checkpoints")
    first = run("trainer_batches_job.py", tmp_path_factory.mktemp("first"), "first", ckpt)
    resumed = run("trainer_batches_job.py", tmp_path_factory.mktemp("resume"), "resume", ckpt)
    pairs = [(first, resumed)] if request.param == 1 else zip(first, resumed, strict=True)
    return [{**a, **b} for a, b in pairs]


JOB_N, JOB_EPOCHS = 48, 3
#: (DataLoader workers, gradient accumulation, where the job stops), per process count:
#: mid second epoch between two copies of a batch, after its last batch, and after the
#: first epoch's last step, which has fewer batches than the others (5 a step).
JOB_CASES = {1: ["0/1/37", "2/1/48", "0/5/5"], 2: ["0/1/19", "2/1/24", "0/5/3"]}


def test_echo_batches_in_the_trainer_reads_a_new_order_each_epoch_as_the_plain_trainer(
        batches_runs):
    # Fails on the code before this test: epoch 1 trained the 192 batches of epoch 0 in
    # the same order (accelerate's loader reset its sampler to its own count of finished
    # passes, 0, since the Trainer never reads it to its end).
    steps = JOB_N * FACTOR // (BATCH * len(batches_runs))  # batches of an epoch
    for run in batches_runs:
        plain = run["plain"]["seen"]  # the plain Trainer, without the echo
        for case in JOB_CASES[len(batches_runs)]:
            seen = run[f"full/{case}"]["seen"]
            assert seen == [batch for batch in plain for _ in range(FACTOR)]
            epochs = [seen[e * steps:(e + 1) * steps] for e in range(JOB_EPOCHS)]
            assert len({json.dumps(epoch) for epoch in epochs}) == JOB_EPOCHS
    key = f"full/{JOB_CASES[len(batches_runs)][0]}"
    for e in range(JOB_EPOCHS):  # every example FACTOR times an epoch, over the processes
        trained = collections.Counter(i for run in batches_runs
                                      for batch in run[key]["seen"][e * steps:(e + 1) * steps]
                                      for i in batch)
        assert trained == {i: FACTOR for i in range(JOB_N)}


@pytest.mark.parametrize("case", range(3), ids=["mid-epoch", "epoch edge", "accumulation"])
def test_exact_resume_resumes_echo_batches_in_new_processes_to_the_uninterrupted_batches(
        batches_runs, case):
    # Fails without ExactResume: the Trainer's resume (ignore_data_skip=True) read the
    # checkpoint's epoch from its start, training its first batches again.
    key = JOB_CASES[len(batches_runs)][case]
    for run in batches_runs:
        full, stopped, resumed = run[f"full/{key}"], run[f"stopped/{key}"], run[
            f"resumed/{key}"]
        assert stopped["seen"] and resumed["seen"]
        assert stopped["seen"] + resumed["seen"] == full["seen"]
        # The counts travel in the checkpoint: the resumed run's are the whole run's,
        # this process's part of 3 epochs of 48 examples, each emitted twice.
        fresh = JOB_EPOCHS * JOB_N // len(batches_runs)
        assert (resumed["fresh"], resumed["emitted"]) == (fresh, FACTOR * fresh)
        assert (full["fresh"], full["emitted"]) == (fresh, FACTOR * fresh)


class Echoing(Trainer):
    factor = FACTOR

    def get_train_dataloader(self):
        return EchoBatches(super().get_train_dataloader(), factor=self.factor)


def train_batches(output_dir, max_steps, *, factor=FACTOR, batch=BATCH, resume=None,
                  save_steps=None):
    """The ids trained by a Trainer that echoes its batches, with ExactResume."""
    args = TrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=batch, max_steps=max_steps,
        ignore_data_skip=True, use_cpu=True, report_to=[], logging_strategy="no",
        disable_tqdm=True, save_strategy="no" if save_steps is None else "steps",
        save_steps=save_steps or 1)
    model = Recorder()
    trainer = Echoing(model=model, args=args, train_dataset=ROWS, callbacks=[ExactResume()])
    trainer.factor = factor
    trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
    return model.seen


@pytest.fixture(scope="module")
def batches_checkpoint(tmp_path_factory):
    """A checkpoint at step STOP of a Trainer echoing its batches, with ExactResume."""
    out = tmp_path_factory.mktemp("batches")
    train_batches(out, STOP, save_steps=STOP)
    return out / f"checkpoint-{STOP}"


def test_the_checkpoint_of_echo_batches_holds_its_state_as_json(batches_checkpoint):
    state = json.loads((batches_checkpoint / "trainer_state.json").read_text())
    attributes = state["stateful_callbacks"]["ExactResume"]["attributes"]
    assert {k: attributes[k] for k in ("epoch", "batches", "start_step")} == {
        "epoch": 1, "batches": 2, "start_step": STEPS_PER_EPOCH}
    assert attributes["loader"]["epoch"] == 1


@pytest.mark.parametrize(("factor", "match"), [
    (1.5, r"factor=1.5 draws its extra copies per batch, so len\(\) changes from epoch to "
          r"epoch.*pass a whole number"),
    (Auto(), r"factor=Auto\(.*\) echoes by timing.*pass a whole number"),
])
def test_exact_resume_refuses_echo_batches_without_a_whole_number_factor(
        tmp_path, factor, match):
    with pytest.raises(ValueError, match=match):
        train_batches(tmp_path, 2, factor=factor)


def test_exact_resume_refuses_a_loader_without_a_dataset_naming_what_it_takes(tmp_path):
    # Before: "got a EchoBatches over NoneType", for the loader it now resumes.
    class Listed(Trainer):
        def get_train_dataloader(self):
            return [{"i": torch.tensor([0]), "x": torch.zeros(1, 3)}] * 4

    args = TrainingArguments(output_dir=str(tmp_path), max_steps=2, use_cpu=True,
                             report_to=[], ignore_data_skip=True, disable_tqdm=True)
    with pytest.raises(TypeError, match=r"when it is an EchoBatches or a loader that "
                                        r"accelerate prepared over an EchoDataset; got a "
                                        r"list without a dataset; .*return EchoBatches\("):
        Listed(model=Recorder(), args=args, train_dataset=ROWS,
               callbacks=[ExactResume()]).train()


def _edit_copy(checkpoint, tmp_path, edit):
    copy = tmp_path / checkpoint.name
    shutil.copytree(checkpoint, copy)
    path = copy / "trainer_state.json"
    state = json.loads(path.read_text())
    edit(state["stateful_callbacks"]["ExactResume"]["attributes"])
    path.write_text(json.dumps(state))
    return copy


@pytest.mark.parametrize(("edit", "error", "match"), [
    (lambda a: a.update(loader=7), TypeError,
     r"loader=7 of type int, but it must be a dict \(the EchoBatches' state_dict\(\)\)"),
    (lambda a: a.pop("loader"), ValueError, r"lacks the key 'loader'"),
    (lambda a: a["loader"].update(epoch=0), ValueError,
     r"epoch=1 and batches=2, but its EchoBatches state \(loader\) is of epoch 0"),
    (lambda a: a["loader"].update(epoch=-1), ValueError,
     r"state of EchoBatches has epoch=-1, but it must be an int >= 0"),
])
def test_exact_resume_refuses_a_damaged_echo_batches_state(
        batches_checkpoint, tmp_path, edit, error, match):
    copy = _edit_copy(batches_checkpoint, tmp_path, edit)
    with pytest.raises(error, match=match):
        train_batches(tmp_path / "resumed", 3 * STEPS_PER_EPOCH, resume=copy)


def test_exact_resume_refuses_echo_batches_resumed_with_another_batch_size(
        batches_checkpoint, tmp_path):
    # Batches of 2: 16 steps an epoch, so global step 10 is in epoch 0, not the
    # checkpoint's 1.
    copy = _edit_copy(batches_checkpoint, tmp_path, lambda a: None)
    with pytest.raises(ValueError, match=r"epoch=1, but the Trainer resumes global step 10 "
                                         r"in epoch 0 \(16 optimizer steps an epoch.*another "
                                         r"data set, batch size"):
        train_batches(tmp_path / "resumed", 3 * STEPS_PER_EPOCH, batch=2, resume=copy)
