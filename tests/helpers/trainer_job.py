"""One process of a two-process Hugging Face Trainer job over an EchoDataset (torchrun).

The model records the example ids of every step. Phase ``first``, for each of CASES:
three epochs uninterrupted, and the same run stopped with a checkpoint in CKPT_DIR;
phase ``resume`` resumes each stopped run from its checkpoint, in this new process,
with :class:`dataecho.torch.hf.ExactResume`. Each process writes OUT_DIR/rank<r>.json:
per run, the ids it trained, the counts summed over the ranks (after the run) and the
ids this process read (its DataLoader workers included). Runs keyed "sliced" pass
``accelerator_config={"dispatch_batches": False}``. Usage: trainer_job.py OUT_DIR PHASE
CKPT_DIR.
"""
import json
import multiprocessing
import pathlib
import sys

import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import Trainer, TrainerCallback, TrainingArguments

from dataecho.torch import EchoDataset
from dataecho.torch.distributed import stats_over_ranks
from dataecho.torch.hf import ExactResume

N, FACTOR, BATCH, EPOCHS = 48, 2, 4, 3
STEPS_PER_EPOCH = N * FACTOR // (BATCH * 2)  # 12, on two processes
#: (DataLoader workers, gradient accumulation, optimizer steps before the stop): mid
#: second epoch, after the second epoch's last batch, and mid second epoch again with
#: two batches a step (the order of the batches is the same).
CASES = ((2, 1, STEPS_PER_EPOCH + STEPS_PER_EPOCH // 2), (0, 1, 2 * STEPS_PER_EPOCH),
         (0, 2, (STEPS_PER_EPOCH + STEPS_PER_EPOCH // 2) // 2))
#: The same with dispatch_batches=False: each process reads its own part.
SLICED = ((2, 1, STEPS_PER_EPOCH + STEPS_PER_EPOCH // 2),)


class Ids(Dataset):
    """The ids, each read counted in memory this process's (forked) workers share."""

    def __init__(self):
        self.reads = multiprocessing.Array("i", N)

    def __len__(self):
        return N

    def __getitem__(self, i):
        with self.reads.get_lock():
            self.reads[i] += 1
        return {"ids": torch.tensor(i), "x": torch.full((3,), float(i))}


class Recorder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.seen = []

    def forward(self, ids, x):
        self.seen.extend(ids.tolist())
        return {"loss": self.layer(x).pow(2).mean()}


class StopAt(TrainerCallback):
    """Stops the run after ``step`` steps: the job is interrupted there."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def train(out: pathlib.Path, workers: int, accumulation: int = 1, stop: int | None = None,
          resume: str | None = None, sliced: bool = False) -> dict:
    ids = Ids()
    ds = EchoDataset(ids, factor=FACTOR, buffer_size=8, seed=0)
    model = Recorder()
    args = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=BATCH,
        max_steps=EPOCHS * STEPS_PER_EPOCH // accumulation, dataloader_num_workers=workers,
        gradient_accumulation_steps=accumulation,
        use_cpu=True, report_to=[], logging_strategy="no", disable_tqdm=True,
        save_strategy="no" if stop is None else "steps", save_steps=stop or 1,
        ignore_data_skip=True,
        accelerator_config={"dispatch_batches": False} if sliced else None)
    callbacks = [ExactResume()] + ([] if stop is None else [StopAt(stop)])
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=callbacks)
    trainer.train(resume_from_checkpoint=resume)
    total = stats_over_ranks(ds)
    return {"seen": model.seen, "fresh": total.fresh_examples,
            "emitted": total.emitted_examples, "reads": list(ids.reads)}


def main() -> None:
    out_dir, phase, ckpt_dir = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
    runs = {}
    for sliced, cases in ((False, CASES), (True, SLICED)):
        split = "sliced/" if sliced else ""
        for workers, accumulation, stop in cases:
            if phase == "first" and f"full/{split}{workers}" not in runs:
                runs[f"full/{split}{workers}"] = train(ckpt_dir / "full", workers,
                                                       sliced=sliced)
            case = f"{split}{workers}/{accumulation}/{stop}"
            out = ckpt_dir / case.replace("/", "-")
            if phase == "first":
                runs[f"stopped/{case}"] = train(out, workers, accumulation, stop=stop,
                                                sliced=sliced)
            else:
                runs[f"resumed/{case}"] = train(out, workers, accumulation, sliced=sliced,
                                                resume=str(out / f"checkpoint-{stop}"))
    if phase == "first":  # without workers too
        runs["full/sliced/0"] = train(ckpt_dir / "full", 0, sliced=True)
    rank = torch.distributed.get_rank()
    (out_dir / f"rank{rank}.json").write_text(json.dumps({"rank": rank, **runs}))


if __name__ == "__main__":
    main()
