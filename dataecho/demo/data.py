"""The demo's data: Fashion-MNIST written once into tar shards, plus a fixed test subset."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..datasets import cache_dir, load_fashion_mnist
from .remote import write_shards

# The held-out subset is the same for every seed and run: it is the measuring
# instrument, not part of the experiment.
_EVAL_SEED = 20190712


@dataclass(frozen=True)
class DemoData:
    """Where the shards are and what the trainer evaluates on.

    Attributes:
        shard_dir: the folder the server serves (``train-*.tar`` plus the index).
        num_samples: training examples in the shards.
        bytes_per_sample: shard bytes per example (PNG plus tar headers), which sets
            the bandwidth for a given ``R``.
        train_images, train_labels: the same examples in memory, for calibration only.
        eval_images, eval_labels: the fixed held-out test subset.
    """

    shard_dir: Path
    num_samples: int
    bytes_per_sample: float
    train_images: np.ndarray
    train_labels: np.ndarray
    eval_images: np.ndarray
    eval_labels: np.ndarray


def prepare(train_size: int | None, eval_size: int, shard_size: int,
            log: Callable[[str], object] | None = None,
            root: str | Path | None = None) -> DemoData:
    """Writes the shards (once: later calls find them in the cache) and loads the test subset.

    With ``log``, says where the shards are and how large, and while they are first
    written (about 30 s and 135 MB for all 60,000 images) how far it has got. ``root``
    is the folder of the Fashion-MNIST files (default Debian's, see
    :func:`~dataecho.datasets.load_fashion_mnist`).

    Raises:
        FileNotFoundError: Fashion-MNIST is not installed; the message says how to get it
            (``make demo`` installs it, or ``apt-get install dataset-fashion-mnist``).

    Example:
        >>> data = prepare(200, 100, 50)
        >>> data.num_samples, data.eval_images.shape
        (200, (100, 28, 28))
    """
    images, labels = load_fashion_mnist("train", root)
    test_images, test_labels = load_fashion_mnist("test", root)
    n = len(images) if train_size is None else min(int(train_size), len(images))
    images, labels = images[:n], labels[:n]
    folder = cache_dir() / "demo-shards" / f"fashion_mnist-{n}-{shard_size}"
    report = _Progress(folder, log)
    # A no-op when the shards are present; report is called only while writing.
    write_shards(images, labels, folder, shard_size=shard_size,
                 progress=report if log is not None else None)
    index = json.loads((folder / "train-index.json").read_text())
    total = sum(int(shard["bytes"]) for shard in index["shards"])
    if log is not None:
        log(f"  shards: {total / 1e6:.0f} MB, {n:,} examples "
            f"{'written to' if report.wrote else 'cached in'} {folder} "
            "(DATAECHO_CACHE=DIR moves the cache)")
    if not 0 < eval_size <= len(test_images):
        raise ValueError(f"eval_size must be in [1, {len(test_images)}], got {eval_size}")
    pick = np.random.default_rng(_EVAL_SEED).permutation(len(test_images))[:eval_size]
    return DemoData(folder, n, total / n, images, labels, test_images[pick], test_labels[pick])


class _Progress:
    """Logs the shard writing: where, then every fifth of the examples."""

    def __init__(self, folder: Path, log: Callable[[str], object] | None) -> None:
        self.folder, self.log, self.wrote, self.fifths = folder, log, False, 0

    def __call__(self, done: int, total: int, size: int) -> None:
        if self.log is None:
            return
        if not self.wrote:
            self.wrote = True
            self.log(f"  shards: writing {total:,} examples as PNG tar shards to {self.folder} "
                     "(once: later runs reuse them)")
        elif done < total and done * 5 // total > self.fifths:  # the end: prepare says
            self.fifths = done * 5 // total
            self.log(f"  shards: {done:,} of {total:,} examples written ({size / 1e6:.0f} MB)")
