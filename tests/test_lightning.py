"""PyTorch Lightning: echoing loaders train, count and resume through Lightning checkpoints.

Each run records the example ids of the batches its training steps got; a run resumed
from a checkpoint must continue the uninterrupted run's sequence exactly.
"""

import collections
import functools
import multiprocessing
import pathlib
import tempfile
import warnings

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, DistributedSampler

from dataecho.torch import EchoBatches, EchoDataset
from dataecho.torch.lightning import LightningLoader

pytestmark = pytest.mark.torch

N, BATCH, FACTOR, EPOCHS = 10, 2, 2, 3
STEPS_PER_EPOCH = FACTOR * N // BATCH


class Recorder(L.LightningModule):
    """A one-weight model whose steps record the ids in their batch, by epoch."""

    def __init__(self, make_loader):
        super().__init__()
        self.weight = torch.nn.Linear(1, 1)
        self.make_loader = make_loader
        self.seen, self.epochs = [], []

    def train_dataloader(self):
        self.loader = self.make_loader(self.trainer)
        return self.loader

    def training_step(self, batch, batch_idx):
        self.seen.append(batch.tolist())
        self.epochs.append(self.current_epoch)
        return self.weight(batch.float()[:, None]).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(make_loader, ckpt_path=None, callbacks=(), **limits):
    model = Recorder(make_loader)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice: workers, few batches, resuming
        trainer = L.Trainer(accelerator="cpu", devices=1, logger=False,
                            enable_progress_bar=False, enable_model_summary=False,
                            enable_checkpointing=bool(callbacks), callbacks=list(callbacks),
                            **limits)
        trainer.fit(model, ckpt_path=ckpt_path)
    return model, trainer


def resumed(make_loader, step, tmp_path):
    """Trains ``step`` steps with a checkpoint at the last, then a fresh run from it."""
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=step, save_top_k=-1)
    first, _ = fit(make_loader, callbacks=[saver], max_steps=step)
    (path,) = tmp_path.glob(f"*step={step}.ckpt")
    second, _ = fit(make_loader, ckpt_path=str(path), max_epochs=EPOCHS)
    return first, second


def shuffled_batches(trainer):
    # DistributedSampler (one rank) shuffles per epoch from its seed, so that the
    # uninterrupted run is reproducible and each epoch's order is different.
    data = torch.arange(N)
    sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=7)
    return EchoBatches(DataLoader(data, batch_size=BATCH, sampler=sampler), FACTOR)


@functools.cache
def uninterrupted(make_loader):
    model, _ = fit(make_loader, max_epochs=EPOCHS)
    return model.seen, model.loader.stats()


def test_lightning_takes_factor_steps_per_batch_and_stats_count_fresh_examples():
    model, trainer = fit(lambda _: EchoBatches(DataLoader(torch.arange(N), batch_size=BATCH),
                                               FACTOR), max_epochs=2)
    batches = len(model.loader.loader)
    assert trainer.global_step == 2 * FACTOR * batches
    assert [model.epochs.count(e) for e in (0, 1)] == [FACTOR * batches] * 2
    assert model.seen[0] == model.seen[1] != model.seen[2]  # copies are adjacent
    stats = model.loader.stats()
    assert stats.fresh_examples == 2 * N and stats.realised_factor == FACTOR


def test_a_distributed_sampler_inside_gets_each_lightning_epoch():
    # Lightning passes the epoch to loader.sampler.set_epoch; EchoBatches forwards it.
    seen, _ = uninterrupted(shuffled_batches)
    sampler = DistributedSampler(torch.arange(N), num_replicas=1, rank=0, shuffle=True, seed=7)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        order = list(sampler)
        expected = [order[i:i + BATCH] for i in range(0, N, BATCH)]
        first_copies = seen[epoch * STEPS_PER_EPOCH:(epoch + 1) * STEPS_PER_EPOCH:FACTOR]
        assert first_copies == expected, f"epoch {epoch}"


