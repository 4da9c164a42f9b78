"""WebDataset-style tar shards: encoded images plus labels, the way buckets hold them.

A shard is a plain tar file whose members come in pairs named by a sample key:
``{key}.png`` (or ``.jpg``) holding the encoded image and ``{key}.cls`` holding
the label as ASCII digits: the WebDataset format, read by :class:`dataecho.TarShards`
and by ``webdataset`` itself. Reading one back costs a network transfer and an
image decode per sample: the expensive upstream work that data echoing repeats
the output of. An index ``{prefix}-index.json`` lists the shards with their sample
counts, sizes and SHA-256 digests (``TarShards(digests=index)`` checks them) and is
written last, so a directory with an index holds complete shards.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ...download import fetch
from ...tarformat import ShardError, iter_samples
from .codec import decode_image, encode_image

INDEX_FORMAT = "dataecho-shards/1"
IMAGE_EXTS = ("png", "jpg", "jpeg")


def _digest(images: np.ndarray, labels: np.ndarray, shard_size: int, fmt: str) -> str:
    digest = hashlib.sha256(f"{images.shape}|{shard_size}|{fmt}|".encode())
    digest.update(np.ascontiguousarray(images).data)
    digest.update(labels.astype(np.int64).tobytes())
    return digest.hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    # Renaming a finished temporary file means a reader (or the server) never
    # sees half a shard, even if this process dies mid-write.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            # mtime 0 so that the same arrays always give the same bytes.
            info.size, info.mode, info.mtime = len(payload), 0o644, 0
            archive.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def _previous(path: Path) -> dict[str, Any]:
    # The index a former call left, or {} if none or unusable (it is then rewritten).
    try:
        index = json.loads(path.read_bytes())
        ok = all(isinstance(s["name"], str) and isinstance(s["bytes"], int)
                 for s in index["shards"])  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return index if ok and isinstance(index, dict) else {}


def read_index(data: bytes, name: str) -> list[tuple[str, int]]:
    """Parses an index file into ``[(shard_name, sample_count), ...]``.

    Raises:
        ShardError: ``data`` is not an index written by ``write_shards``.

    Example:
        >>> read_index(b'{"format": "dataecho-shards/1", "shards": []}', "x-index.json")
        []
    """
    try:
        index = json.loads(data)
        if index["format"] != INDEX_FORMAT:
            raise ValueError(f"format {index['format']!r}")
        return [(str(shard["name"]), int(shard["samples"])) for shard in index["shards"]]
    except (ValueError, KeyError, TypeError) as error:
        raise ShardError(
            f"read_index: {name} must be a {INDEX_FORMAT} index written by write_shards, "
            f"but it is not ({error!r}); write the shards again"
        ) from error


def write_shards(
    images: np.ndarray,
    labels: np.ndarray,
    directory: str | os.PathLike[str],
    *,
    shard_size: int = 1000,
    fmt: str = "png",
    prefix: str = "train",
    progress: Callable[[int, int, int], object] | None = None,
) -> list[str]:
    """Writes images and labels as tar shards plus ``{prefix}-index.json``.

    Sample ``i`` gets key ``f"{i:08d}"`` and lands in shard ``i // shard_size``,
    named ``f"{prefix}-{i // shard_size:05d}.tar"``. Calling again with the same
    arrays and options finds the identical index and writes nothing.

    Args:
        images: uint8 ``[N, H, W]`` or ``[N, H, W, 3]``.
        labels: ``[N]`` non-negative integers.
        directory: Created if missing.
        shard_size: Samples per shard (the last shard may hold fewer).
        fmt: ``"png"`` (lossless) or ``"jpg"``.
        prefix: Names the data set within ``directory``, e.g. ``"train"``/``"test"``.
        progress: called as ``progress(samples_written, samples_total, bytes_written)``
            before the first shard and after each one, only when shards are written.

    Returns:
        The shard file names, relative to ``directory``, in sample order.

    Example:
        >>> import tempfile
        >>> write_shards(np.zeros((3, 4, 4), np.uint8), np.arange(3), tempfile.mkdtemp(),
        ...              shard_size=2)
        ['train-00000.tar', 'train-00001.tar']
    """
    images, labels = np.asarray(images), np.asarray(labels)
    if images.dtype != np.uint8:
        raise TypeError(f"write_shards: images must be uint8, got {images.dtype}; "
                        "convert with (x * 255).round().astype(np.uint8)")
    if images.ndim not in (3, 4) or (images.ndim == 4 and images.shape[3] != 3):
        raise ValueError(f"write_shards: images must be [N, H, W] or [N, H, W, 3], "
                         f"got shape {images.shape}")
    if labels.shape != images.shape[:1] or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"write_shards: labels must be {images.shape[0]} integers, one per "
                         f"image, got {labels.dtype} of shape {labels.shape}")
    if labels.size and int(labels.min()) < 0:
        raise ValueError(f"write_shards: labels must be >= 0, got {int(labels.min())}")
    if isinstance(shard_size, bool) or not isinstance(shard_size, int):
        raise TypeError(f"write_shards: shard_size must be an int, got {shard_size!r}")
    if shard_size < 1:
        raise ValueError(f"write_shards: shard_size must be >= 1, got {shard_size}")
    if fmt not in ("png", "jpg"):
        raise ValueError(f"write_shards: fmt must be 'png' or 'jpg', got {fmt!r}")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    index_path = root / f"{prefix}-index.json"
    digest = _digest(images, labels, shard_size, fmt)
    old = _previous(index_path)
    if old.get("source") == digest and all(
        "sha256" in s and (root / s["name"]).is_file()
        and (root / s["name"]).stat().st_size == s["bytes"]
        for s in old["shards"]
    ):
        return [s["name"] for s in old["shards"]]
    # Remove the index first: until the new one lands, readers see no data set
    # rather than a mix of old and new shards.
    index_path.unlink(missing_ok=True)
    entries: list[dict[str, Any]] = []
    if progress is not None:
        progress(0, len(images), 0)
    for first in range(0, len(images), shard_size):
        name = f"{prefix}-{first // shard_size:05d}.tar"
        members = []
        for i in range(first, min(first + shard_size, len(images))):
            members.append((f"{i:08d}.{fmt}", encode_image(images[i], fmt)))
            members.append((f"{i:08d}.cls", str(int(labels[i])).encode("ascii")))
        payload = _tar(members)
        _atomic_write(root / name, payload)
        entries.append({"name": name, "samples": len(members) // 2, "bytes": len(payload),
                        "sha256": hashlib.sha256(payload).hexdigest()})
        if progress is not None:
            progress(first + len(members) // 2, len(images),
                     sum(int(e["bytes"]) for e in entries))
    for name in {s["name"] for s in old.get("shards", [])} - {e["name"] for e in entries}:
        (root / name).unlink(missing_ok=True)
    index = {"format": INDEX_FORMAT, "prefix": prefix, "fmt": fmt, "source": digest,
             "num_samples": len(images), "shards": entries}  # fmt: skip
    _atomic_write(index_path, json.dumps(index, indent=1).encode())
    return [str(e["name"]) for e in entries]


def iter_shard(data: bytes, name: str) -> Iterator[tuple[str, bytes, int]]:
    """Yields ``(key, image_bytes, label)`` for each sample of a shard, in tar order.

    The tar walking is :func:`dataecho.tarformat.iter_samples`; this adds the demo's
    rule that every sample holds an image and a ``.cls`` label. Members with other
    extensions (``.json``, ``.txt``) are skipped.

    Raises:
        ShardError: The shard is not a tar file, is truncated, holds no samples,
            or a sample lacks its image or its ``.cls`` label; the message names ``name``.

    Example:
        >>> shard = _tar([("00000000.png", b"..."), ("00000000.cls", b"3")])
        >>> list(iter_shard(shard, "train-00000.tar"))
        [('00000000', b'...', 3)]
    """
    count = 0
    for sample in iter_samples(io.BytesIO(data), name):
        yield image_and_label(sample)
        count += 1
    if not count:
        raise ShardError(f"iter_shard: shard {name!r} holds no samples; it is empty or not "
                         "a shard written by write_shards")


def image_and_label(sample: dict[str, Any]) -> tuple[str, bytes, int]:
    """``(key, image_bytes, label)`` of one sample read by :class:`dataecho.TarShards`.

    Raises:
        ShardError: the sample lacks its image (``.png``/``.jpg``) or its ``.cls`` label,
            or the label is not ASCII digits; the message names the sample and shard.

    Example:
        >>> image_and_label({"__key__": "7", "__url__": "s.tar", "png": b"..", "cls": b"3"})
        ('7', b'..', 3)
    """
    key, name = sample["__key__"], sample["__url__"]
    image = next((sample[e] for e in IMAGE_EXTS if e in sample), None)
    if image is None or "cls" not in sample:
        missing = "image (.png/.jpg)" if image is None else "label (.cls)"
        raise ShardError(f"iter_shard: sample {key!r} in shard {name!r} has no {missing}; "
                         "the shard is damaged: write it again with write_shards")
    try:
        return str(key), image, int(sample["cls"].decode("ascii").strip())
    except (UnicodeDecodeError, ValueError) as error:
        raise ShardError(f"iter_shard: label of sample {key!r} in shard {name!r} must be "
                         f"ASCII digits, got {sample['cls'][:20]!r}") from error


class Shards(NamedTuple):
    """What a served index lists: the shard URLs, their digests, the sample count.

    Attributes:
        urls: ``{url}/{name}`` of every shard, in sample order.
        digests: the index itself, as a dict: ``TarShards(urls, digests=digests)``
            checks each shard's size and SHA-256 against it.
        num_samples: samples in all shards; keys run from 0 to ``num_samples - 1``.
    """

    urls: list[str]
    digests: dict[str, Any]
    num_samples: int


def read_shards(url: str, *, prefix: str = "train", retries: int = 5) -> Shards:
    """Fetches ``{url}/{prefix}-index.json`` and returns its shard URLs and digests.

    Raises:
        ShardError: the index is not one written by :func:`write_shards`.
        FetchError: the index could not be downloaded.

    Example:
        >>> import tempfile
        >>> from dataecho.demo.remote import ShardServer
        >>> root = tempfile.mkdtemp()
        >>> _ = write_shards(np.zeros((3, 2, 2), np.uint8), np.arange(3), root, shard_size=2)
        >>> with ShardServer(root) as server:
        ...     shards = read_shards(server.url)
        >>> [u.rsplit("/", 1)[-1] for u in shards.urls], shards.num_samples
        (['train-00000.tar', 'train-00001.tar'], 3)
    """
    base, name = url.rstrip("/"), f"{prefix}-index.json"
    data = fetch(f"{base}/{name}", retries=retries)
    listed = read_index(data, name)
    return Shards([f"{base}/{shard}" for shard, _ in listed], json.loads(data),
                  sum(count for _, count in listed))


def decode_sample(sample: dict[str, Any]) -> tuple[np.ndarray, int, int]:
    """``(image, label, index)`` of one sample read by :class:`dataecho.TarShards`.

    The decode of the demo's stream, ``Map(TarShards(...), decode_sample)``: the index
    is the sample's position in the data set (its key), so ``epoch * num_samples +
    index`` names a fresh example.

    Raises:
        ShardError: the sample lacks its image or label, or the image does not decode;
            the message names the sample's key and its shard.

    Example:
        >>> from dataecho.demo.remote import encode_image
        >>> image = encode_image(np.full((2, 2), 9, np.uint8))
        >>> x, label, index = decode_sample({"__key__": "00000007", "__url__": "s.tar",
        ...                                  "png": image, "cls": b"3"})
        >>> x.tolist(), label, index
        ([[9, 9], [9, 9]], 3, 7)
    """
    key, data, label = image_and_label(sample)
    try:
        image = decode_image(data)
    except ValueError as error:
        raise ShardError(
            f"decode_sample: the image of sample {key!r} in shard {sample['__url__']!r} does "
            f"not decode ({error}); the shard is damaged: write it again with write_shards"
        ) from error
    return image, label, int(key.rsplit("/", 1)[-1])
