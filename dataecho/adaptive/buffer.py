"""The echo buffer: the recent fresh items that echoes are drawn from, with their use counts."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

T = TypeVar("T")


@dataclass(eq=False, slots=True)  # compared by identity: an item may be an array
class _Entry(Generic[T]):
    item: T
    index: int  # the item's fresh index: keys its copies' augmentation
    uses: int


class EchoBuffer(Generic[T]):
    """Recent fresh items with their use counts; an item leaves after ``max_uses``.

    Use 0 is the fresh emission, so an item is echoed at most ``max_uses - 1`` times.
    A new item at a full buffer evicts the oldest. With ``gap``, an item used at step
    ``k`` waits in :attr:`cooling` until step ``k + gap``, so its copies stand apart.

    Example:
        >>> buf = EchoBuffer(size=2, max_uses=2)
        >>> buf.add("a", 0); buf.add("b", 1); buf.add("c", 2)
        >>> buf.capacity, buf.draw(1), buf.capacity
        (2, [('c', 2, 1)], 1)
    """

    def __init__(self, size: int, max_uses: int, gap: int = 0) -> None:
        self.size, self.max_uses, self.gap = size, max_uses, gap
        #: The items drawable now, oldest first; never replaced (a hot path may hold it).
        self.entries: list[_Entry[T]] = []
        #: ``(step from which it may be drawn, entry)``, in that order; never replaced.
        self.cooling: deque[tuple[int, _Entry[T]]] = deque()
        #: How to undo each change since :meth:`record`, oldest first; None: not recording.
        self.log: list[tuple[Any, ...]] | None = None

    @property
    def capacity(self) -> int:
        """Distinct items that can be echoed now."""
        return len(self.entries)

    def add(self, item: T, index: int, now: int = 0) -> None:
        """Records a fresh item (its first use, at step ``now``) under its fresh index."""
        if self.max_uses > 1:
            if len(self.entries) + len(self.cooling) >= self.size:  # full: evict
                self.entries.pop(0) if self.entries else self.cooling.popleft()
            if self.gap:
                self.cooling.append((now + self.gap, _Entry(item, index, 1)))
            else:
                self.entries.append(_Entry(item, index, 1))

    def release(self, now: int) -> None:
        """Makes the items whose ``gap`` has passed by step ``now`` drawable again."""
        cooling, entries = self.cooling, self.entries
        while cooling and cooling[0][0] <= now:
            waited = cooling.popleft()
            entries.append(waited[1])
            if self.log is not None:
                self.log.append((_RELEASE, waited))

    def draw(self, n: int, rng: np.random.Generator | None = None,
             now: int = 0) -> list[tuple[T, int, int]]:
        """``n`` distinct items as ``(item, fresh_index, use)``: newest, or random with rng."""
        entries, size = self.entries, len(self.entries)
        picks = (range(max(size - n, 0), size) if rng is None or n >= size
                 else sorted(rng.choice(size, size=n, replace=False).tolist()))
        drawn = [entries[i] for i in picks]
        out = [(e.item, e.index, e.uses) for e in drawn]
        for e in drawn:
            e.uses += 1
        if self.gap or any(e.uses >= self.max_uses for e in drawn):
            ids = {id(e) for e in drawn}
            entries[:] = [e for e in entries  # in place: never replaced (see ``entries``)
                          if id(e) not in ids or (e.uses < self.max_uses and not self.gap)]
            if self.gap:
                self.cooling.extend((now + self.gap, e) for e in drawn if e.uses < self.max_uses)
        return out

    def take(self, i: int, now: int = 0) -> tuple[T, int, int]:
        """Echoes the ``i``-th item, oldest first, as ``(item, fresh_index, use)``."""
        entry = self.entries[i]
        entry.uses += 1
        change = _USE
        if entry.uses >= self.max_uses:
            del self.entries[i]
            change = _SPEND
        elif self.gap:
            del self.entries[i]
            self.cooling.append((now + self.gap, entry))
            change = _COOL
        if self.log is not None:
            self.log.append((change, entry, i))
        return entry.item, entry.index, entry.uses - 1

    def record(self) -> None:
        """Records :meth:`take` and :meth:`release` (only those) for :meth:`rollback`."""
        self.log = []

    def rollback(self, keep: int) -> None:
        """Undoes the changes recorded after the first ``keep``, newest first; stops recording."""
        log = self.log
        if log is None:
            raise RuntimeError("EchoBuffer.rollback() without record(); call record() first")
        self.log = None
        entries, cooling = self.entries, self.cooling
        for change in reversed(log[keep:]):
            if change[0] is _RELEASE:
                entries.pop()  # a release appends to entries: the last one is its item
                cooling.appendleft(change[1])
                continue
            kind, entry, i = change
            entry.uses -= 1
            if kind is _COOL:
                cooling.pop()
            if kind is not _USE:
                entries.insert(i, entry)

    def clear(self) -> None:
        self.entries.clear()
        self.cooling.clear()
        self.log = None


# What a rollback undoes: a use, a use that spent the budget, one that cooled it, a release.
_USE, _SPEND, _COOL, _RELEASE = "use", "spend", "cool", "release"
