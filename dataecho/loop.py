"""The one epoch loop the framework adapters stand on.

A wrapper around a framework's loader (``EchoBatches``, ``EchoNode``, ``EchoDataset``)
builds a new echo stage for every epoch, so that each epoch derives its own seeds. What
is left to solve is the same for all of them, and is solved here once: which epoch is
read, a loaded checkpoint that is applied when the next epoch's stage is built, where an
epoch read to its end stands, and the totals of the finished epochs, so that
:meth:`Epochs.stats` covers the whole run, also right after a restore. The counts travel
in this loop's own state; nothing parses a stage's state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any, Final, Literal, Protocol

from ._checks import check_bool, check_positive_int, state_int
from .stage import Stage, State
from .stats import EchoStats

_KEYS = ("epoch", "done", "stage", "counts")

#: The position of an epoch read to its end, in a state's ``"stage"``.
ENDED: Final = "ended"


class EpochSource(Protocol):
    """Says which epoch a loop's next stage reads (see :class:`LocalCounter`).

    A loop whose copies live in several processes (``EchoDataset`` in DataLoader
    workers) passes one backed by shared memory, so that every copy agrees.
    """

    def next(self) -> int:
        """The epoch the next :meth:`begin` returns, unless a checkpoint names one."""
        ...

    def set(self, epoch: int) -> None:
        """Makes ``epoch`` the one the next :meth:`begin` returns."""
        ...

    def begin(self, resume: int | None = None) -> int:
        """The epoch of the stage now built; ``resume``, a loaded state's epoch, wins."""
        ...

    def ended(self, epoch: int) -> None:
        """``epoch`` was read to its end."""
        ...


class LocalCounter:
    """The epoch source a loop has by default: a count in the loop's own object.

    An epoch is read again until it was read to its end; then the next one follows.

    Example:
        >>> counter = LocalCounter()
        >>> counter.begin(), counter.begin()  # an iteration left before its end
        (0, 0)
        >>> counter.ended(0); counter.begin(), counter.begin(resume=7), counter.next()
        (1, 7, 7)
    """

    def __init__(self) -> None:
        self.value = 0

    def next(self) -> int:
        """The epoch the next :meth:`begin` returns without ``resume``."""
        return self.value

    def set(self, epoch: int) -> None:
        """Makes ``epoch`` the one the next :meth:`begin` returns."""
        self.value = epoch

    def begin(self, resume: int | None = None) -> int:
        """The epoch now read: ``resume`` if given, else the current one."""
        if resume is not None:
            self.value = resume
        return self.value

    def ended(self, epoch: int) -> None:
        """``epoch`` was read to its end: the next one follows."""
        self.value = epoch + 1


