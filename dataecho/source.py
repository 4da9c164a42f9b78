"""The source stage: reads a map-style data set in a per-epoch order, one shard of it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from . import _rng
from ._checks import (
    check_bool,
    check_epochs,
    check_seed,
    check_shard,
    state_int,
)
from .stage import Stage, State

T = TypeVar("T")


class Source(Stage[T]):
    """Yields ``data[i]`` in a per-epoch permutation, restricted to one shard.

    The order of epoch ``e`` is a pure function of ``(seed, e)``; shard ``k`` of ``n``
    takes positions ``k, k + n, ...`` of it, so shards are disjoint and together read
    every example exactly once per epoch. Give DataLoader worker ``w`` of rank ``r``
    the shard ``r * num_workers + w`` of ``world_size * num_workers``.

    Args:
        data: a map-style data set (``len`` and integer indexing), e.g. a list, a
            numpy array or a ``torch.utils.data.Dataset``. Indexing it is the expensive
            read/decode step that echoing saves.
        shuffle: permute each epoch (else read in index order, less the examples
            ``drop_remainder`` drops).
        seed: the permutation seed.
        num_epochs: epochs to read before stopping; ``None`` reads forever.
        epoch: the first epoch (e.g. from ``set_epoch``).
        shard_index: which shard this reader takes, in ``[0, num_shards)``.
        num_shards: how many readers share the data (ranks times workers).
        drop_remainder: drop ``len(data) % num_shards`` examples of each epoch, a
            different few each epoch, so that every shard has the same length (DDP
            needs equal step counts). Off by default.

    Example:
        >>> list(Source(range(6), shuffle=False, shard_index=1, num_shards=2))
        [1, 3, 5]
    """

    def __init__(
        self,
        data: Sequence[T],
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_epochs: int | None = 1,
        epoch: int = 0,
        shard_index: int = 0,
        num_shards: int = 1,
        drop_remainder: bool = False,
    ) -> None:
        if isinstance(data, Mapping) or not (hasattr(data, "__len__")
                                             and hasattr(data, "__getitem__")):
            raise TypeError(
                f"data must be a map-style data set with len() and integer indexing 0..n-1, "
                f"got {type(data).__name__}; for a dict pass list(d.values()), for a stream "
                "use dataecho.Echo(iterable, ...) directly, or materialise it with list(...)"
            )
        self.data = data
        self.size = len(data)
        if self.size == 0:
            raise ValueError("data is empty (len(data) == 0); pass a data set with examples")
        self.shuffle = check_bool(shuffle, "shuffle")
        self.seed = check_seed(seed)
        self.num_epochs, self.first_epoch = check_epochs(num_epochs, epoch)
        self.shard_index, self.num_shards = check_shard(shard_index, num_shards)
        self.drop_remainder = check_bool(drop_remainder, "drop_remainder")
        self.check_shards(self.size, self.shard_index, self.num_shards, self.drop_remainder)
        self._epoch = self.first_epoch
        self._index = 0
        self._order = self._order_for(self._epoch)

    @staticmethod
    def check_shards(size: int, shard_index: int, num_shards: int, drop_remainder: bool) -> None:
        """Raises ``ValueError`` when shard ``shard_index`` of ``size`` examples is empty.

        Example:
            >>> Source.check_shards(10, 3, 4, drop_remainder=False)  # 10 examples, 4 shards
        """
        usable = size - size % num_shards if drop_remainder else size
        if usable <= shard_index:
            raise ValueError(
                f"data has {size} examples, too few for num_shards={num_shards}: "
                f"shard {shard_index} would be empty; use fewer workers or ranks"
            )

    def _order_for(self, epoch: int) -> list[int]:
        drop = self.size % self.num_shards if self.drop_remainder else 0
        if self.shuffle:
            order = _rng.rng(self.seed, _rng.SOURCE, epoch).permutation(self.size)
            order = order[: self.size - drop]  # the permutation's last few
        elif drop:
            # Index order without a block of `drop` consecutive indices (cyclically) that
            # moves along by `drop` each epoch: the last few in epoch 0, then the first
            # few, and so on, so every example is dropped in turn.
            start = (self.size - drop + epoch * drop) % self.size
            kept = np.ones(self.size, dtype=bool)
            kept[(start + np.arange(drop)) % self.size] = False
            order = np.flatnonzero(kept)
        else:
            order = np.arange(self.size)
        return list(order[self.shard_index :: self.num_shards].tolist())

    @property
    def shard_size(self) -> int:
        """Examples this shard reads per epoch."""
        return len(self._order)

    @property
    def epoch(self) -> int:
        """The epoch being read."""
        return self._epoch

    @property
    def items_read(self) -> int:
        """Examples read so far."""
        return (self._epoch - self.first_epoch) * len(self._order) + self._index

    def __next__(self) -> T:
        index = self._index
        try:
            position = self._order[index]
        except IndexError:  # the epoch's end: cheaper than comparing at every item
            position = self._next_epoch()
            index = 0
        # Read, then advance: a read that raises leaves the position on the example,
        # so calling next() again (or restoring a checkpoint taken now) retries it.
        item = self.data[position]
        self._index = index + 1
        return item

    def _next_epoch(self) -> int:
        """Moves to the next epoch and returns its first position; or stops."""
        if self.num_epochs is not None and self._epoch + 1 >= self.first_epoch + self.num_epochs:
            raise StopIteration
        self._epoch += 1
        self._index = 0
        self._order = self._order_for(self._epoch)
        return self._order[0]

    def _config(self) -> dict[str, Any]:
        return {"size": self.size, "shuffle": self.shuffle, "seed": self.seed,
                "num_epochs": self.num_epochs, "epoch": self.first_epoch,
                "shard_index": self.shard_index, "num_shards": self.num_shards,
                "drop_remainder": self.drop_remainder}

    def _snapshot(self) -> Any:
        return (self._epoch, self._index)

    def _state(self, token: Any) -> State:
        return {"epoch": token[0], "index": token[1]}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        last = None if self.num_epochs is None else self.first_epoch + self.num_epochs - 1
        epoch = state_int(state, "epoch", "Source", minimum=self.first_epoch, maximum=last,
                          rule="the epochs this source reads")
        index = state_int(state, "index", "Source", maximum=len(self._order),
                          rule=f"a position in this shard's {len(self._order)} examples "
                          "per epoch")
        if epoch != self._epoch:
            self._order = self._order_for(epoch)
        self._epoch, self._index = epoch, index

    def _repr_args(self) -> dict[str, Any]:
        args = {k: v for k, v in self._cfg.items() if k != "size"}
        if self.num_shards == 1:
            del args["shard_index"], args["num_shards"], args["drop_remainder"]
        if self.first_epoch == 0:
            del args["epoch"]
        return args

    def _repr_head(self) -> str:
        return f"<{type(self.data).__name__} of {self.size}>"
