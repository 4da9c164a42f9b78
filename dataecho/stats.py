"""Exact echo accounting: fresh examples read versus examples emitted.

Fresh examples are the paper's metric (items read from upstream of the echo stage).
They are counted where the echo stage reads, never estimated from a factor.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .stage import Stage


@dataclass(frozen=True)
class EchoStats:
    """Counts for one pipeline, as exact integers.

    Attributes:
        fresh_examples: examples read from upstream of the echo stage (the paper's metric).
            With two echo stages (example and batch echoing together) it is the first
            one's count; right after a restore it leaves out the item the later stage
            is still repeating until the next ``next()`` re-reads it (restoring reads
            no data).
        emitted_examples: examples the echo stage passed downstream, echoed copies
            included; examples a later ``Batch(..., drop_last=True)`` dropped are not.
            Mid-pass this includes items waiting in a later ``Shuffle`` window; at the
            end of a pass it is what came out.
        fresh_items: items the echo stage read (examples, or batches for batch echoing).
        emitted_items: items the echo stage emitted, less those a later ``Batch`` dropped.
        batches: batches the batcher emitted (for batch echoing: the echo stage, so
            mid-pass a later ``Shuffle`` window's too), or None when it does not batch.

    Example:
        >>> EchoStats(10, 25, 10, 25, None).realised_factor
        2.5
    """

    fresh_examples: int
    emitted_examples: int
    fresh_items: int
    emitted_items: int
    batches: int | None

    @classmethod
    def of_examples(cls, fresh: int, emitted: int) -> EchoStats:
        """Counts of a stage whose items are single examples: items equal examples.

        Example:
            >>> EchoStats.of_examples(10, 25) == EchoStats(10, 25, 10, 25, None)
            True
        """
        return cls(fresh, emitted, fresh, emitted, None)

    @property
    def echoed_examples(self) -> int:
        """Emitted examples that were copies, not fresh reads."""
        return self.emitted_examples - self.fresh_examples

    @property
    def realised_factor(self) -> float:
        """Emitted over fresh examples; NaN before anything was read."""
        if self.fresh_examples == 0:
            return math.nan
        return self.emitted_examples / self.fresh_examples

    def as_dict(self) -> dict[str, Any]:
        """Every count plus the realised factor, for logs and JSON."""
        return {**asdict(self), "echoed_examples": self.echoed_examples,
                "realised_factor": self.realised_factor}

    def __str__(self) -> str:
        return (f"fresh {self.fresh_examples:,} examples, emitted {self.emitted_examples:,} "
                f"(factor {self.realised_factor:.3f})")

    def __add__(self, other: EchoStats) -> EchoStats:
        """Field-wise sum, e.g. finished epochs plus the current one, or two workers.

        ``batches`` stays None only when both are None.

        Example:
            >>> total = EchoStats(1, 2, 1, 2, None) + EchoStats(3, 6, 3, 6, 3)
            >>> total.fresh_examples, total.emitted_examples, total.batches
            (4, 8, 3)
        """
        if not isinstance(other, EchoStats):
            return NotImplemented
        batches = (None if self.batches is None and other.batches is None
                   else (self.batches or 0) + (other.batches or 0))
        return EchoStats(self.fresh_examples + other.fresh_examples,
                         self.emitted_examples + other.emitted_examples,
                         self.fresh_items + other.fresh_items,
                         self.emitted_items + other.emitted_items, batches)


@runtime_checkable
class Counting(Protocol):
    """A stage that reads fresh items and emits copies (an echo stage)."""

    def echo_counts(self) -> tuple[int, int, int, int]:
        """(fresh_examples, emitted_examples, fresh_items, emitted_items)."""
        ...


@runtime_checkable
class Batching(Protocol):
    """A stage that groups examples into batches."""

    @property
    def last_size(self) -> int:
        """Examples in the batch it made last: the size of a later echo stage's item."""
        ...

    def batch_counts(self) -> tuple[int, int, int]:
        """(batches emitted, examples in them, examples read but dropped: ``drop_last``)."""
        ...


@runtime_checkable
class Reading(Protocol):
    """A source stage that counts the items it read."""

    @property
    def items_read(self) -> int:
        """Items read so far (from the saved position on, after a restore)."""
        ...


def chain(stage: Stage[Any]) -> list[Stage[Any]]:
    """The stages from the source to ``stage``, in pipeline order."""
    stages: list[Stage[Any]] = []
    node: Stage[Any] | None = stage
    while node is not None:
        stages.append(node)
        node = node.upstream
    return stages[::-1]


def collect(stage: Stage[Any]) -> EchoStats:
    """Builds :class:`EchoStats` for the pipeline ending at ``stage``.

    Examples a batcher after the last echo stage dropped (``drop_last``) were read but
    never emitted: they count as fresh, not as emitted.
    """
    stages = chain(stage)
    echoes = [(i, s) for i, s in enumerate(stages) if isinstance(s, Counting)]
    batchers = [(i, s) for i, s in enumerate(stages) if isinstance(s, Batching)]
    last_echo = echoes[-1][0] if echoes else -1
    batches: int | None = None
    examples = dropped = 0
    if batchers:
        at, batcher = batchers[-1]
        batches, examples, dropped = batcher.batch_counts()
        if at <= last_echo:  # the echo read only the batches made: nothing to subtract
            dropped = 0
        if at < last_echo:  # batch echoing: the echo stage emitted the batches
            batches = echoes[-1][1].echo_counts()[3]
    if echoes:
        fresh_ex, _, fresh_items, _ = echoes[0][1].echo_counts()
        _, emitted_ex, _, emitted_items = echoes[-1][1].echo_counts()
        emitted_ex, emitted_items = emitted_ex - dropped, emitted_items - dropped
    else:
        # No echo stage: everything read is emitted once, bar what a batcher dropped.
        source = stages[0]
        emitted_ex = emitted_items = (examples if batchers else
                                      source.items_read if isinstance(source, Reading) else 0)
        fresh_ex = fresh_items = emitted_ex + dropped
    return EchoStats(fresh_ex, emitted_ex, fresh_items, emitted_items, batches)