class Epochs:
    """Builds one stage per epoch; carries the epoch, a pending restore and the totals.

    ``start()`` builds the stage of the current epoch (applying a loaded state to it),
    ``end()`` marks that epoch read to its end and moves to the next. ``set_epoch``
    jumps to an epoch: the stage of the old one counts as finished, and a loaded state
    of another epoch is dropped (its counts stay in the totals), as with
    ``DistributedSampler.set_epoch``.

    With ``mark_end``, for a loop whose caller may not yet know that an epoch is over
    (a dataset inside a DataLoader sees the end inside a partial last batch, but not
    after a full one), the epoch stays current after ``end()``: a state taken then names
    it, with the position ``"ended"``, whatever the batch alignment. A start after a
    restore of such a state reads nothing, and the one after it the next epoch; and
    ``set_epoch`` ends the live stage whatever the epoch, since the caller has said
    which epoch comes next.

    Args:
        build: ``build(epoch)`` returns the stage that reads that epoch.
        counter: which epoch each start reads (an :class:`EpochSource`); default
            :class:`LocalCounter`, a count in this object.
        mark_end: keep an epoch read to its end current, named ``"ended"`` (see above).

    Raises:
        TypeError: ``build`` is not callable, ``mark_end`` is not a bool, or
            ``counter`` lacks the :class:`EpochSource` methods.

    Example:
        >>> from dataecho import Echo
        >>> loop = Epochs(lambda epoch: Echo(range(3), factor=2, seed=epoch))
        >>> _ = list(loop.start()); loop.end()
        >>> state = loop.state_dict()
        >>> again = Epochs(lambda epoch: Echo(range(3), factor=2, seed=epoch))
        >>> again.load_state_dict(state)
        >>> again.epoch, again.stats().fresh_examples, again.stats().emitted_examples
        (1, 3, 6)
    """

    def __init__(self, build: Callable[[int], Stage[Any]], counter: EpochSource | None = None,
                 *, mark_end: bool = False) -> None:
        if not callable(build):
            raise TypeError(
                f"build must be callable as build(epoch) -> stage, got "
                f"{type(build).__name__}; pass a function that builds one epoch's stage")
        missing = [m for m in ("next", "set", "begin", "ended")
                   if not callable(getattr(counter, m, None))]
        if counter is not None and missing:
            raise TypeError(
                f"counter must have the EpochSource methods next, set, begin and ended, got "
                f"{type(counter).__name__} without {', '.join(missing)}; pass None for a "
                "count in this loop, or an object with those methods")
        self._build = build
        self._counter: EpochSource = LocalCounter() if counter is None else counter
        self._mark_end = check_bool(mark_end, "mark_end")
        self._stage: Stage[Any] | None = None
        self._current: int | None = None  # the epoch of the live or ended stage
        self._ended = False  # the current epoch was read to its end
        # A loaded position not applied yet (a stage's state, or ENDED) and its epoch,
        # which the next start reads whatever the counter says.
        self._pending: State | Literal["ended"] | None = None
        self._resume = 0
        self._pending_counts = _ZERO
        self._done = _ZERO  # counts of finished epochs
        self._began = _ZERO  # the live stage's counts when it started
        self._kept = False  # set_epoch kept the live stage: the next start reads it
        self._owner = "Epochs"  # whose state was loaded, for messages

    def __getstate__(self) -> dict[str, Any]:
        # A copy for another process (spawned DataLoader workers) leaves the live stage
        # here (it may hold a thread or a closure): what it read counts as finished, as
        # start() counts a stage it does not read on.
        if self._stage is None:
            return self.__dict__.copy()
        other = object.__new__(type(self))  # copy.copy would call this method again
        other.__dict__.update(self.__dict__)
        other._release()
        return other.__dict__

    @property
    def epoch(self) -> int:
        """The epoch of the live (or ended) stage, else the one the next start reads."""
        if self._current is not None:
            return self._current
        if self._pending is not None:
            return self._resume
        return self._counter.next()

    @property
    def stage(self) -> Stage[Any] | None:
        """The stage reading the current epoch, or None before :meth:`start`."""
        return self._stage

    @property
    def pending(self) -> bool:
        """Whether a loaded state waits for the next :meth:`start`."""
        return self._pending is not None

    @property
    def ended(self) -> bool:
        """Whether the current epoch was read to its end (see ``mark_end``)."""
        return self._ended

    def set_epoch(self, epoch: int) -> None:
        """Makes ``epoch`` the one the next :meth:`start` reads.

        Raises:
            TypeError: ``epoch`` is not an int.
            ValueError: ``epoch`` is negative.
        """
        epoch = check_positive_int(epoch, "epoch", minimum=0)
        if epoch == self._current and self._untouched():
            # Begun but not read yet (a loader's state_dict() begins an iteration before
            # the trainer's first set_epoch): the same epoch from its start, so it stays,
            # and the next start() reads it rather than claiming the one after.
            self._kept = True
            return
        other = epoch != self.epoch
        if other or self._mark_end:
            # The old epoch's iteration is over even if it never reached its end (a
            # trainer takes len() batches and never asks for the next): count it now, so
            # a state taken before the new epoch's first item holds no old position.
            self._finish()
        if other and self._pending is not None:
            self._done = self._done + self._pending_counts
            self._pending, self._pending_counts = None, _ZERO
        self._counter.set(epoch)

    def start(self) -> Stage[Any]:
        """Builds the current epoch's stage, resuming a loaded state; returns it.

        After a restore of a state taken at an epoch's end, it returns an empty stage
        and the epoch counts as read to its end (:attr:`ended`).
        """
        if self._kept and self._untouched():
            self._kept = False
            return self._stage  # type: ignore[return-value]
        self._finish()
        pending = self._pending
        epoch = self._counter.begin(None if pending is None else self._resume)
        if pending == ENDED:
            self._pending, self._current, self._ended = None, epoch, True
            self._counter.ended(epoch)
            return _Spent()
        stage = self._build(epoch)
        if pending is not None:
            stage.load_state_dict(pending)  # a damaged state stays pending, and fails again
            restored = stage.stats()
            if restored != self._pending_counts:  # both were taken at one moment
                stage.close()
                raise ValueError(
                    f"state of {self._owner} has counts={asdict(self._pending_counts)}, but "
                    f"its stage's counters make {asdict(restored)}: the two were not taken "
                    "together; the checkpoint is damaged; pass the dict saved from the "
                    "checkpoint")
        self._pending, self._pending_counts = None, _ZERO
        self._stage, self._current, self._began = stage, epoch, stage.stats()
        return stage

    def _untouched(self) -> bool:
        """Whether a live stage has read nothing since it started."""
        return self._stage is not None and not self._ended and self._stage.stats() == self._began

    def drop_pending(self) -> None:
        """Forgets a loaded state not applied yet: the next start reads the counter's epoch.

        For a copy of a loop whose checkpoint another copy resumed already (a DataLoader
        worker of a later iteration). Its counts are not added: the copy that resumed
        the state carries them.
        """
        self._pending, self._pending_counts = None, _ZERO

    def end(self) -> None:
        """The current epoch was read to its end: counts it and moves to the next.

        With ``mark_end`` the epoch stays current, marked ended, until the next
        :meth:`start` or :meth:`set_epoch`.
        """
        epoch = self.epoch
        self._finish()
        self._counter.ended(epoch)
        if self._mark_end:
            self._current, self._ended = epoch, True

    def close(self) -> None:
        """Releases the live stage's resources (an adaptive stage's thread)."""
        if self._stage is not None:
            self._stage.close()

    def _finish(self) -> None:
        stage = self._release()
        if stage is not None:
            stage.close()

    def _release(self) -> Stage[Any] | None:
        """Counts the live stage as finished and lets go of it, unclosed; returns it."""
        stage, self._stage, self._kept = self._stage, None, False
        if stage is not None:
            self._done = self._done + stage.stats()
        self._current, self._ended = None, False
        return stage

    def _live(self) -> EchoStats:
        if self._stage is not None:
            return self._stage.stats()
        return self._pending_counts

    def stats(self) -> EchoStats:
        """Counts over every epoch so far: the finished ones plus the current one's.

        After :meth:`load_state_dict` they include the checkpoint's counts, also before
        the next :meth:`start`.
        """
        return self._done + self._live()

    def state_dict(self) -> State:
        """Epoch, finished-epoch totals, the position in this epoch and its counts.

        The position (``"stage"``) is the live stage's state, ``"ended"`` after the
        epoch's end (with ``mark_end``), or None at its start. Taken after
        :meth:`load_state_dict` and before :meth:`start`, it is the loaded state, so
        checkpointing again at once loses nothing.
        """
        stage: State | str | None
        if self._stage is not None:
            stage = self._stage.state_dict()
        elif self._ended:
            stage = ENDED
        else:
            stage = dict(self._pending) if isinstance(self._pending, Mapping) else self._pending
        return {"epoch": self.epoch, "done": asdict(self._done), "stage": stage,
                "counts": asdict(self._live())}

    def load_state_dict(self, state: Mapping[str, Any], owner: str = "Epochs",
                        name: str = "state", most_copies: int | None = None) -> None:
        """Makes the next :meth:`start` resume where the checkpoint was taken.

        Args:
            state: a dict returned by :meth:`state_dict`.
            owner: the class whose ``state_dict`` is meant, for error messages.
            name: the parameter ``state`` was passed as, for error messages.
            most_copies: the most copies of one example the stages make
                (:func:`dataecho.factor.most_copies`): the counts' emitted examples and
                items are at most that many times the fresh ones; None: no bound.

        Raises:
            TypeError: ``state`` is not a dict.
            ValueError: a key is missing or a value is malformed.
        """
        if not isinstance(state, Mapping):
            raise TypeError(
                f"{name} must be a dict returned by {owner}.state_dict(), got "
                f"{type(state).__name__}; pass the dict saved from the checkpoint")
        missing = [k for k in _KEYS if k not in state]
        if missing:
            raise ValueError(
                f"{name} lacks the keys {', '.join(missing)} that {owner}.state_dict() "
                f"writes (it has {', '.join(map(str, state)) or 'none'}): it was saved by another "
                "object; pass the dict saved from this one's checkpoint")
        epoch = state_int(state, "epoch", owner, rule="the epoch to resume")
        done = _stats_of(state["done"], owner, "done", most_copies)
        counts = _stats_of(state["counts"], owner, "counts", most_copies)
        stage = state["stage"]
        if not (stage is None or stage == ENDED or isinstance(stage, Mapping)):
            raise ValueError(
                f"state of {owner} has stage={stage!r}, but it must be None (the epoch's "
                f"start), {ENDED!r} (after its end) or a stage's state dict: the checkpoint "
                "is damaged; pass the dict saved from the checkpoint")
        if self._stage is not None:  # replaced by the checkpoint: not counted
            self._stage.close()
            self._stage = None
        self._kept = False
        self._owner = owner
        self._current, self._ended, self._done = None, False, done
        if isinstance(stage, Mapping):
            self._pending, self._resume, self._pending_counts = dict(stage), epoch, counts
            return
        # Between epochs, or at one's end: the checkpoint's counts are done.
        self._done, self._pending_counts = self._done + counts, _ZERO
        if stage is None:
            self._pending = None
            self._counter.set(epoch)
        else:  # the next start reads this epoch, and finds nothing left
            self._pending, self._resume = ENDED, epoch


