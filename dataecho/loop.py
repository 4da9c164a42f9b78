"""The one epoch loop the framework adapters stand on.

A wrapper around a framework's loader (``EchoBatches``, ``EchoNode``) builds a new echo
stage for every epoch, so that each epoch derives its own seeds. What is left to solve
is the same for all of them, and is solved here once: which epoch is read, a loaded
checkpoint that is applied when the next epoch's stage is built, and the totals of the
finished epochs, so that :meth:`Epochs.stats` covers the whole run, also right after a
restore. The counts travel in this loop's own state; nothing parses a stage's state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from ._checks import check_positive_int, state_int
from .stage import Stage, State
from .stats import EchoStats

_KEYS = ("epoch", "done", "stage", "counts")


class Epochs:
    """Builds one stage per epoch; carries the epoch, a pending restore and the totals.

    ``start()`` builds the stage of the current epoch (applying a loaded state to it),
    ``end()`` marks that epoch read to its end and moves to the next. ``set_epoch``
    jumps to an epoch: the stage of the old one counts as finished, and a loaded state
    of another epoch is dropped (its counts stay in the totals), as with
    ``DistributedSampler.set_epoch``.

    Args:
        build: ``build(epoch)`` returns the stage that reads that epoch.

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

    def __init__(self, build: Callable[[int], Stage[Any]]) -> None:
        self._build = build
        self.epoch = 0
        self._stage: Stage[Any] | None = None
        self._pending: State | None = None  # the loaded stage state, not applied yet
        self._pending_counts = _ZERO
        self._done = _ZERO  # counts of finished epochs

    @property
    def stage(self) -> Stage[Any] | None:
        """The stage reading the current epoch, or None before :meth:`start`."""
        return self._stage

    @property
    def pending(self) -> bool:
        """Whether a loaded state waits for the next :meth:`start`."""
        return self._pending is not None

    def set_epoch(self, epoch: int) -> None:
        """Makes ``epoch`` the one the next :meth:`start` reads.

        Raises:
            TypeError: ``epoch`` is not an int.
            ValueError: ``epoch`` is negative.
        """
        epoch = check_positive_int(epoch, "epoch", minimum=0)
        if epoch != self.epoch:
            # The old epoch's iteration is over even if it never reached its end (a
            # trainer takes len() batches and never asks for the next): count it now, so
            # a state taken before the new epoch's first item holds no old position.
            self._finish()
            if self._pending is not None:
                self._done = self._done + self._pending_counts
                self._pending, self._pending_counts = None, _ZERO
        self.epoch = epoch

    def start(self) -> Stage[Any]:
        """Builds the current epoch's stage, resuming a loaded state; returns it."""
        self._finish()
        stage = self._build(self.epoch)
        if self._pending is not None:
            stage.load_state_dict(self._pending)
            self._pending, self._pending_counts = None, _ZERO
        self._stage = stage
        return stage

    def end(self) -> None:
        """The current epoch was read to its end: counts it and moves to the next."""
        self._finish()
        self.epoch += 1

    def close(self) -> None:
        """Releases the live stage's resources (an adaptive stage's thread)."""
        if self._stage is not None:
            self._stage.close()

    def _finish(self) -> None:
        if self._stage is not None:
            self._done = self._done + self._stage.stats()
            self._stage.close()
            self._stage = None

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

        Taken after :meth:`load_state_dict` and before :meth:`start`, it is the loaded
        state, so checkpointing again at once loses nothing.
        """
        if self._stage is not None:
            stage: State | None = self._stage.state_dict()
        else:
            stage = None if self._pending is None else dict(self._pending)
        return {"epoch": self.epoch, "done": asdict(self._done), "stage": stage,
                "counts": asdict(self._live())}

    def load_state_dict(self, state: Mapping[str, Any], owner: str = "Epochs",
                        name: str = "state") -> None:
        """Makes the next :meth:`start` resume where the checkpoint was taken.

        Args:
            state: a dict returned by :meth:`state_dict`.
            owner: the class whose ``state_dict`` is meant, for error messages.
            name: the parameter ``state`` was passed as, for error messages.

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
        done = _stats_of(state["done"], owner, "done")
        counts = _stats_of(state["counts"], owner, "counts")
        stage = state["stage"]
        if stage is not None and not isinstance(stage, Mapping):
            raise TypeError(
                f"{owner} state 'stage' must be None or a stage's state dict, got "
                f"{type(stage).__name__}; pass the dict saved from the checkpoint")
        if self._stage is not None:  # replaced by the checkpoint: not counted
            self._stage.close()
            self._stage = None
        self.epoch, self._done = epoch, done
        self._pending = None if stage is None else dict(stage)
        self._pending_counts = counts if stage is not None else _ZERO
        if stage is None:  # a checkpoint taken between epochs: its counts are done
            self._done = self._done + counts


_ZERO = EchoStats(0, 0, 0, 0, None)


def _stats_of(value: object, owner: str, key: str) -> EchoStats:
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
        counts[name] = state_int(value, name, f"{owner} ({key})")
    return EchoStats(**counts)
