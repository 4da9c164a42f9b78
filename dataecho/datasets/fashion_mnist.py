"""Fashion-MNIST from the gzip IDX files of Debian's ``dataset-fashion-mnist``.

The package installs the four original files under
``/usr/share/datasets/fashion-mnist``. They are parsed here with numpy alone,
and the decoded arrays are cached as ``.npy`` (see ``dataecho.datasets._cache``)
because gunzip plus parsing of the 47 MB training set costs about 0.3 s a load.
"""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import numpy as np

from dataecho.datasets._cache import load_arrays, save_arrays, source_key

DEFAULT_ROOT = Path("/usr/share/datasets/fashion-mnist")

CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip

_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
_UBYTE = 0x08  # IDX type code for unsigned bytes, the only one Fashion-MNIST uses.


FILES = tuple(name for pair in _FILES.values() for name in pair)  # the four files, train first


def missing_files(root: str | os.PathLike[str] | None = None) -> list[str]:
    """The names of the four Fashion-MNIST files that ``root`` lacks (none: all there).

    Lets a command check a data folder before it starts work, and name its own flag in
    the message (``dataecho demo --data DIR``) rather than this module's ``root=``.

    Args:
        root: Directory that should hold the four ``*-ubyte.gz`` files; defaults to
            ``/usr/share/datasets/fashion-mnist``.

    Example:
        >>> missing_files("/nonexistent")[0], len(missing_files("/nonexistent"))
        ('train-images-idx3-ubyte.gz', 4)
    """
    directory = Path(root) if root is not None else DEFAULT_ROOT
    return [name for name in FILES if not (directory / name).is_file()]


def read_idx(path: str | os.PathLike[str], ndim: int) -> np.ndarray:
    """Reads one gzip-compressed IDX file of unsigned bytes.

    Args:
        path: The ``.gz`` file.
        ndim: Number of dimensions the file must declare (3 for images, 1 for labels).

    Returns:
        A uint8 array with the shape declared in the file's header.

    Raises:
        ValueError: The magic number, type code, rank or payload size is wrong.

    Example:
        >>> read_idx(DEFAULT_ROOT / "t10k-labels-idx1-ubyte.gz", ndim=1).shape
        (10000,)
    """
    with gzip.open(path, "rb") as handle:
        raw = handle.read()
    # IDX header: two zero bytes, a type code, the rank, then one big-endian
    # uint32 per dimension.
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] != _UBYTE or raw[3] != ndim:
        raise ValueError(
            f"read_idx: {path} must start with the IDX magic 0x0000{_UBYTE:02x}{ndim:02x} "
            f"(unsigned bytes, rank {ndim}), got 0x{raw[:4].hex()}; the file is not a "
            "Fashion-MNIST IDX file or is damaged: reinstall dataset-fashion-mnist"
        )
    header = 4 + 4 * ndim
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    expected = int(np.prod(shape))
    if len(raw) - header != expected:
        raise ValueError(
            f"read_idx: {path} declares shape {shape} ({expected} bytes) but holds "
            f"{len(raw) - header} bytes of data; the file is truncated or damaged: "
            "reinstall dataset-fashion-mnist"
        )
    # Copied so the result is writable, like the arrays np.load gives from the cache.
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape).copy()


def _check(images: np.ndarray, labels: np.ndarray, split: str) -> None:
    if images.shape[1:] != (28, 28) or images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"load_fashion_mnist: split {split!r} must hold N 28x28 images and N labels, "
            f"got images {images.shape} and labels {labels.shape}; the files are not "
            "Fashion-MNIST: check root"
        )
    if labels.size and int(labels.max()) >= len(CLASSES):
        raise ValueError(
            f"load_fashion_mnist: labels of split {split!r} must lie in 0..9, got "
            f"{int(labels.max())}; the files are not Fashion-MNIST: check root"
        )


def load_fashion_mnist(
    split: str = "train", root: str | os.PathLike[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Loads one split of Fashion-MNIST.

    The first load decodes the IDX files and caches the arrays under
    ``$DATAECHO_CACHE`` (default ``~/.cache/dataecho``); later loads read the
    cache, which is keyed by the files' size and mtime so a replaced file is seen.

    Args:
        split: ``"train"`` (60,000 images) or ``"test"`` (10,000 images).
        root: Directory holding the four ``*-ubyte.gz`` files; defaults to
            ``/usr/share/datasets/fashion-mnist``.

    Returns:
        ``(images, labels)``: uint8 ``[N, 28, 28]`` and int64 ``[N]`` in 0..9
        (names in ``CLASSES``).

    Raises:
        ValueError: ``split`` is unknown or a file is not valid Fashion-MNIST.
        FileNotFoundError: A file is missing.

    Example:
        >>> images, labels = load_fashion_mnist("test")
        >>> images.shape, images.dtype, labels.dtype, CLASSES[int(labels[0])]
        ((10000, 28, 28), dtype('uint8'), dtype('int64'), 'Ankle boot')
    """
    if split not in _FILES:
        raise ValueError(
            f"load_fashion_mnist: split must be 'train' or 'test', got {split!r}"
        )
    directory = Path(root) if root is not None else DEFAULT_ROOT
    paths = [directory / name for name in _FILES[split]]
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(
                f"load_fashion_mnist: {path} does not exist; install the data with "
                "`apt-get install dataset-fashion-mnist` or pass root= the directory "
                f"holding {', '.join(_FILES[split])}"
            )
    name, key = f"fashion_mnist-{split}", source_key(paths)
    cached = load_arrays(name, key, ("images", "labels"))
    if cached is not None:
        return cached["images"], cached["labels"]
    images = read_idx(paths[0], ndim=3)
    labels = read_idx(paths[1], ndim=1).astype(np.int64)
    _check(images, labels, split)
    save_arrays(name, key, {"images": images, "labels": labels})
    return images, labels
