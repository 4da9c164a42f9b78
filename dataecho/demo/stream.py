"""The read stage of the demo: samples streamed from tar shards over HTTP, decoded.

This is the expensive upstream work that echoing saves: every fresh sample costs
its share of a throttled shard download plus a PNG decode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from .._checks import check_positive_int, state_mapping
from ..download import fetch
from ..stage import Stage, State
from ..tarformat import ShardError
from ..tarshards import TarShards
from .remote import decode_image, image_and_label, read_index


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
    """Streams the samples of ``{url}/{prefix}-index.json``'s shards, decoded.

    A :class:`dataecho.TarShards` over the shards the index lists, checked against the
    index's sizes and SHA-256 digests, plus the PNG decode: the shard order of epoch
    ``e`` is a permutation keyed by ``(seed, e)``, reader ``k`` of ``n`` takes positions
    ``k, k + n, ...`` of it, and within a shard samples come in tar order (put a
    ``Shuffle`` downstream).

    A background thread downloads the next ``prefetch`` shards while this one is
    decoded, so the network link stays busy, as a real loader's parallel reads keep
    it. The checkpoint holds the reader's (epoch, shard position, sample offset), never
    bytes; restoring re-fetches the current shard and skips to the offset.

    Args:
        url: base URL of the served shards (``ShardServer.url``).
        prefix: the data set name given to ``write_shards``.
        seed: seed of the per-epoch shard order.
        num_epochs: epochs to read; None reads forever.
        shard_index: this reader, ``rank * num_workers + worker``.
        num_shards: how many readers share the shards.
        prefetch: shards downloaded ahead, an int >= 1.
        retries: retries per download (see ``dataecho.fetch``).

    Example:
        >>> import tempfile
        >>> from dataecho.demo.remote import ShardServer, write_shards
        >>> root = tempfile.mkdtemp()
        >>> _ = write_shards(np.zeros((6, 2, 2), np.uint8), np.arange(6), root, shard_size=2)
        >>> with ShardServer(root) as server, ShardStream(server.url, num_epochs=1) as stream:
        ...     sorted(sample.label for sample in stream)
        [0, 1, 2, 3, 4, 5]
    """

    upstream: TarShards

    def __init__(self, url: str, *, prefix: str = "train", seed: int = 0,
                 num_epochs: int | None = None, shard_index: int = 0, num_shards: int = 1,
                 prefetch: int = 2, retries: int = 5) -> None:
        self.url, self.prefix = url.rstrip("/"), prefix
        self.prefetch = check_positive_int(prefetch, "prefetch")
        retries = check_positive_int(retries, "retries", minimum=0)
        name = f"{prefix}-index.json"
        index = fetch(f"{self.url}/{name}", retries=retries)
        self.shards = read_index(index, name)
        if not self.shards or shard_index >= num_shards or num_shards > len(self.shards):
            raise ValueError(
                f"shard_index must be in [0, num_shards) and num_shards <= the {len(self.shards)} "
                f"shards of {name}, got shard_index={shard_index}, "
                f"num_shards={num_shards}; use fewer workers or write smaller shards")
        self.num_samples = sum(count for _, count in self.shards)
        self.upstream = TarShards(
            [f"{self.url}/{shard}" for shard, _ in self.shards], seed=seed,
            num_epochs=num_epochs, shard_index=shard_index, num_shards=num_shards,
            prefetch=self.prefetch, retries=retries, digests=json.loads(index))
        self.seed, self.num_epochs = self.upstream.seed, self.upstream.num_epochs
        self.shard_index, self.num_shards = shard_index, num_shards

    def order(self, epoch: int) -> list[int]:
        """Indices into ``shards`` that this reader takes in ``epoch``, in order."""
        return self.upstream.order(epoch)

    @property
    def items_read(self) -> int:
        """Samples read so far."""
        return self.upstream.items_read

    @property
    def bytes_read(self) -> int:
        """Shard bytes downloaded so far."""
        return self.upstream.bytes_read

    def __next__(self) -> Sample:
        sample = next(self.upstream)
        key, data, label = image_and_label(sample)
        uid = self.upstream.epoch * self.num_samples + int(key.rsplit("/", 1)[-1])
        try:
            image = decode_image(data)
        except ValueError as error:
            raise ShardError(
                f"ShardStream: the image of sample {key!r} in shard {sample['__url__']!r} "
                f"cannot be decoded: {error}; the shard is damaged: write it again with "
                "write_shards") from error
        return Sample(image, label, uid)

    def _config(self) -> dict[str, Any]:
        return {"url": self.url, "prefix": self.prefix, "seed": self.seed,
                "num_epochs": self.num_epochs, "shard_index": self.shard_index,
                "num_shards": self.num_shards}

    def _snapshot(self) -> Any:
        return self.upstream._snapshot()

    def _state(self, token: Any) -> State:
        return {"upstream": self.upstream._expand(token)}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        self.upstream.load_state_dict(state_mapping(state, "upstream", "ShardStream"))

    def _repr_args(self) -> dict[str, Any]:
        args = {k: v for k, v in self._config().items() if k != "url"}
        if self.num_shards == 1:
            del args["shard_index"], args["num_shards"]
        return {"url": self.url, **args, "prefetch": self.prefetch}

    def _repr_head(self) -> str:  # the reader inside is this stage's detail, not shown
        return ""
