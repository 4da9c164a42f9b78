"""Batch echoing around an existing DataLoader: one line, exact len(), in-place check.

Run: python examples/pytorch_batch_echoing.py
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from dataecho.torch import EchoBatches


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(1000, 20, generator=generator),
                         torch.randint(0, 2, (1000,), generator=generator))
    sampler = DistributedSampler(data, num_replicas=1, rank=0, seed=0)  # DDP-style order
    loader = EchoBatches(DataLoader(data, batch_size=100, sampler=sampler), factor=1.5)
    model = torch.nn.Linear(20, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        loader.set_epoch(epoch)  # reaches the DistributedSampler
        steps = 0
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
        print(f"epoch {epoch}: {steps} steps (len said {len(loader)}); {loader.stats()}")
    try:
        for x, _ in EchoBatches(DataLoader(data, batch_size=100), factor=2):
            x.mul_(0.5)  # an in-place change to the input would corrupt the next copy
    except RuntimeError as error:
        print(f"caught: {error}")


if __name__ == "__main__":
    main()
