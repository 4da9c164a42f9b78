"""One process of a two-process Lightning DDP job over an EchoDataset (run by torchrun).

Each training step records its example ids. The job trains a DataLoader(EchoDataset)
for two epochs, then trains a LightningLoader(StatefulDataLoader(EchoDataset)) to a
checkpoint at step RESUME_AT (in the second epoch) and resumes it in a new Trainer.
Each process writes OUT_DIR/rank<r>.json with the ids of the first run, the counts
summed over the ranks, the ids of the interrupted run, before and after the resume,
and the fresh examples the resumed run's data set counted (its rank's).
Usage: lightning_job.py OUT_DIR WORKERS.
"""
import json
import pathlib
import sys
import warnings

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from dataecho.torch import EchoDataset
from dataecho.torch.distributed import stats_over_ranks
from dataecho.torch.lightning import LightningLoader

N, FACTOR, EPOCHS = 96, 2, 2
RESUME_AT = 30  # of 24 steps an epoch on each rank: mid-way through the second epoch


class Ids(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.tensor(i)


class Recorder(L.LightningModule):
    def __init__(self, loader):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.loader, self.seen = loader, []

    def train_dataloader(self):
        if callable(self.loader):  # a maker that needs the trainer
            self.loader = self.loader(self.trainer)
        return self.loader

    def training_step(self, batch, batch_idx):
        self.seen.extend(batch.tolist())
        return self.layer(batch.float()[:, None]).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(model, ckpt_path=None, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and small runs
        trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False,
                            enable_progress_bar=False, enable_model_summary=False,
                            **options)
        trainer.fit(model, ckpt_path=ckpt_path)
    return trainer


def main() -> None:
    out_dir, workers = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    ds = EchoDataset(Ids(), factor=FACTOR, buffer_size=8, seed=0)
    model = Recorder(DataLoader(ds, batch_size=4, num_workers=workers))
    trainer = fit(model, max_epochs=EPOCHS, enable_checkpointing=False)
    total = stats_over_ranks(ds)

    def resumable(trainer):
        ds = EchoDataset(Ids(), factor=FACTOR, buffer_size=8, seed=0)
        return LightningLoader(StatefulDataLoader(ds, batch_size=4, num_workers=workers),
                               trainer)

    saver = ModelCheckpoint(dirpath=out_dir / "checkpoints", every_n_train_steps=RESUME_AT)
    before = Recorder(resumable)
    fit(before, max_steps=RESUME_AT, callbacks=[saver])
    (path,) = (out_dir / "checkpoints").glob("*.ckpt")
    after = Recorder(resumable)
    fit(after, ckpt_path=path, max_epochs=EPOCHS, enable_checkpointing=False)
    rank = trainer.global_rank
    (out_dir / f"rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "seen": model.seen, "fresh": total.fresh_examples,
         "emitted": total.emitted_examples, "before": before.seen, "after": after.seen,
         "resumed_fresh": after.loader.stats().fresh_examples}))


if __name__ == "__main__":
    main()
