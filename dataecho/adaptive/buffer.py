"""The echo buffer: the recent fresh items that echoes are drawn from, with their use counts."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    item: T
    index: int  # the item's fresh index: keys its copies' augmentation
    uses: int


class EchoBuffer(Generic[T]):
    """Recent fresh items with their use counts; an item leaves after ``max_uses``.

    Use 0 is the fresh emission, so an item is echoed at most ``max_uses - 1`` times.
    The oldest item is evicted when a new one arrives at a full buffer.

    Example:
        >>> buf = EchoBuffer(size=2, max_uses=2)
        >>> buf.add("a", 0); buf.add("b", 1); buf.add("c", 2)
        >>> buf.capacity, buf.draw(1)
        (2, [('c', 2, 1)])
        >>> buf.capacity
        1
    """

    def __init__(self, size: int, max_uses: int) -> None:
        self.size, self.max_uses = size, max_uses
        #: The items, oldest first. Always this one deque (never replaced), so a hot
        #: path may keep a reference and read it; changes go through the methods.
        self.entries: deque[_Entry[T]] = deque()

    @property
    def capacity(self) -> int:
        """Distinct items that can still be echoed."""
        return len(self.entries)

    def add(self, item: T, index: int) -> None:
        """Records a fresh item (its first use) under its fresh index."""
        if self.max_uses > 1:
            if len(self.entries) >= self.size:
                self.entries.popleft()
            self.entries.append(_Entry(item, index, 1))

    def draw(self, n: int, rng: np.random.Generator | None = None) -> list[tuple[T, int, int]]:
        """``n`` distinct items as ``(item, fresh_index, use)``: newest, or random with rng."""
        entries = self.entries
        size = len(entries)
        if n == 1 and size:  # the usual case (a batch per step): no lists, no rebuild
            return [self.take(int(rng.integers(size)) if rng is not None else size - 1)]
        if rng is None or n >= size:
            picks = list(range(max(size - n, 0), size))
        else:
            picks = sorted(rng.choice(size, size=n, replace=False).tolist())
        out = []
        for i in picks:
            entry = self.entries[i]
            out.append((entry.item, entry.index, entry.uses))
            entry.uses += 1
        if any(entries[i].uses >= self.max_uses for i in picks):
            kept = [e for e in entries if e.uses < self.max_uses]
            entries.clear()  # in place: the deque is never replaced (see ``entries``)
            entries.extend(kept)
        return out

    def take(self, i: int) -> tuple[T, int, int]:
        """Echoes the ``i``-th item, oldest first, as ``(item, fresh_index, use)``."""
        entry = self.entries[i]
        entry.uses += 1
        if entry.uses >= self.max_uses:
            del self.entries[i]
        return entry.item, entry.index, entry.uses - 1

    def clear(self) -> None:
        self.entries.clear()
