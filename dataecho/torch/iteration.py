"""One iteration of an ``EchoDataset``: its live pipeline, counted as handed over.

:class:`Tally` is the stage an ``EchoDataset``'s recipe builds for each epoch: the
reader's pipeline, counted cheaply enough to publish after every example (in a
DataLoader worker; the training process reads its own when asked).
:class:`Iteration` is what ``EchoDataset.__iter__`` returns: it decides which part the
iteration reads, starts (or resumes) the epoch, hands the examples over, publishes the
counts, ends the epoch, and makes a read error stick. It calls the epoch loop and the
shared counts itself; nothing it is given calls back into the dataset.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

from torch.utils.data import get_worker_info

from .._checks import state_int, state_mapping
from ..loop import Epochs
from ..stage import Stage, State, StateMismatch
from ..stats import Counting, EchoStats, chain
from .ranks import Part
from .workers import EpochCounter, SharedCounts


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


class Iteration(Iterable[Any]):
    """One iteration's examples, counted as handed over; a read error sticks.

    Built eagerly (by ``EchoDataset.__iter__``): the epoch is claimed and its pipeline
    built (and restored) now, so a state a ``StatefulDataLoader`` takes before the first
    example already names this iteration's epoch. Where a trainer has not yet recorded
    the loader that decides the split (accelerate's prepare takes a stateful loader's
    state before), the part is decided again at the first example, and an epoch nothing
    was read from is begun again for it.

    An error raised through a generator ends it, so the DataLoader's next call would see
    a normal end of the epoch; and the DataLoader drops the examples of the batch it was
    filling when a read fails, so going on after an error would lose them silently.
    The iterator is therefore a generator for the examples (the per-example path at a
    generator's speed) chained to a tail that, after an error, raises again at every
    call, naming the first error.

    Args:
        dataset: the data set iterated, as a trainer's loader holds it (its identity).
        loop: the data set's epoch loop, whose builder reads ``part``.
        part: which part of the data this copy reads.
        counts: the shared counts this iteration publishes to.
        epochs: the shared epoch counter, for a checkpoint loaded in the training process.
        load: the number of such a checkpoint not resumed yet by this copy, or None.
        stream: the data is a stream: a whole pass without an example is an error.
        place: ``place(epoch, tally)``, what is handed over of an epoch's pipeline:
            under accelerate's sliced mode its items in this process's slots
            (:meth:`dataecho.torch.recipe.Recipe.place`); None: the pipeline itself.

    Example:
        >>> from dataecho import Echo
        >>> from dataecho.loop import Epochs
        >>> loop = Epochs(lambda epoch: Tally(Echo(range(2), factor=2)))
        >>> it = Iteration([], loop, Part(None, None), SharedCounts(), EpochCounter(), None,
        ...                stream=False)
        >>> list(it), loop.stats().emitted_examples
        ([0, 0, 1, 1], 4)
    """

    def __init__(self, dataset: object, loop: Epochs, part: Part, counts: SharedCounts,
                 epochs: EpochCounter, load: int | None, *, stream: bool,
                 place: Callable[[int, Tally], Iterable[Any]] | None = None) -> None:
        self._dataset, self._loop, self._part, self._counts = dataset, loop, part, counts
        self._place = place
        self.failed: BaseException | None = None  # the read error that stopped it
        self._tally: Tally | None = None  # None: hands out nothing
        self._check_empty = self._restored = False
        self._read_as = part.decide(dataset)  # what this iteration's pipeline reads
        self._slots = part.slots
        self._undecided = not part.final
        if self._read_as is None:
            return  # a process whose trainer reads the data elsewhere
        if load is not None and loop.pending and not epochs.take(load):
            loop.drop_pending()  # an earlier iteration resumed it
        restoring = loop.pending
        self._check_empty = stream and not restoring  # a restored pass may be empty
        try:
            stage = loop.start()
        except ValueError as error:
            if not restoring:
                raise
            raise ValueError(refusal(error)) from error
        self._restored = restoring
        if not loop.ended:  # restored after this epoch's end: nothing is left
            self._tally = cast(Tally, stage)

    def __iter__(self) -> Iterator[Any]:
        # chain() calls the generator until it is done, ended or failed, then the
        # callable for every later item: after a failure it keeps raising, since
        # iter(callable, sentinel) stops only when the callable raises StopIteration.
        return itertools.chain(self._examples(), iter(self._after, None))

    def _examples(self) -> Iterator[Any]:
        tally = self._redecided() if self._undecided else self._tally
        if tally is None:
            return
        publish = self._counts.publisher(tally.counts)
        items = tally if self._place is None else self._place(self._loop.epoch, tally)
        try:
            # Not `yield from`: it would close the pipeline when an iteration is dropped,
            # and the next one reads on from the same pipeline.
            for item in items:
                if publish is not None:
                    publish()
                yield item
        except GeneratorExit:  # the iteration was dropped: not a read error
            raise
        except BaseException as error:
            # KeyboardInterrupt and SystemExit too: a read interrupted in a notebook
            # ends this generator as any error does, and the loop run again must not
            # see a clean end of the epoch.
            self.failed = error
            raise
        if publish is not None:
            publish()
        if self._loop.stage is tally:  # not replaced by set_epoch or a restore meanwhile
            self._loop.end()
        if self._check_empty and not tally.yields:
            raise ValueError(empty_message())

    def _redecided(self) -> Tally | None:
        """The pipeline to read, the split decided again at the first example."""
        tally = self._tally
        if tally is None or self._loop.stage is not tally:
            return tally  # set_epoch or a restore replaced it: read on as before
        read_as = self._part.decide(self._dataset)
        if read_as is None:
            return None  # a process accelerate's dispatcher leaves idle
        if (read_as, self._part.slots) == (self._read_as, self._slots) or (
                self._restored or tally.yields):
            return tally
        # Nothing was read from this epoch: begin it again, from its start, for the
        # part decided now (its state at the start is the epoch's, with no position).
        state = self._loop.state_dict()
        self._loop.load_state_dict({**state, "stage": None}, "EchoDataset")
        self._tally = cast(Tally, self._loop.start())
        return self._tally

    def _after(self) -> Any:
        if self.failed is None:
            raise StopIteration
        epoch = self._loop.epoch
        raise RuntimeError(
            f"this EchoDataset iteration stopped at a read error "
            f"({type(self.failed).__name__}: {self.failed}) and cannot go on: the "
            "DataLoader dropped the examples of the batch it was filling; to read the "
            f"rest of epoch {epoch}, restore the checkpoint taken before the error, "
            f"or call set_epoch({epoch}) on the dataset and iterate again (which "
            "reads the whole epoch again)") from self.failed


def empty_message() -> str:
    """The error for a whole epoch without an example, naming where it happened."""
    info = get_worker_info()
    where = ("the training process" if info is None
             else f"DataLoader worker {info.id} of {info.num_workers}")
    return (f"dataset yielded no examples in {where} for a whole epoch: the stream is "
            "empty, or this reader's part of it is (fewer stream shards than DataLoader "
            "workers times ranks); check the stream's files, or use fewer workers")


# What differs when a checkpoint's pipeline refuses it, in EchoDataset's words.
_SPLIT = {"reader", "shard_index", "num_shards", "shard"}  # which part a reader reads
_ARGUMENTS = {"factor": "factor", "max_factor": "factor", "min_fresh": "factor",
              "buffer_size": "buffer_size", "seed": "seed", "size": "dataset (its length)",
              "shuffle": "read=Indexed(shuffle=...)",
              "drop_remainder": "read=Indexed(drop_remainder=...)", "fn": "augment",
              "random": "augment", "augment": "augment", "batch_size": "factor",
              "stage": "echo, factor or augment (the pipeline's stages differ)",
              "version": "dataecho version"}


def refusal(error: ValueError) -> str:
    """Why a checkpoint cannot resume here, naming what differs and its fix.

    Example:
        >>> refusal(ValueError("damaged"))[:45]
        'EchoDataset cannot resume this checkpoint her'
    """
    head = f"EchoDataset cannot resume this checkpoint here ({error})"
    if not isinstance(error, StateMismatch):
        return f"{head}; pass the state saved from this EchoDataset's checkpoint"
    if _SPLIT & set(error.fields):
        return (f"{head}: it was taken with another number of DataLoader workers or ranks; "
                "resume with the ones it was taken with, or checkpoint with torchdata's "
                "StatefulDataLoader, which saves and restores every worker")
    names = sorted({_ARGUMENTS.get(field, field) for field in error.fields})
    return (f"{head}: it was taken with another {' and '.join(names)}; construct the "
            "EchoDataset with the arguments it was taken with to resume it")
