"""The demo's arms, built from the public pieces a user would write.

Every arm reads the same stream, ``Map(TarShards(urls, digests=index), PaddedDecode(pad))``:
the served shards, checked against the index's digests and decoded, split by whole
shards between the DataLoader workers. What differs is where the echo stands:

- baseline: ``EchoDataset(stream, augment=crop_flip(pad), factor=1)``;
- example echoing: ``EchoDataset(stream, augment=..., echo=variant, factor=e,
  buffer_size=...)``, or ``factor=Auto(buffer_size=...)`` (adaptive: decided in each
  worker, copies augmented in the worker);
- batch echoing: ``EchoBatches(DataLoader(<the baseline's EchoDataset>), factor=e)``,
  or ``factor=Auto(buffer_size=...)``, in the trainer's process;
- echoing where the trainer augments (``"device"``): ``DeviceEcho(DataLoader(
  EchoDataset(stream)), augment=BatchCropFlip(pad), factor=e)``, the decoded batches
  kept on the trainer's device and each copy augmented there.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader

from ..factor import Auto
from ..map import Map
from ..shuffle import window_of
from ..tarshards import TarShards
from ..torch import DeviceEcho, EchoBatches, EchoDataset
from .augment import BatchCropFlip, PaddedDecode, crop_flip
from .config import ARMS
from .remote import read_shards
from .remote.process import START_METHOD

Factor = float | str  # a fixed echo factor >= 1, or "auto" (adaptive echoing)


@dataclass(frozen=True)
class Arm:
    """One arm's loader, ready to train from.

    Attributes:
        loader: the DataLoader (or ``EchoBatches`` around it); each iteration is the
            next epoch, batches of ``(images, labels, indices)``.
        num_samples: samples per epoch: a fresh example is ``epoch * num_samples +
            index``.
        pipeline: the objects' reprs, for the log and the result file.
    """

    loader: Iterable[Any]
    num_samples: int
    pipeline: str


def check_arm(factor: object, variant: object) -> Factor:
    """Returns ``factor`` as a float or ``"auto"``, after checking it and ``variant``.

    Example:
        >>> check_arm(2, "batch"), check_arm("auto", "after_augmentation")
        (2.0, 'auto')
    """
    if variant not in ARMS:
        raise ValueError(f"variant must be one of {', '.join(map(repr, ARMS))}, got "
                         f"{variant!r}; pass variant='before_augmentation' (the paper's best)")
    if factor == "auto":
        return "auto"
    real = isinstance(factor, numbers.Real) and not isinstance(factor, bool)
    value = float(factor) if real else math.nan  # type: ignore[arg-type]
    if not (math.isfinite(value) and value >= 1):
        raise ValueError(
            f"factor must be a finite number >= 1 (1 is no echoing) or 'auto', got "
            f"{factor!r}; pass e.g. factor=2.0 for a fixed factor, factor=1 for the "
            "baseline, or factor='auto' for adaptive echoing")
    return value


def make_loader(url: str, *, factor: Factor = 1.0, variant: str = "before_augmentation",
                batch_size: int = 128, buffer_size: int = 1280, seed: int = 0, pad: int = 2,
                num_workers: int = 1, prefetch: int = 2,
                max_factor: int | None = None, device: str = "cpu") -> Arm:
    """The loader of one arm over the shards served at ``url``.

    Workers start from a fork server, not by a fork of this process (which runs the
    shard server's threads; forking a threaded process can copy a held lock into the
    child) nor by ``spawn``: a spawned worker ends by finalising its interpreter, and
    one stopped while its queue thread is handing torch a batch to share (a loop that
    stops mid-epoch) aborts ("terminate called without an active exception"): Python
    3.11 ends that thread with ``pthread_exit``, which cannot unwind through torch's
    C++. A fork-server worker exits without finalising (Windows, which has no fork
    server, spawns them). Workers persist between epochs (no start-up per epoch).
    ``drop_last=True``: each epoch's last, partial batch of each worker is not trained
    on, so every step has ``batch_size`` examples; the trainer counts fresh examples
    from what it trained on, so the count stays exact.

    With a fixed example-level factor each worker may run a whole shuffle window of
    batches ahead: an epoch's first window is read whole before its first item leaves,
    and a deep queue lets the worker build the lead that covers it.

    Args:
        url: base URL of the served shards (``ShardServer.url``).
        factor: echo factor >= 1 (1: the baseline), or ``"auto"``.
        variant: where the echo stands: one of :data:`ARMS`.
        batch_size: examples per batch.
        buffer_size: distinct examples in the shuffle window after a fixed
            example-level echo (the window holds ``ceil(buffer_size * factor)`` copies;
            the baseline's window is ``buffer_size``); the examples adaptive example
            echoing draws from; two windows of batches are what adaptive batch echoing
            draws from.
        seed: the one seed: shard order, echo draws, augmentation, shuffles.
        pad: crop padding of the augmentation, in pixels.
        num_workers: DataLoader worker processes, each reading whole shards.
        prefetch: shards each worker downloads ahead.
        max_factor: adaptive echoing's most uses of one example (``Auto(max_factor)``);
            None: ``Auto``'s default for the variant.
        device: where the ``"device"`` arm keeps and augments its batches.

    Example:
        >>> import tempfile
        >>> import numpy as np
        >>> from dataecho.demo.remote import ShardServer, write_shards
        >>> root = tempfile.mkdtemp()
        >>> _ = write_shards(np.zeros((8, 4, 4), np.uint8), np.arange(8), root, shard_size=4)
        >>> with ShardServer(root) as server:
        ...     arm = make_loader(server.url, factor=2, batch_size=4, num_workers=0)
        ...     indices = [i for batch in arm.loader for i in batch[2].tolist()]
        >>> sorted(indices) == sorted(2 * list(range(8))), arm.pipeline[:37]
        (True, 'DataLoader(EchoDataset(Map(TarShards(')
    """
    factor = check_arm(factor, variant)
    shards = read_shards(url)
    stream = Map(TarShards(shards.urls, seed=seed, digests=shards.digests, prefetch=prefetch),
                 PaddedDecode(pad))
    examples = variant not in ("batch", "device") and factor != 1.0  # echoed in workers
    on_device = variant == "device" and factor != 1.0  # augmented after the echo there
    in_workers: float | Auto = 1.0
    window: int | None = buffer_size
    if examples and factor == "auto":  # Auto's buffer spreads its copies, not a window
        in_workers, window = Auto(max_factor=max_factor, buffer_size=buffer_size), None
    elif examples:
        in_workers = float(factor)
        window = window_of(buffer_size, in_workers)  # buffer_size distinct examples
    dataset = EchoDataset(stream, augment=None if on_device else crop_flip(pad),
                          factor=in_workers,
                          echo=variant if examples else "before_augmentation",  # type: ignore[arg-type]
                          buffer_size=window, seed=seed)
    windowed = examples and factor != "auto"
    ahead = max(2, (window or 0) // batch_size + 2) if windowed and num_workers else None
    loader: DataLoader[Any] = DataLoader(
        dataset, batch_size=batch_size, drop_last=True, num_workers=num_workers,
        prefetch_factor=ahead, persistent_workers=num_workers > 0,
        multiprocessing_context=START_METHOD if num_workers else None)
    text = (f"DataLoader({_with_stream(dataset, stream)}, batch_size={batch_size}, "
            f"drop_last=True, num_workers={num_workers})")
    echo: EchoBatches | DeviceEcho
    if variant == "batch" and factor != 1.0:
        echo = EchoBatches(loader, Auto(max_factor=max_factor,
                                        buffer_size=echo_buffer(buffer_size, batch_size))
                           if factor == "auto" else factor, seed=seed)
    elif on_device:
        # The ring holds two groups of buffer_size examples: DeviceEcho mixes copies
        # within a group of window // 2 batches, the examples the workers' window mixes.
        echo = DeviceEcho(loader, augment=BatchCropFlip(pad),
                          factor=Auto(max_factor=max_factor) if factor == "auto" else factor,
                          device=device, window=2 * max(1, buffer_size // batch_size),
                          seed=seed)
    else:
        return Arm(loader, shards.num_samples, text)
    return Arm(echo, shards.num_samples,
               repr(echo).replace(f"<{type(loader).__name__}>", text, 1))


def _with_stream(dataset: EchoDataset, stream: Map[Any]) -> str:
    # EchoDataset's repr names its stream's type only; the stream's own repr says more.
    return repr(dataset).replace(f"<{type(stream).__name__}>", repr(stream), 1)


def echo_buffer(buffer_size: int, batch_size: int) -> int:
    """Batches adaptive batch echoing draws from: two shuffle windows, at least 4.

    The workers deliver a shard's batches in bursts; with fewer batches kept, most of a
    burst's batches would never get their echoes.

    Example:
        >>> echo_buffer(1280, 128)
        20
    """
    return max(4, 2 * max(1, buffer_size // batch_size))
