"""One read per example under accelerate's sliced mode: own examples in own slots.

In sliced mode (``DataLoaderConfiguration(dispatch_batches=False)``, and the Hugging
Face ``Trainer`` with ``accelerator_config={"dispatch_batches": False}``) accelerate
wraps the data set in ``IterableDatasetShard``, which every process iterates: of each
run of ``batch * processes`` items it keeps ``batch`` items, process ``p`` those at
``p * batch`` to ``(p + 1) * batch``, and drops the rest unseen. Each process's copy
of an ``EchoDataset`` therefore reads its own part of the epoch only (shard ``p *
workers + w`` of ``processes * workers``, as under DDP) and hands its examples over in
its own slots, with :data:`PLACEHOLDER` in the others' slots, which the shard drops
before collation: the processes read the data once between them.

Every process must take the same steps. Where the sizes of every process's part are
known without reading (a map-style data set with a fixed factor), each worker of each
process computes how many runs the epoch has (:meth:`Slots.runs`): the longest part
rounded up (``drop_last=False``; a shorter part is completed with its epoch's first
examples again, as accelerate completes a last batch), or the shortest rounded down
(``drop_last=True``; the rest of a longer part is not read). Where they are known only
once read (a stream, an adaptive factor), each process's part fills its own runs, and
the training loop ends every process's epoch at the same step
(:class:`dataecho.torch.distributed.EqualSteps`), as under plain DDP.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any


class Placeholder:
    """Stands in another process's slot of a sliced stream; accelerate drops it unseen.

    Never trained: ``IterableDatasetShard`` keeps only its own process's slots. One
    that reaches a collate function (the data set iterated by something else than the
    shard it was placed for) fails there, naming this class.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return ("<dataecho Placeholder: another process's slot, which accelerate's "
                "IterableDatasetShard drops; never an example>")

    def __reduce__(self) -> str:
        return "PLACEHOLDER"  # one instance, also in another process


#: The one placeholder every slot of another process holds.
PLACEHOLDER = Placeholder()


@dataclass(frozen=True)
class Slots:
    """Which slots of a sliced stream one process keeps: ``IterableDatasetShard``'s rule.

    Args:
        process: the process's index.
        processes: the number of processes.
        batch: items a process keeps of each run of ``batch * processes``.
        drop_last: whether the shard drops an incomplete last run (else completes it).

    Example:
        >>> slots = Slots(process=1, processes=2, batch=2, drop_last=False)
        >>> stream = slots.place(iter("abc"), 0, slots.runs([4, 3]), lambda: iter("abc"))
        >>> ["-" if item is PLACEHOLDER else item for item in stream]
        ['-', '-', 'a', 'b', '-', '-', 'c', 'a']
    """

    process: int
    processes: int
    batch: int
    drop_last: bool

    @classmethod
    def of(cls, shard: Any) -> Slots | None:
        """The slots ``shard`` (an ``IterableDatasetShard``) keeps; None for one process.

        The shard's attributes are read as accelerate 0.20 to 1.x name them.
        """
        processes, process = int(shard.num_processes), int(shard.process_index)
        batch = int(shard.batch_size)
        if shard.split_batches:
            batch //= processes
        if processes < 2 or batch < 1:
            return None
        return cls(process, processes, batch, bool(shard.drop_last))

    def runs(self, sizes: Sequence[int]) -> int:
        """Runs of ``batch * processes`` items in the stream, from every process's size.

        The same on every process, given the same sizes: ``sizes[q]`` is what process
        ``q``'s part of this worker hands over in the epoch.
        """
        if self.drop_last:
            return min(size // self.batch for size in sizes)
        return max(-(-size // self.batch) for size in sizes)

    def place(self, own: Iterator[Any], done: int, runs: int,
              first: Callable[[], Iterable[Any]]) -> Iterator[Any]:
        """The stream: ``own``'s items in this process's slots, placeholders elsewhere.

        Args:
            own: this process's part of the epoch, its first ``done`` items handed over
                before (a resumed epoch).
            done: items of ``own`` handed over before.
            runs: the epoch's runs (:meth:`runs`).
            first: builds this part of the epoch again from its start, uncounted: the
                examples that complete a part shorter than ``runs`` runs.
        """
        before = self.process * self.batch
        after = (self.processes - self.process - 1) * self.batch
        kept, filler = runs * self.batch, None
        for position in range(done, kept):
            if position % self.batch == 0:
                yield from itertools.repeat(PLACEHOLDER, before)
            item = next(own, PLACEHOLDER) if filler is None else next(filler)
            if item is PLACEHOLDER:  # this part is over: complete it as accelerate does
                filler = itertools.cycle(first())
                item = next(filler)
            yield item
            if (position + 1) % self.batch == 0:
                yield from itertools.repeat(PLACEHOLDER, after)

    def fill(self, own: Iterator[Any], done: int) -> Iterator[Any]:
        """:meth:`place` for a part whose size is known once read: runs while it lasts.

        A stream or an adaptive factor: each process's part fills as many runs as it
        has items, so processes may differ by some runs (end their epochs together with
        :class:`dataecho.torch.distributed.EqualSteps`). A last run that ``own`` ends
        inside is completed with that run's own items again (``drop_last=False``), or
        left incomplete for the shard to drop (``drop_last=True``).

        Example:
            >>> slots = Slots(process=0, processes=2, batch=2, drop_last=False)
            >>> ["-" if item is PLACEHOLDER else item for item in slots.fill(iter("abc"), 0)]
            ['a', 'b', '-', '-', 'c', 'c', '-', '-']
        """
        before = self.process * self.batch
        after = (self.processes - self.process - 1) * self.batch
        position = done
        run: list[Any] = []  # this run's own items, to complete it with
        while True:
            item = next(own, PLACEHOLDER)
            if item is PLACEHOLDER:
                break
            if position % self.batch == 0:
                yield from itertools.repeat(PLACEHOLDER, before)
                run = []
            run.append(item)
            yield item
            position += 1
            if position % self.batch == 0:
                yield from itertools.repeat(PLACEHOLDER, after)
        if position % self.batch == 0 or self.drop_last or not run:
            # Whole runs only; an incomplete one the shard drops; or a resume at the
            # part's end, inside a run whose items were handed over before it.
            return
        yield from itertools.islice(itertools.cycle(run), self.batch - position % self.batch)
        yield from itertools.repeat(PLACEHOLDER, after)
