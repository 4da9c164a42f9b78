"""Batch echoing under PyTorch Lightning: one line in a LightningDataModule.

Trains a small classifier on scikit-learn's 8x8 digits for two epochs on the CPU; each
batch the DataLoader makes is used for two optimizer steps. Lightning checkpoints the
EchoBatches state with the rest and tells it each epoch.
Run: python examples/lightning_echo.py
"""

from __future__ import annotations

import lightning as L
import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

from dataecho.torch import EchoBatches


class Digits(L.LightningDataModule):
    def setup(self, stage: str) -> None:
        digits = load_digits()
        x = torch.tensor(digits.data, dtype=torch.float32) / 16  # pixels are 0..16
        y = torch.tensor(digits.target)
        self.train, self.test = TensorDataset(x[:1500], y[:1500]), (x[1500:], y[1500:])

    def train_dataloader(self) -> EchoBatches:
        loader = DataLoader(self.train, batch_size=64, shuffle=True,
                            generator=torch.Generator().manual_seed(0))
        return EchoBatches(loader, factor=2)  # the one line: each batch, two steps


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 10))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=3e-3)


def main() -> None:
    L.seed_everything(0, verbose=False)  # the model's initial weights
    data, model = Digits(), Classifier()
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, datamodule=data)
    loader = trainer.train_dataloader  # the EchoBatches the datamodule returned
    stats = loader.stats()
    x, y = data.test
    with torch.no_grad():
        accuracy = (model.net(x).argmax(1) == y).float().mean().item()
    print(f"{trainer.global_step} steps from {stats.fresh_items} fresh batches: "
          f"fresh {stats.fresh_examples} examples, emitted {stats.emitted_examples}, "
          f"realised factor {stats.realised_factor:.2f}; held-out accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
