"""One process of a two-process Hugging Face Trainer job over an EchoDataset (torchrun).

The model records the example ids of every step; each process writes
OUT_DIR/rank<r>.json with them and the counts summed over the ranks.
Usage: trainer_job.py OUT_DIR NUM_WORKERS.
"""
import json
import pathlib
import sys

import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

from dataecho.torch import EchoDataset
from dataecho.torch.distributed import stats_over_ranks

N, FACTOR, BATCH = 96, 2, 4


class Ids(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return {"ids": torch.tensor(i), "x": torch.full((3,), float(i))}


class Recorder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.seen = []

    def forward(self, ids, x):
        self.seen.extend(ids.tolist())
        return {"loss": self.layer(x).pow(2).mean()}


def main() -> None:
    out_dir, workers = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    ds = EchoDataset(Ids(), factor=FACTOR, buffer_size=8, seed=0)
    model = Recorder()
    steps_per_epoch = N * FACTOR // (BATCH * 2)
    args = TrainingArguments(
        output_dir=str(out_dir / "trainer"), per_device_train_batch_size=BATCH,
        max_steps=2 * steps_per_epoch, dataloader_num_workers=workers, use_cpu=True,
        report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=ds)
    trainer.train()
    total = stats_over_ranks(ds)
    rank = trainer.args.process_index
    (out_dir / f"rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "seen": model.seen, "fresh": total.fresh_examples,
         "emitted": total.emitted_examples}))


if __name__ == "__main__":
    main()
