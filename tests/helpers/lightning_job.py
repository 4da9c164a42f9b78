"""One process of a two-process Lightning DDP job over an EchoDataset (run by torchrun).

Each training step records its example ids; each process writes OUT_DIR/rank<r>.json
with them and the counts summed over the ranks. Usage: lightning_job.py OUT_DIR WORKERS.
"""
import json
import pathlib
import sys
import warnings

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from dataecho.torch import EchoDataset
from dataecho.torch.distributed import stats_over_ranks

N, FACTOR, EPOCHS = 96, 2, 2


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
        return self.loader

    def training_step(self, batch, batch_idx):
        self.seen.extend(batch.tolist())
        return self.layer(batch.float()[:, None]).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    out_dir, workers = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    ds = EchoDataset(Ids(), factor=FACTOR, buffer_size=8, seed=0)
    model = Recorder(DataLoader(ds, batch_size=4, num_workers=workers))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and small runs
        trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=EPOCHS,
                            logger=False, enable_progress_bar=False,
                            enable_model_summary=False, enable_checkpointing=False)
        trainer.fit(model)
    total = stats_over_ranks(ds)
    rank = trainer.global_rank
    (out_dir / f"rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "seen": model.seen, "fresh": total.fresh_examples,
         "emitted": total.emitted_examples}))


if __name__ == "__main__":
    main()
