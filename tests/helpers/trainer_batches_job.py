"""One process of a Hugging Face Trainer job that echoes batches with EchoBatches.

Runs as one plain process or under torchrun (gloo). A Trainer subclass returns
``EchoBatches(super().get_train_dataloader(), factor=2)``; the model records the ids of
every batch it trains. Phase ``first``: the plain Trainer (no echo) and, for each of
CASES, three epochs uninterrupted and the same run stopped with a checkpoint in
CKPT_DIR; phase ``resume`` resumes each stopped run from its checkpoint, in this new
process, with :class:`dataecho.torch.hf.ExactResume`. Each process writes
OUT_DIR/rank<r>.json: per run, its batches and the counts of its EchoBatches.
Usage: trainer_batches_job.py OUT_DIR PHASE CKPT_DIR.
"""
import json
import pathlib
import sys

import torch
from torch import nn
from trainer_job import StopAt  # run as a script: this folder is on the path
from transformers import Trainer, TrainingArguments

from dataecho.torch import EchoBatches
from dataecho.torch.hf import ExactResume

N, FACTOR, BATCH, EPOCHS = 48, 2, 4, 3
PROCESSES = int(__import__("os").environ.get("WORLD_SIZE", "1"))
STEPS = N * FACTOR // (BATCH * PROCESSES)  # batches of an epoch: 24 on one process, 12 on two
#: (DataLoader workers, gradient accumulation, optimizer steps before the stop): mid
#: second epoch, between the two copies of a batch; after the second epoch's last batch;
#: after the first epoch's last step, which holds fewer batches than the others (5 a
#: step).
CASES = ((0, 1, STEPS + STEPS // 2 + 1), (2, 1, 2 * STEPS), (0, 5, -(-STEPS // 5)))
ROWS = [{"ids": torch.tensor(i), "x": torch.full((3,), i / N)} for i in range(N)]


class Recorder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer, self.seen = nn.Linear(3, 1), []

    def forward(self, ids, x):
        self.seen.append(ids.tolist())
        return {"loss": self.layer(x).pow(2).mean()}


class Echoing(Trainer):
    def get_train_dataloader(self):
        self.echoed = EchoBatches(super().get_train_dataloader(), factor=FACTOR)
        return self.echoed


def train(out, workers=0, accumulation=1, stop=None, resume=None, echo=True):
    per_epoch = -(-STEPS // accumulation) if echo else STEPS // FACTOR
    args = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=BATCH,
        max_steps=EPOCHS * per_epoch, dataloader_num_workers=workers,
        gradient_accumulation_steps=accumulation, use_cpu=True, report_to=[],
        logging_strategy="no", disable_tqdm=True, ignore_data_skip=True,
        save_strategy="no" if stop is None else "steps", save_steps=stop or 1)
    model = Recorder()
    callbacks = [ExactResume()] + ([] if stop is None else [StopAt(stop)])
    trainer = (Echoing if echo else Trainer)(model=model, args=args, train_dataset=ROWS,
                                             callbacks=callbacks if echo else [])
    trainer.train(resume_from_checkpoint=resume)
    if not echo:
        return {"seen": model.seen}
    stats = trainer.echoed.stats()
    return {"seen": model.seen, "fresh": stats.fresh_examples,
            "emitted": stats.emitted_examples, "batches": stats.batches}


def main() -> None:
    out_dir, phase, ckpt_dir = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
    runs = {}
    if phase == "first":
        runs["plain"] = train(ckpt_dir / "plain", echo=False)
    for workers, accumulation, stop in CASES:
        case = f"{workers}/{accumulation}/{stop}"
        out = ckpt_dir / case.replace("/", "-")
        if phase == "first":
            runs[f"full/{case}"] = train(ckpt_dir / "full", workers, accumulation)
            runs[f"stopped/{case}"] = train(out, workers, accumulation, stop=stop)
        else:
            runs[f"resumed/{case}"] = train(out, workers, accumulation,
                                            resume=str(out / f"checkpoint-{stop}"))
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    rank = torch.distributed.get_rank() if distributed else 0
    (out_dir / f"rank{rank}.json").write_text(json.dumps({"rank": rank, **runs}))


if __name__ == "__main__":
    main()