_ZERO = EchoStats(0, 0, 0, 0, None)


class _Spent(Stage[Any]):
    """The stage of an epoch restored at its end: nothing is left to read."""

    def __next__(self) -> Any:
        raise StopIteration

    def _config(self) -> dict[str, Any]:
        return {}

    def _snapshot(self) -> State:
        return {}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        pass

    def stats(self) -> EchoStats:
        return _ZERO


#: The largest count a state may hold: exact as a float (a JSON writer's numbers) and
#: far past any run, so the shared 64-bit counters that add them up cannot wrap.
MAX_COUNT = 2**53


def _stats_of(value: object, owner: str, key: str, most_copies: int | None) -> EchoStats:
    fields = ("fresh_examples", "emitted_examples", "fresh_items", "emitted_items", "batches")
    if not isinstance(value, Mapping) or set(value) != set(fields):
        raise ValueError(
            f"{owner} state {key!r} must be a dict with the keys {', '.join(fields)}, got "
            f"{value!r}; pass the dict saved from the checkpoint")
    counts: dict[str, Any] = {}
    for name in fields:
        v = value[name]
        if name == "batches" and v is None:
            counts[name] = None
            continue
        counts[name] = state_int(value, name, f"{owner} ({key})", maximum=MAX_COUNT,
                                 rule="a count, at most 2**53")
    for unit in ("examples", "items"):
        fresh, emitted = counts[f"fresh_{unit}"], counts[f"emitted_{unit}"]
        most = emitted if most_copies is None else most_copies * fresh
        if not fresh <= emitted <= most:
            bound = ("" if most_copies is None else
                     f" <= {most_copies} * fresh_{unit} (the most copies of one example)")
            raise ValueError(
                f"{owner} state {key!r} has fresh_{unit}={fresh} and emitted_{unit}="
                f"{emitted}, but they must satisfy fresh_{unit} <= emitted_{unit}{bound}: "
                "the counters are inconsistent, so the checkpoint is damaged; pass the "
                "dict saved from the checkpoint")
    return EchoStats(**counts)
