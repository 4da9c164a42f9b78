"""The echo buffer: the recent fresh items that echoes are drawn from, with their use counts."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")


@dataclass(eq=False)  # compared by identity: an item may be an array
class _Entry(Generic[T]):
    item: T
    index: int  # the item's fresh index: keys its copies' augmentation
    uses: int


class EchoBuffer(Generic[T]):
    """Recent fresh items with their use counts; an item leaves after ``max_uses``.

    Use 0 is the fresh emission, so an item is echoed at most ``max_uses - 1`` times.
    The oldest item is evicted when a new one arrives at a full buffer.

    With ``gap``, an item used at step ``k`` may be drawn again from step ``k + gap``
    on: until then it waits in :attr:`cooling`, so the copies of one item stand at
    least ``gap`` steps apart even when few items have budget left (an upstream far
    slower than the consumer), where echoes would otherwise come back to back.

    Example:
        >>> buf = EchoBuffer(size=2, max_uses=2)
        >>> buf.add("a", 0); buf.add("b", 1); buf.add("c", 2)
        >>> buf.capacity, buf.draw(1)
        (2, [('c', 2, 1)])
        >>> buf.capacity
        1
        >>> spaced = EchoBuffer(size=4, max_uses=3, gap=2)
        >>> spaced.add("a", 0, now=0); spaced.capacity, spaced.release(2), spaced.capacity
        (0, None, 1)
    """

    def __init__(self, size: int, max_uses: int, gap: int = 0) -> None:
        self.size, self.max_uses, self.gap = size, max_uses, gap
        #: The items that may be drawn now, oldest first. Always this one deque (never
        #: replaced), so a hot path may keep a reference and read it; changes go
        #: through the methods.
        self.entries: deque[_Entry[T]] = deque()
        #: ``(step from which it may be drawn, entry)`` of items used within ``gap``
        #: steps, in that step's order; never replaced either.
        self.cooling: deque[tuple[int, _Entry[T]]] = deque()

    @property
    def capacity(self) -> int:
        """Distinct items that can be echoed now."""
        return len(self.entries)

    def add(self, item: T, index: int, now: int = 0) -> None:
        """Records a fresh item (its first use, at step ``now``) under its fresh index."""
        if self.max_uses > 1:
            if len(self.entries) + len(self.cooling) >= self.size:
                if self.entries:
                    self.entries.popleft()
                else:
                    self.cooling.popleft()
            entry = _Entry(item, index, 1)
            if self.gap:
                self.cooling.append((now + self.gap, entry))
            else:
                self.entries.append(entry)

    def release(self, now: int) -> None:
        """Makes the items whose ``gap`` has passed by step ``now`` drawable again."""
        cooling, entries = self.cooling, self.entries
        while cooling and cooling[0][0] <= now:
            entries.append(cooling.popleft()[1])

    def draw(self, n: int, rng: np.random.Generator | None = None,
             now: int = 0) -> list[tuple[T, int, int]]:
        """``n`` distinct items as ``(item, fresh_index, use)``: newest, or random with rng."""
        entries = self.entries
        size = len(entries)
        if n == 1 and size:  # the usual case (a batch per step): no lists, no rebuild
            pick = int(rng.integers(size)) if rng is not None else size - 1
            return [self.take(pick, now)]
        if rng is None or n >= size:
            picks = list(range(max(size - n, 0), size))
        else:
            picks = sorted(rng.choice(size, size=n, replace=False).tolist())
        out = []
        for i in picks:
            entry = entries[i]
            out.append((entry.item, entry.index, entry.uses))
            entry.uses += 1
        if self.gap or any(entries[i].uses >= self.max_uses for i in picks):
            drawn = {id(entries[i]) for i in picks}
            kept = [e for e in entries
                    if id(e) not in drawn or (e.uses < self.max_uses and not self.gap)]
            cool = [entries[i] for i in picks if entries[i].uses < self.max_uses]
            entries.clear()  # in place: the deque is never replaced (see ``entries``)
            entries.extend(kept)
            if self.gap:
                self.cooling.extend((now + self.gap, e) for e in cool)
        return out

    def take(self, i: int, now: int = 0) -> tuple[T, int, int]:
        """Echoes the ``i``-th item, oldest first, as ``(item, fresh_index, use)``."""
        entry = self.entries[i]
        entry.uses += 1
        if entry.uses >= self.max_uses:
            del self.entries[i]
        elif self.gap:
            del self.entries[i]
            self.cooling.append((now + self.gap, entry))
        return entry.item, entry.index, entry.uses - 1

    def clear(self) -> None:
        self.entries.clear()
        self.cooling.clear()
