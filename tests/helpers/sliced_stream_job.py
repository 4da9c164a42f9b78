"""One process of a two-process job reading a stream or an adaptive factor sliced (torchrun).

accelerate's sliced mode (``dispatch_batches=False``): each process's EchoDataset
reads its own part, whose size is known only once read, so the processes' parts fill
different numbers of batches and ``EqualSteps`` ends their epochs together. The
stream (STREAM ids) splits itself by process and DataLoader worker, as WebDataset's
``split_by_node``/``split_by_worker`` do, into parts of 26 and 25 ids.

Phase ``first``: an accelerate loop over the stream (0 and 2 workers) and over a
map-style data set with ``factor=Auto()``, two epochs each; a Hugging Face Trainer over
the stream (2 workers, two batches an optimizer step, ``EqualSteps`` returned by
``get_train_dataloader``, ``ExactResume``), uninterrupted and stopped mid second epoch
with a checkpoint. Phase ``resume``: that Trainer run resumed in this new process.
Each process writes OUT_DIR/rank<r>.json: per run, per epoch the ids it read and
trained and its steps, and the batches ``EqualSteps`` dropped.
Usage: sliced_stream_job.py OUT_DIR PHASE CKPT_DIR.
"""
import json
import multiprocessing
import pathlib
import sys

import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info
from trainer_job import Recorder, StopAt  # this folder's, the Trainer job's
from transformers import Trainer, TrainingArguments

from dataecho import Auto
from dataecho.torch import EchoDataset, Streamed
from dataecho.torch.distributed import EqualSteps, stats_over_ranks
from dataecho.torch.hf import ExactResume

STREAM, MAPPED, FACTOR, BATCH, EPOCHS = 51, 48, 2, 4, 2
#: The Trainer: 2 batches an optimizer step, 3 epochs of the stream, stopped mid second.
ACCUMULATION, TRAINER_STEPS, STOP = 2, 20, 10


class Reads:
    """Each id's reads, counted in memory this process's (forked) workers share."""

    def __init__(self, n):
        self.counts = multiprocessing.Array("i", n)

    def read(self, i):
        with self.counts.get_lock():
            self.counts[i] += 1

    def since(self, before):
        """The ids read since the counts were ``before``; and the counts now."""
        now = list(self.counts)
        return [i for i, (n, b) in enumerate(zip(now, before, strict=True))
                for _ in range(n - b)], now


class Stream(IterableDataset):
    """STREAM ids, each process's worker reading its own (as split_by_node does)."""

    def __init__(self, item):
        self.reads, self.item = Reads(STREAM), item

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        reader = dist.get_rank() * workers + worker
        for i in range(reader, STREAM, dist.get_world_size() * workers):
            self.reads.read(i)
            yield self.item(i)


class Mapped(Dataset):
    def __init__(self):
        self.reads = Reads(MAPPED)

    def __len__(self):
        return MAPPED

    def __getitem__(self, i):
        self.reads.read(i)
        return torch.tensor([i])


def accelerate_loop(data, factor, workers) -> dict:
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
        dispatch_batches=False))
    ds = EchoDataset(data, factor=factor, seed=0,
                     read=Streamed(split="stream") if isinstance(data, Stream) else None)
    loader = EqualSteps(accelerator.prepare(DataLoader(ds, batch_size=BATCH,
                                                       num_workers=workers)))
    epochs, counted = [], [0] * len(data.reads.counts)
    for epoch in range(EPOCHS):
        loader.set_epoch(epoch)
        trained = [i for batch in loader for i in batch.flatten().tolist()]
        read, counted = data.reads.since(counted)
        epochs.append({"trained": trained, "read": read})
    total = stats_over_ranks(ds)
    return {"epochs": epochs, "dropped": loader.dropped, "fresh": total.fresh_examples,
            "emitted": total.emitted_examples}


class EqualTrainer(Trainer):
    def get_train_dataloader(self):
        return EqualSteps(super().get_train_dataloader())


def trainer(out: pathlib.Path, stop: int | None = None, resume: str | None = None) -> dict:
    stream = Stream(lambda i: {"ids": torch.tensor(i), "x": torch.full((3,), float(i))})
    ds = EchoDataset(stream, factor=FACTOR, seed=0, read=Streamed(split="stream"))
    model = Recorder()
    args = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=BATCH, max_steps=TRAINER_STEPS,
        dataloader_num_workers=2, gradient_accumulation_steps=ACCUMULATION, use_cpu=True,
        report_to=[], logging_strategy="no", disable_tqdm=True,
        save_strategy="no" if stop is None else "steps", save_steps=stop or 1,
        ignore_data_skip=True, accelerator_config={"dispatch_batches": False})
    callbacks = [ExactResume()] + ([] if stop is None else [StopAt(stop)])
    EqualTrainer(model=model, args=args, train_dataset=ds, callbacks=callbacks).train(
        resume_from_checkpoint=resume)
    return {"seen": model.seen, "read": stream.reads.since([0] * STREAM)[0]}


def main() -> None:
    out_dir, phase, ckpt_dir = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
    runs = {}
    if phase == "first":
        for workers in (0, 2):
            runs[f"stream/{workers}"] = accelerate_loop(
                Stream(lambda i: torch.tensor([i])), FACTOR, workers)
        runs["auto/2"] = accelerate_loop(Mapped(), Auto(max_factor=2), 2)
        runs["trainer/full"] = trainer(ckpt_dir / "full")
        runs["trainer/stopped"] = trainer(ckpt_dir / "stopped", stop=STOP)
    else:
        runs["trainer/resumed"] = trainer(ckpt_dir / "stopped",
                                          resume=str(ckpt_dir / "stopped" / f"checkpoint-{STOP}"))
    rank = dist.get_rank()
    (out_dir / f"rank{rank}.json").write_text(json.dumps({"rank": rank, **runs}))


if __name__ == "__main__":
    main()