@pytest.mark.parametrize("step", [
    3,                    # between the two copies of a batch
    4,                    # between two batches
    STEPS_PER_EPOCH - 1,  # between the copies of the epoch's last batch
    STEPS_PER_EPOCH,      # after the epoch's last step: the next epoch must follow
    STEPS_PER_EPOCH + 3,  # in the second epoch
])
def test_resume_through_a_lightning_checkpoint_continues_exactly(step, tmp_path):
    seen, stats = uninterrupted(shuffled_batches)
    first, second = resumed(shuffled_batches, step, tmp_path)
    assert first.seen == seen[:step]
    assert first.seen + second.seen == seen
    assert second.loader.stats() == stats  # the counts travel in the checkpoint


def test_resume_from_an_end_of_epoch_checkpoint_continues_exactly(tmp_path):
    # Lightning does not restore the loader's state from a checkpoint of a finished
    # epoch; the epoch it passes on still gives the right order.
    seen, _ = uninterrupted(shuffled_batches)
    first, _ = fit(shuffled_batches, callbacks=[ModelCheckpoint(dirpath=tmp_path)],
                   max_epochs=1)
    (path,) = tmp_path.glob("*.ckpt")
    second, _ = fit(shuffled_batches, ckpt_path=str(path), max_epochs=EPOCHS)
    assert first.seen + second.seen == seen
    # Nor the counts: the new loader's stats start at the resume.
    assert second.loader.stats().fresh_examples == (EPOCHS - 1) * N


def echoed_examples(num_workers, trainer):
    return DataLoader(EchoDataset(list(range(N)), factor=FACTOR, buffer_size=4, seed=0),
                      batch_size=BATCH, num_workers=num_workers)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_lightning_trains_example_echoing_with_factor_copies_per_example(num_workers):
    # With workers (not persistent), each epoch's workers are new copies of the
    # dataset; Lightning calls no set_epoch on it, and still each epoch is a new one.
    model, trainer = fit(functools.partial(echoed_examples, num_workers), max_epochs=2)
    assert trainer.global_step == 2 * STEPS_PER_EPOCH
    for epoch in (0, 1):
        ids = [i for b, e in zip(model.seen, model.epochs, strict=True) if e == epoch
               for i in b]
        assert sorted(ids) == sorted(list(range(N)) * FACTOR), f"epoch {epoch}"
    assert model.seen[:STEPS_PER_EPOCH] != model.seen[STEPS_PER_EPOCH:]  # a new order
    stats = model.loader.dataset.stats()
    assert stats.fresh_examples == 2 * N and stats.realised_factor == FACTOR


@functools.cache
def echoing(num_workers):
    """A maker of LightningLoader(StatefulDataLoader(EchoDataset)), one per worker count."""
    sdl = pytest.importorskip("torchdata.stateful_dataloader")

    def make(trainer):
        data = EchoDataset(list(range(N)), factor=FACTOR, buffer_size=4, seed=0)
        return LightningLoader(sdl.StatefulDataLoader(data, batch_size=BATCH,
                                                      num_workers=num_workers), trainer)

    return make


@functools.cache
def resumed_echoing(num_workers, step):
    """The ids trained before and after a resume at ``step``, and the stats at the end."""
    with tempfile.TemporaryDirectory() as tmp:
        first, second = resumed(echoing(num_workers), step, pathlib.Path(tmp))
    return first.seen, second.seen, second.loader.stats()


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("step", [
    3,                    # mid-epoch: Lightning has read batch 4 ahead of the step
    STEPS_PER_EPOCH,      # the epoch's last step: the loader had ended
    STEPS_PER_EPOCH + 3,  # in the second epoch
])
def test_example_echoing_resumes_exactly_through_a_lightning_checkpoint(step, num_workers):
    seen, _ = uninterrupted(echoing(num_workers))
    before, after, _ = resumed_echoing(num_workers, step)
    assert before == seen[:step]
    assert before + after == seen


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("step", [3, STEPS_PER_EPOCH, STEPS_PER_EPOCH + 3])
def test_stats_of_example_echoing_resumed_through_a_lightning_checkpoint_are_the_runs(
        step, num_workers):
    # The counts travel in the checkpoint, inside the loader's state: with workers,
    # in theirs, the finished epochs' counts included.
    _, stats = uninterrupted(echoing(num_workers))
    assert resumed_echoing(num_workers, step)[2] == stats


