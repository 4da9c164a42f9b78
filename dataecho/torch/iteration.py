"""What an ``EchoDataset`` hands the DataLoader, counted, in each worker.

:class:`Tally` is the stage an ``EchoDataset``'s epoch loop builds for each epoch: the
worker's pipeline, counted cheaply enough to publish after every example (in a
DataLoader worker; the training process reads its own when asked).
:class:`Handout` is one iteration over it: it publishes the counts, ends the
epoch, and makes a read error stick.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from torch.utils.data import get_worker_info

from .._checks import state_int, state_mapping
from ..stage import Stage, State
from ..stats import Counting, EchoStats, chain


class Tally(Stage[Any]):
    """Counts the examples the pipeline it reads hands over: fresh ones and all copies.

    ``emitted`` counts every item handed over (one example each); ``fresh`` those that
    were their example's first copy (:meth:`dataecho.Stage.copies_of`), so a copy
    still waiting in a shuffle window counts neither. Where the pipeline cannot tell
    first copies (an echo stage without ``copies_of``), both come from its echo
    stage instead; without an echo stage every item is fresh.

    Args:
        upstream: the pipeline of one epoch.
        reader: ``(index, count)``: which reader (worker of a rank) of how many reads
            this pipeline. Part of the configuration, so a state taken by another reader
            or under another split (other workers or ranks) is refused, not replayed.

    Example:
        >>> from dataecho import Echo, Shuffle
        >>> tally = Tally(Shuffle(Echo(range(100), factor=2), 200, seed=0))
        >>> _ = [next(tally) for _ in range(4)]
        >>> tally.counts()[1], tally.counts()[0] <= 4
        (4, True)
    """

    VERSION = 3  # 2: the configuration names the reader; 3: "fresh" counted at hand-out
    upstream: Stage[Any]

    def __init__(self, upstream: Stage[Any], reader: tuple[int, int] = (0, 1)) -> None:
        self.upstream, self.yields, self.fresh, self.reader = upstream, 0, 0, reader
        self._copy_of = upstream.copies_of()
        echoes = [s for s in chain(upstream) if isinstance(s, Counting)]
        # The fallback, for an echo stage that cannot tell its first copies.
        self._echo = echoes[0] if echoes and self._copy_of is None else None

    def __next__(self) -> Any:
        item = next(self.upstream)
        self.yields += 1
        copy_of = self._copy_of
        if copy_of is not None and copy_of()[1]:
            self.fresh += 1
        return item

    def counts(self) -> tuple[int, int]:
        """(fresh, emitted) examples so far; cheap enough to call for every example."""
        if self._echo is not None:
            fresh, emitted, _, _ = self._echo.echo_counts()
            return fresh, emitted
        if self._copy_of is None:  # no echo stage: every example comes once
            return self.yields, self.yields
        return self.fresh, self.yields

    def stats(self) -> EchoStats:
        """:meth:`counts` as :class:`dataecho.EchoStats` (one example per item)."""
        fresh, emitted = self.counts()
        return EchoStats.of_examples(fresh, emitted)

    def _config(self) -> dict[str, Any]:
        return {"reader": list(self.reader)}

    def _snapshot(self) -> Any:
        return (self.upstream._snapshot(), self.yields, self.fresh)

    def _state(self, token: Any) -> State:
        return {"upstream": self.upstream._expand(token[0]), "yields": token[1],
                "fresh": token[2]}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        upstream = state_mapping(state, "upstream", "Tally")
        yields = state_int(state, "yields", "Tally", rule="items handed over this epoch")
        fresh = state_int(state, "fresh", "Tally", maximum=yields,
                          rule=f"first copies handed over, at most yields={yields}")
        self.upstream.load_state_dict(upstream)
        self.yields, self.fresh = yields, fresh

    def __repr__(self) -> str:
        return repr(self.upstream)


class Handout(Iterable[Any]):
    """One iteration's examples, counted as handed over; a read error sticks.

    An error raised through a generator ends it, so the DataLoader's next call would see
    a normal end of the epoch; and the DataLoader drops the examples of the batch it was
    filling when a read fails, so going on after an error would lose them silently.
    The iterator is therefore a generator for the examples (the per-example path at a
    generator's speed, the DataLoader's only cost besides the pipeline) chained to a
    tail that, after an error, raises again at every call, naming the first error.

    Args:
        tally: the epoch's counted pipeline.
        publisher: ``publisher(counts)`` makes the function to call after every example
            that makes the counts so far visible to the training process, or returns
            None where they are read when asked (``SharedCounts.publisher``).
        end: ``end(tally)``, told once the epoch was read to its end.
        fail: ``fail(error)``, told of a read error (any exception, interrupts too).
        check_empty: a whole epoch without an example is an error (a stream's).
        renew: ``renew(tally)``, asked at the first item: the pipeline to read, the
            same or one built again (the iteration began before its reader knew its
            split across processes), or None to hand out nothing.
        epoch: the epoch read, named in the error that says how to read the rest.

    Example:
        >>> from dataecho import Echo
        >>> ended = []
        >>> out = Handout(Tally(Echo(range(2), factor=2)), lambda counts: lambda: None,
        ...               ended.append, print, check_empty=False)
        >>> list(out), len(ended)
        ([0, 0, 1, 1], 1)
    """

    def __init__(self, tally: Tally,
                 publisher: Callable[[Callable[[], tuple[int, int]]], Callable[[], None] | None],
                 end: Callable[[Tally], None], fail: Callable[[BaseException], None],
                 check_empty: bool,
                 renew: Callable[[Tally], Tally | None] | None = None, epoch: int = 0) -> None:
        self._tally, self._publisher, self._end, self._fail = tally, publisher, end, fail
        self._epoch = epoch
        self._publish = publisher(tally.counts)
        self._check_empty, self._renew = check_empty, renew
        self._error: BaseException | None = None

    def __iter__(self) -> Iterator[Any]:
        # chain() calls the generator until it is done, ended or failed, then the
        # callable for every later item: after a failure it keeps raising, since
        # iter(callable, sentinel) stops only when the callable raises StopIteration.
        return itertools.chain(self._examples(), iter(self._after, None))

    def _examples(self) -> Iterator[Any]:
        tally, publish = self._tally, self._publish
        if self._renew is not None:  # asked at the first item, not when the loader begins
            renewed = self._renew(tally)
            if renewed is None:
                return
            if renewed is not tally:
                tally, publish = renewed, self._publisher(renewed.counts)
        try:
            # Not `yield from`: it would close the pipeline when an iteration is dropped,
            # and the next one reads on from the same pipeline.
            for item in tally:
                if publish is not None:
                    publish()
                yield item
        except GeneratorExit:  # the iteration was dropped: not a read error
            raise
        except BaseException as error:
            # KeyboardInterrupt and SystemExit too: a read interrupted in a notebook
            # ends this generator as any error does, and the loop run again must not
            # see a clean end of the epoch.
            self._error = error
            self._fail(error)
            raise
        if publish is not None:
            publish()
        self._end(tally)
        if self._check_empty and not tally.yields:
            raise ValueError(empty_message())

    def _after(self) -> Any:
        if self._error is None:
            raise StopIteration
        raise RuntimeError(
            f"this EchoDataset iteration stopped at a read error "
            f"({type(self._error).__name__}: {self._error}) and cannot go on: the "
            "DataLoader dropped the examples of the batch it was filling; to read the "
            f"rest of epoch {self._epoch}, restore the checkpoint taken before the error, "
            f"or call set_epoch({self._epoch}) on the dataset and iterate again (which "
            "reads the whole epoch again)") from self._error


def empty_message() -> str:
    """The error for a whole epoch without an example, naming where it happened."""
    info = get_worker_info()
    where = ("the training process" if info is None
             else f"DataLoader worker {info.id} of {info.num_workers}")
    return (f"dataset yielded no examples in {where} for a whole epoch: the stream is "
            "empty, or this reader's part of it is (fewer stream shards than DataLoader "
            "workers times ranks); check the stream's files, or use fewer workers")
