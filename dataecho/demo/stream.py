"""The read stage of the demo: samples streamed from tar shards over HTTP, decoded.

This is the expensive upstream work that echoing saves: every fresh sample costs
its share of a throttled shard download plus a PNG decode.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any, NamedTuple

import numpy as np

from .. import _rng
from .._checks import check_positive_int, check_seed
from ..stage import Stage, State
from .remote import ShardError, decode_image, fetch, iter_shard, read_index

_TAG = 0x5D  # the shard-order stream, distinct from the core stages' tags


class Sample(NamedTuple):
    """One decoded training example.

    Attributes:
        image: uint8 ``[H, W]`` (or ``[H, W, 3]``) pixels.
        label: the class.
        uid: ``epoch * num_samples + index``: the same image read in another epoch
            is another fresh example, as in the paper's count.
    """

    image: np.ndarray
    label: int
    uid: int


class ShardStream(Stage[Sample]):
    """Streams the samples of ``{url}/{prefix}-index.json``'s shards, shard by shard.

    The shard order of epoch ``e`` is a permutation keyed by ``(seed, e)``; reader
    ``k`` of ``n`` takes positions ``k, k + n, ...`` of it, so DataLoader workers and
    DDP ranks read disjoint shards that together cover the epoch. Within a shard
    samples come in tar order: put a ``Shuffle`` downstream.

    A background thread downloads the next ``prefetch`` shards while this one is
    decoded, so the network link stays busy, as a real loader's parallel reads keep
    it. The checkpoint holds (epoch, shard position, sample offset), never bytes;
    restoring re-fetches the current shard and skips to the offset.

    Args:
        url: base URL of the served shards (``ShardServer.url``).
        prefix: the data set name given to ``write_shards``.
        seed: seed of the per-epoch shard order.
        num_epochs: epochs to read; None reads forever.
        shard_index: this reader, ``rank * num_workers + worker``.
        num_shards: how many readers share the shards.
        prefetch: shards downloaded ahead, an int >= 1.
        retries: retries per download (see ``dataecho.demo.remote.fetch``).

    Example:
        >>> import tempfile
        >>> from dataecho.demo.remote import ShardServer, write_shards
        >>> root = tempfile.mkdtemp()
        >>> _ = write_shards(np.zeros((6, 2, 2), np.uint8), np.arange(6), root, shard_size=2)
        >>> with ShardServer(root) as server, ShardStream(server.url, num_epochs=1) as stream:
        ...     sorted(sample.label for sample in stream)
        [0, 1, 2, 3, 4, 5]
    """

    def __init__(self, url: str, *, prefix: str = "train", seed: int = 0,
                 num_epochs: int | None = None, shard_index: int = 0, num_shards: int = 1,
                 prefetch: int = 2, retries: int = 5) -> None:
        self.url, self.prefix = url.rstrip("/"), prefix
        self.seed = check_seed(seed)
        self.num_epochs = None if num_epochs is None else check_positive_int(
            num_epochs, "num_epochs")
        self.num_shards = check_positive_int(num_shards, "num_shards")
        self.shard_index = check_positive_int(shard_index, "shard_index", minimum=0)
        self.prefetch = check_positive_int(prefetch, "prefetch")
        self.retries = check_positive_int(retries, "retries", minimum=0)
        name = f"{prefix}-index.json"
        self.shards = read_index(fetch(f"{self.url}/{name}", retries=self.retries), name)
        if self.shard_index >= self.num_shards or self.num_shards > len(self.shards):
            raise ValueError(
                f"shard_index must be in [0, num_shards) and num_shards <= the {len(self.shards)} "
                f"shards of {name}, got shard_index={self.shard_index}, "
                f"num_shards={self.num_shards}; use fewer workers or write smaller shards")
        self.num_samples = sum(count for _, count in self.shards)
        self._epoch = self._pos = self._offset = self.items_read = 0
        self._samples: list[tuple[str, bytes, int]] | None = None
        self._orders: dict[int, list[int]] = {}
        self._pending: dict[tuple[int, int], Future[bytes]] = {}
        self.bytes_read = 0

    def order(self, epoch: int) -> list[int]:
        """Indices into ``shards`` that this reader takes in ``epoch``, in order."""
        if epoch not in self._orders:
            if len(self._orders) > 2:
                self._orders.clear()
            perm = _rng.rng(self.seed, _TAG, epoch).permutation(len(self.shards))
            self._orders[epoch] = perm[self.shard_index :: self.num_shards].tolist()
        return self._orders[epoch]

    def _next_keys(self) -> list[tuple[int, int]]:
        keys: list[tuple[int, int]] = []
        epoch, pos = self._epoch, self._pos
        while len(keys) <= self.prefetch:
            if pos >= len(self.order(epoch)):
                epoch, pos = epoch + 1, 0
            if self.num_epochs is not None and epoch >= self.num_epochs:
                break
            keys.append((epoch, pos))
            pos += 1
        return keys

    def _download(self, key: tuple[int, int]) -> Future[bytes]:
        future: Future[bytes] = Future()
        name = self.shards[self.order(key[0])[key[1]]][0]
        url, retries = f"{self.url}/{name}", self.retries

        def run() -> None:  # a daemon thread: a hung download never blocks exit
            try:
                future.set_result(fetch(url, retries=retries))
            except BaseException as error:  # handed to the reader by result()
                future.set_exception(error)

        threading.Thread(target=run, name=f"ShardStream:{name}", daemon=True).start()
        return future

    def _load(self) -> None:
        # Keys from the current shard on: the ones ahead download while this one decodes,
        # so the link never idles.
        keys = self._next_keys()
        for key in keys:
            if key not in self._pending:
                self._pending[key] = self._download(key)
        self._pending = {k: f for k, f in self._pending.items() if k in keys}
        index = self.order(self._epoch)[self._pos]
        name, count = self.shards[index]
        data = self._pending.pop((self._epoch, self._pos)).result()
        self.bytes_read += len(data)
        self._samples = list(iter_shard(data, name))
        if len(self._samples) != count:
            raise ShardError(f"ShardStream: shard {name!r} holds {len(self._samples)} samples "
                             f"but the index lists {count}; write the shards again")

    def __next__(self) -> Sample:
        while True:
            if self.num_epochs is not None and self._epoch >= self.num_epochs:
                raise StopIteration
            if self._samples is None:
                self._load()
            assert self._samples is not None
            if self._offset < len(self._samples):
                break
            self._samples, self._offset, self._pos = None, 0, self._pos + 1
            if self._pos >= len(self.order(self._epoch)):
                self._epoch, self._pos = self._epoch + 1, 0
        key, data, label = self._samples[self._offset]
        self._offset += 1
        self.items_read += 1
        uid = self._epoch * self.num_samples + int(key.rsplit("/", 1)[-1])
        return Sample(decode_image(data), label, uid)

    def _config(self) -> dict[str, Any]:
        return {"url": self.url, "prefix": self.prefix, "seed": self.seed,
                "num_epochs": self.num_epochs, "shard_index": self.shard_index,
                "num_shards": self.num_shards}

    def _get_state(self) -> State:
        return {"epoch": self._epoch, "position": self._pos, "offset": self._offset,
                "read": self.items_read}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        self._epoch, self._pos = int(state["epoch"]), int(state["position"])
        self._offset, self.items_read = int(state["offset"]), int(state["read"])
        self._samples, self._pending = None, {}  # the current shard is fetched again

    def close(self) -> None:
        """Forgets pending downloads; their daemon threads end with their transfer."""
        self._pending = {}

    def _repr_args(self) -> dict[str, Any]:
        args = {k: v for k, v in self._config().items() if k != "url"}
        if self.num_shards == 1:
            del args["shard_index"], args["num_shards"]
        return {"url": self.url, **args, "prefetch": self.prefetch}
