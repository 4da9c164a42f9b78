"""The stride stage (``Shard``): every n-th item, one reader's share of a stream that
cannot split itself."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from ._checks import check_shard, state_int, state_mapping
from .readers import as_stage
from .stage import Stage, State

T = TypeVar("T")


class Shard(Stage[T]):
    """Keeps the items ``shard_index, shard_index + num_shards, ...`` of a stream.

    For streams that do not split themselves across DataLoader workers and ranks:
    every reader reads the whole stream and keeps its share, so the shares are disjoint
    and together hold every item once. The read cost is paid ``num_shards`` times;
    a stream that splits itself (WebDataset shards, Hugging Face ``datasets``) is
    cheaper. The checkpoint holds the upstream's state and the position in the stream.

    Args:
        upstream: any iterable (a stage, a re-iterable, a stateful stream).
        shard_index: this reader's share, in ``[0, num_shards)``.
        num_shards: how many readers share the stream.

    Example:
        >>> list(Shard(range(7), shard_index=1, num_shards=3))
        [1, 4]
    """

    upstream: Stage[Any]

    def __init__(self, upstream: Iterable[T], shard_index: int, num_shards: int) -> None:
        self.shard_index, self.num_shards = check_shard(shard_index, num_shards)
        self.upstream = as_stage(upstream)
        self._read = 0  # upstream items read, kept or skipped

    @property
    def items_read(self) -> int:
        """Items of this share read so far."""
        return (self._read + self.num_shards - 1 - self.shard_index) // self.num_shards

    def __next__(self) -> T:
        # Advance only after a read succeeds: an upstream error leaves the position on
        # the item, so a retry (or a checkpoint taken now) reads it again.
        while self._read % self.num_shards != self.shard_index:
            next(self.upstream)
            self._read += 1
        item = next(self.upstream)
        self._read += 1
        return item  # type: ignore[no-any-return]

    def _config(self) -> dict[str, Any]:
        return {"shard_index": self.shard_index, "num_shards": self.num_shards}

    def _snapshot(self) -> Any:
        return (self.upstream._snapshot(), self._read)

    def _state(self, token: Any) -> State:
        return {"upstream": self.upstream._expand(token[0]), "read": token[1]}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        upstream = state_mapping(state, "upstream", "Shard")
        read = state_int(state, "read", "Shard", rule="upstream items read, kept or skipped")
        self.upstream.load_state_dict(upstream)
        self._read = read