def test_a_run_resumed_from_an_epochs_last_step_checkpoints_the_next_epoch_by_its_batches(
        tmp_path):
    # Lightning's own count of batches goes on from the last epoch's there, so it
    # cannot say which state to save; the loader's count can.
    first_saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=STEPS_PER_EPOCH)
    fit(echoing(0), callbacks=[first_saver], max_steps=STEPS_PER_EPOCH)
    (path,) = tmp_path.glob("*.ckpt")
    saver = ModelCheckpoint(dirpath=tmp_path / "later", every_n_train_steps=2)
    fit(echoing(0), ckpt_path=str(path), callbacks=[saver], max_steps=STEPS_PER_EPOCH + 2)
    (later,) = (tmp_path / "later").glob("*.ckpt")
    checkpoint = torch.load(later, weights_only=False)
    (state,) = checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert (state["epoch"], state["batches"], state["ended"]) == (1, 2, False)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_example_echoing_resumed_from_an_end_of_epoch_checkpoint_reads_the_next_epoch(
        num_workers, tmp_path):
    # Lightning restores no loader state from a finished epoch's checkpoint; the
    # LightningLoader reads the epoch from the trainer before its first batch.
    seen, _ = uninterrupted(echoing(num_workers))
    first, _ = fit(echoing(num_workers), callbacks=[ModelCheckpoint(dirpath=tmp_path)],
                   max_epochs=1)
    (path,) = tmp_path.glob("*.ckpt")
    second, _ = fit(echoing(num_workers), ckpt_path=str(path), max_epochs=EPOCHS)
    assert first.seen + second.seen == seen
    # Nor the counts it holds: the new data set's stats start at the resume.
    assert second.loader.stats().fresh_examples == (EPOCHS - 1) * N


def test_a_fit_stopped_mid_epoch_stops_the_wrapped_loaders_workers():
    # Lightning stops the workers of the loader it was given; those of the loader
    # inside a LightningLoader would otherwise live until the garbage collector runs.
    model, _ = fit(echoing(2), max_steps=3)
    assert model.seen  # it trained, with workers, and stopped mid-epoch
    assert multiprocessing.active_children() == []


def test_lightning_loader_refuses_a_loader_it_cannot_resume_and_a_trainer_it_cannot_read():
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    data = EchoDataset(list(range(N)), factor=FACTOR)
    with pytest.raises(TypeError, match=r"loader must checkpoint .* got DataLoader.*"
                                        r"StatefulDataLoader"):
        LightningLoader(DataLoader(data, batch_size=BATCH), trainer)
    sized = EchoBatches(stateful_loader(torch.arange(N)), FACTOR)
    with pytest.raises(TypeError, match=r"loader must have no len\(\).* len\(\) 10"):
        LightningLoader(sized, trainer)
    with pytest.raises(TypeError, match=r"trainer must be the lightning.Trainer .* got "
                                        r"a Recorder.*self.trainer"):
        LightningLoader(stateful_loader(data), Recorder(None))


@pytest.mark.parametrize("inner", [None, {}])
def test_lightning_loader_refuses_a_mid_epoch_state_without_the_loaders_state(inner):
    # Before: the resume read the epoch again from its start, and trained its first 3
    # batches (6 examples) a second time.
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    loader = echoing(0)(trainer)
    state = {"epoch": 0, "batches": 3, "ended": False, "loader": inner}
    with pytest.raises(ValueError, match=rf"state of LightningLoader has loader={inner!r} "
                                         r"with batches=3 of epoch 0 trained.*must hold the "
                                         r"wrapped loader's state"):
        loader.load_state_dict(state)


