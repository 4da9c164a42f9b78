"""Example echoing for a WebDataset pipeline you already have: one line, in the workers.

Writes 4,096 Fashion-MNIST training images (real data, Debian's dataset-fashion-mnist)
into 8 WebDataset tar shards, reads them back with the usual ``wds.WebDataset``
pipeline, and wraps it in ``EchoDataset``: every decoded image is used twice, each copy
flipped and shifted anew, inside the two DataLoader workers (WebDataset splits the
shards between them). A checkpoint taken mid-epoch with torchdata's
``StatefulDataLoader`` resumes exactly. Run: python examples/webdataset_echo.py
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import numpy as np
import torch
import webdataset as wds
from PIL import Image
from torchdata.stateful_dataloader import StatefulDataLoader

from dataecho.datasets.fashion_mnist import load_fashion_mnist
from dataecho.torch import EchoDataset

SHARDS, PER_SHARD = 8, 512


def write_shards(root: Path) -> list[str]:
    """Stands in for shards you already have (on disk, or http:// URLs)."""
    images, labels = load_fashion_mnist("train")
    urls = []
    for s in range(SHARDS):
        path = str(root / f"fmnist-{s:04d}.tar")
        with wds.TarWriter(path) as sink:
            for i in range(s * PER_SHARD, (s + 1) * PER_SHARD):
                png = io.BytesIO()
                Image.fromarray(images[i]).save(png, format="PNG")
                sink.write({"__key__": f"{i:06d}", "png": png.getvalue(),
                            "cls": int(labels[i])})
        urls.append(path)
    return urls


def stream(urls: list[str]) -> wds.WebDataset:
    """The WebDataset pipeline of the training job, unchanged (a seeded shard order)."""
    return (wds.WebDataset(urls, shardshuffle=len(urls), seed=0,
                           nodesplitter=wds.split_by_node)
            .decode("l").to_tuple("png", "cls"))


def augment(sample: tuple[np.ndarray, int], rng: np.random.Generator) -> tuple[torch.Tensor, int]:
    image, label = sample
    if rng.random() < 0.5:  # each copy its own flip and shift
        image = image[:, ::-1]
    image = np.roll(image, int(rng.integers(-2, 3)), axis=1)
    return torch.from_numpy(np.ascontiguousarray(image, dtype=np.float32)).flatten(), label


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        urls = write_shards(Path(tmp))
        # The one line: echo each decoded image twice, before augmentation.
        train = EchoDataset(stream(urls), augment=augment, factor=2, buffer_size=512, seed=0)
        loader = StatefulDataLoader(train, batch_size=128, num_workers=2)
        model = torch.nn.Linear(28 * 28, 10)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        state, seen = None, []
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == 9:
                state = loader.state_dict()  # carries each worker's position
            if step >= 10:
                seen.append(y)
        print(f"{step + 1} steps, loss {loss.item():.3f}; {train.stats()}")

        resumed = StatefulDataLoader(
            EchoDataset(stream(urls), augment=augment, factor=2, buffer_size=512, seed=0),
            batch_size=128, num_workers=2)
        resumed.load_state_dict(state)
        rest = [y for _, y in resumed]
        same = len(rest) == len(seen) and all(map(torch.equal, rest, seen))
        print(f"resumed after 10 steps: {len(rest)} steps left, identical: {same}")


if __name__ == "__main__":
    main()
