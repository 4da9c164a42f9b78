"""One process of a two-process accelerate job over an EchoDataset (run by torchrun).

Phase ``first``, for each split (dispatched, sliced) and 0 or 2 DataLoader workers:
three epochs uninterrupted, and the same loop stopped (CASES) with
``accelerator.save_state`` in CKPT_DIR (the loop's position registered for
checkpointing); phase ``resume`` resumes each from its checkpoint in this new process
with ``load_state`` and accelerate's ``skip_first_batches``. Each process writes
OUT_DIR/rank<r>.json: per run, the example ids it trained and the counts summed over
the ranks, and per epoch the ids this process read (its DataLoader workers included).
Usage: accelerate_job.py OUT_DIR PHASE CKPT_DIR.
"""
import json
import multiprocessing
import pathlib
import sys

import torch
from accelerate import Accelerator, skip_first_batches
from accelerate.utils import DataLoaderConfiguration
from torch.utils.data import DataLoader, Dataset

from dataecho.torch import EchoDataset
from dataecho.torch.distributed import stats_over_ranks

N, FACTOR, BATCH, EPOCHS = 48, 2, 4, 3
MID, END = 18, 24  # steps: mid second epoch, its end (12 steps an epoch on two processes)
#: (split, DataLoader workers, steps before the stop)
CASES = [(split, workers, MID) for split in ("dispatched", "sliced") for workers in (0, 2)]
CASES.append(("dispatched", 2, END))


class Ids(Dataset):
    """The ids, each read counted in memory this process's (forked) workers share."""

    def __init__(self):
        self.reads = multiprocessing.Array("i", N)

    def __len__(self):
        return N

    def __getitem__(self, i):
        with self.reads.get_lock():
            self.reads[i] += 1
        return torch.tensor([i])

    def read_since(self, before):
        """{id: reads} since the counts were ``before``; and the counts now."""
        now = list(self.reads)
        return {i: n - b for i, (n, b) in enumerate(zip(now, before, strict=True)) if n > b}, now


class Wrapped(torch.utils.data.IterableDataset):
    """A thin wrapper of the user's own that iterates the EchoDataset."""

    def __init__(self, inner):
        self.inner = inner

    def __iter__(self):
        return iter(self.inner)


class Progress:
    """Where the loop is, saved and loaded with the accelerator's state."""

    def __init__(self):
        self.epoch, self.batches = 0, 0  # the epoch, and its batches trained

    def state_dict(self):
        return {"epoch": self.epoch, "batches": self.batches}

    def load_state_dict(self, state):
        self.epoch, self.batches = state["epoch"], state["batches"]


def train(split: str, workers: int, ckpt: pathlib.Path, stop: int | None = None,
          resume: bool = False, stateful: bool = False, wrap: bool = False) -> dict:
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
        dispatch_batches=split == "dispatched", use_stateful_dataloader=stateful))
    ids = Ids()
    ds = EchoDataset(ids, factor=FACTOR, buffer_size=8, seed=0)
    read = Wrapped(ds) if wrap else ds
    loader = accelerator.prepare(DataLoader(read, batch_size=BATCH, num_workers=workers))
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    if resume:
        accelerator.load_state(str(ckpt))
    seen, steps, reads, counted = [], 0, [], [0] * N
    for epoch in range(progress.epoch, EPOCHS):
        loader.set_epoch(epoch)  # accelerate's loader counts its passes from 0 in a process
        # A stateful loader restores its own position; a plain one skips, reading again.
        skip = progress.batches if epoch == progress.epoch and not stateful else 0
        progress.epoch, progress.batches = epoch, skip
        for batch in skip_first_batches(loader, skip) if skip else loader:
            seen.extend(batch.flatten().tolist())
            steps, progress.batches = steps + 1, progress.batches + 1
            if accelerator.gradient_state.end_of_dataloader:
                progress.epoch, progress.batches = epoch + 1, 0
            if steps == stop:
                accelerator.save_state(str(ckpt))
                accelerator.wait_for_everyone()  # process 0 writes its files last
                break
        else:
            read, counted = ids.read_since(counted)
            reads.append(read)
            continue
        break
    total = stats_over_ranks(ds)
    return {"seen": seen, "fresh": total.fresh_examples, "emitted": total.emitted_examples,
            "reads": reads}


def main() -> None:
    out_dir, phase, ckpt_dir = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
    runs = {}
    for split, workers, stop in CASES:
        key, case = f"{split}/{workers}", f"{split}/{workers}/{stop}"
        ckpt = ckpt_dir / case.replace("/", "-")
        if phase == "first":
            if f"full/{key}" not in runs:
                runs[f"full/{key}"] = train(split, workers, ckpt_dir / "full")
            runs[f"stopped/{case}"] = train(split, workers, ckpt, stop=stop)
        else:
            runs[f"resumed/{case}"] = train(split, workers, ckpt, resume=True)
    if phase == "first":  # a StatefulDataLoader's first epoch, on two processes
        runs["stateful"] = train("dispatched", 0, ckpt_dir / "stateful", stateful=True)
        for split, workers in (("dispatched", 0), ("sliced", 2)):  # inside a wrapper
            runs[f"wrapped/{split}/{workers}"] = train(split, workers, ckpt_dir / "wrapped",
                                                       wrap=True)
    rank = torch.distributed.get_rank()
    (out_dir / f"rank{rank}.json").write_text(json.dumps({"rank": rank, **runs}))


if __name__ == "__main__":
    main()