def test_lightning_loader_loads_a_state_taken_before_its_first_batch():
    # The state before any batch holds no loader state, and needs none.
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    fresh, loader = echoing(0)(trainer), echoing(0)(trainer)
    loader.load_state_dict(fresh.state_dict())
    assert len(list(loader)) == STEPS_PER_EPOCH


class ReadsTheStepBudget(Recorder):
    def configure_optimizers(self):
        assert self.trainer.estimated_stepping_batches  # reads the loader early
        return super().configure_optimizers()


def test_lightning_loader_refuses_to_read_an_epoch_the_trainer_does_not_train(tmp_path):
    # estimated_stepping_batches makes Lightning read the loader before it restores the
    # checkpoint (Lightning#20550): the loader starts epoch 0 while the trainer resumes
    # epoch 1.
    fit(echoing(0), callbacks=[ModelCheckpoint(dirpath=tmp_path)], max_epochs=1)
    (path,) = tmp_path.glob("*.ckpt")
    model = ReadsTheStepBudget(echoing(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                            enable_checkpointing=False, max_epochs=EPOCHS)
        with pytest.raises(RuntimeError, match=r"reads epoch 0, but the trainer trains "
                                               r"epoch 1.*estimated_stepping_batches"):
            trainer.fit(model, ckpt_path=str(path))


class ReadsItsOwnBatches(Recorder):
    def training_step(self, dataloader_iter):
        return super().training_step(next(dataloader_iter), 0)


def test_lightning_loader_refuses_a_training_step_that_reads_batches_itself():
    # The trainer's count of steps then says nothing about the batches taken.
    model = ReadsItsOwnBatches(echoing(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's: dataloader_iter is experimental
        trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                            enable_checkpointing=False, max_steps=2)
        with pytest.raises(TypeError, match=r"ReadsItsOwnBatches.training_step takes "
                                            r"dataloader_iter.*training_step\(batch, "):
            trainer.fit(model)


def stateful_loader(data):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    return sdl.StatefulDataLoader(data, batch_size=BATCH)


def test_lightning_runs_each_epoch_at_most_the_len_it_read_first():
    # A fractional factor draws each epoch's extra copies anew, so len() changes with
    # the epoch; Lightning reads it once and stops every epoch there (the README's
    # reason to prefer an integer factor).
    def make(trainer=None):
        return EchoBatches(DataLoader(torch.arange(20), batch_size=1), 1.5, seed=4)

    lens = []
    probe = make()
    for epoch in range(4):
        probe.set_epoch(epoch)
        lens.append(len(probe))
    model, _ = fit(make, max_epochs=4)
    steps = [model.epochs.count(epoch) for epoch in range(4)]
    assert lens == [31, 30, 32, 28]
    assert steps == [31, 30, 31, 28]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_ddp_on_two_processes_trains_every_example_factor_times_and_resumes_exactly(
        num_workers, tmp_path):
    from helpers.launch import run_two_processes

    ranks = run_two_processes("lightning_job.py", tmp_path, num_workers)
    trained = collections.Counter(i for r in ranks for i in r["seen"])
    assert trained == {i: 2 * 2 for i in range(96)}  # factor 2, two epochs
    assert all((r["fresh"], r["emitted"]) == (2 * 96, 2 * 192) for r in ranks)
    # Resumed in the second epoch from a checkpoint that rank 0 wrote, each rank's
    # LightningLoader continues its own part of the data exactly.
    assert all(r["before"] + r["after"] == r["seen"] for r in ranks)
    assert all(r["resumed_fresh"] == 2 * 96 // 2 for r in ranks)  # two epochs of its half

