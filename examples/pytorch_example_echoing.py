"""Example echoing in DataLoader workers, with a checkpoint mid-training and a resume.

Trains a linear classifier on scikit-learn's 8x8 digits (real data, ships with
scikit-learn). Run: python examples/pytorch_example_echoing.py
"""

from __future__ import annotations

import io

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader

from dataecho.torch import EchoDataset


def augment(example: tuple[np.ndarray, int], rng: np.random.Generator) -> tuple[torch.Tensor, int]:
    image, label = example
    shifted = np.roll(image, int(rng.integers(-1, 2)), axis=1)  # each copy its own shift
    return torch.from_numpy(shifted.reshape(-1).astype(np.float32) / 16), label


def main() -> None:
    digits = load_digits()
    data = list(zip(digits.images, digits.target.tolist(), strict=True))
    train = EchoDataset(data, augment=augment, factor=2, buffer_size=256, seed=0)
    loader = DataLoader(train, batch_size=64, num_workers=0)
    model = torch.nn.Linear(64, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    checkpoint = b""
    for epoch in range(3):
        train.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if epoch == 1 and step == 10:  # a checkpoint holds the data position too
                buf = io.BytesIO()
                torch.save({"model": model.state_dict(), "data": train.state_dict()}, buf)
                checkpoint = buf.getvalue()
        print(f"epoch {epoch}: loss {loss.item():.3f}; {train.stats()}")

    # Resume from the checkpoint: the data continues exactly where it stopped.
    state = torch.load(io.BytesIO(checkpoint))
    resumed = EchoDataset(data, augment=augment, factor=2, buffer_size=256, seed=0)
    resumed.load_state_dict(state["data"])
    batches = sum(1 for _ in DataLoader(resumed, batch_size=64))
    print(f"resumed in epoch {state['data']['epoch']}: {batches} batches left in that epoch")


if __name__ == "__main__":
    main()
