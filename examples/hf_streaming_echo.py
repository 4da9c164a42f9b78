"""Example echoing for a Hugging Face ``datasets`` stream: one line, in the workers.

Writes 3,000 Fashion-MNIST training images (real data, Debian's dataset-fashion-mnist)
as 4 local Parquet files, streams them with ``load_dataset(..., streaming=True)``
(offline: nothing comes from the Hub), and wraps the stream in ``EchoDataset``: each
decoded image is used twice, each copy shifted anew, inside the two DataLoader workers
(the stream splits its files between them). The stream checkpoints itself, so a
``StatefulDataLoader`` restored mid-epoch continues exactly.
Run: python examples/hf_streaming_echo.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local files only, nothing from a hub
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from dataecho.datasets.fashion_mnist import load_fashion_mnist
from dataecho.torch import EchoDataset

FILES, PER_FILE = 4, 750


def write_parquet(root: Path) -> list[str]:
    """Stands in for the Parquet files of a data set you stream."""
    images, labels = load_fashion_mnist("train")
    paths = []
    for f in range(FILES):
        rows = slice(f * PER_FILE, (f + 1) * PER_FILE)
        table = pa.table({"pixels": list(images[rows].reshape(PER_FILE, -1)),
                          "label": labels[rows].astype(np.int64)})
        paths.append(str(root / f"train-{f:02d}.parquet"))
        pq.write_table(table, paths[-1])
    return paths


def stream(paths: list[str]) -> datasets.IterableDataset:
    return datasets.load_dataset("parquet", data_files=paths, split="train", streaming=True)


def augment(row: dict, rng: np.random.Generator) -> tuple[torch.Tensor, int]:
    image = np.asarray(row["pixels"], dtype=np.float32).reshape(28, 28) / 255
    image = np.roll(image, int(rng.integers(-2, 3)), axis=1)  # each copy its own shift
    return torch.from_numpy(image).flatten(), int(row["label"])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_parquet(Path(tmp))
        # The one line: echo each decoded row twice, before augmentation.
        train = EchoDataset(stream(paths), augment=augment, factor=2, buffer_size=256, seed=0)
        loader = StatefulDataLoader(train, batch_size=100, num_workers=2)
        model = torch.nn.Linear(28 * 28, 10)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        state, seen = None, []
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == 19:
                state = loader.state_dict()  # each worker's echo and stream position
            if step >= 20:
                seen.append(y)
        print(f"{step + 1} steps, loss {loss.item():.3f}; {train.stats()}")

        resumed = StatefulDataLoader(
            EchoDataset(stream(paths), augment=augment, factor=2, buffer_size=256, seed=0),
            batch_size=100, num_workers=2)
        resumed.load_state_dict(state)
        rest = [y for _, y in resumed]
        same = len(rest) == len(seen) and all(map(torch.equal, rest, seen))
        print(f"resumed after 20 steps: {len(rest)} steps left, identical: {same}")


if __name__ == "__main__":
    main()
