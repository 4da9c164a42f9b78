"""What an ``EchoDataset`` worker hands over, counted; and its older checkpoints.

:class:`Tally` is the stage an ``EchoDataset``'s epoch loop builds for each epoch: the
worker's pipeline, counted as the DataLoader receives it, cheaply enough to publish
after every example. :func:`upgrade_state` reads a state written by earlier dataecho
versions (``{"epoch", "pipeline", "totals"}``) into the loop's format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._checks import state_bool, state_int, state_mapping, state_value
from ..loop import ENDED
from ..stage import Stage, State
from ..stats import EchoStats, chain


class Tally(Stage[Any]):
    """Counts the fresh and emitted examples of the pipeline it reads.

    Fresh examples are those of the first echo stage, or with no echo stage (factor 1)
    the reads of the last stage that counts them (a ``Shard`` after a stream keeps only
    this reader's share), or else the items handed over; each is emitted once.

    Args:
        upstream: the pipeline of one epoch.

    Example:
        >>> from dataecho import Echo
        >>> tally = Tally(Echo(range(3), factor=2))
        >>> len(list(tally)), tally.counts()
        (6, (3, 6))
    """

    upstream: Stage[Any]

    def __init__(self, upstream: Stage[Any]) -> None:
        self.upstream, self.yields = upstream, 0
        stages = chain(upstream)
        self._echo = next((s for s in stages if hasattr(s, "echo_counts")), None)
        self._source = next((s for s in reversed(stages) if hasattr(s, "items_read")), None)

    def __next__(self) -> Any:
        item = next(self.upstream)
        self.yields += 1
        return item

    def counts(self) -> tuple[int, int]:
        """(fresh, emitted) examples so far; cheap enough to call for every example."""
        if self._echo is not None:
            fresh, emitted, _, _ = self._echo.echo_counts()
            return fresh, emitted
        # No echo stage: every example read is emitted once.
        read = self.yields if self._source is None else int(self._source.items_read)
        return read, read

    def stats(self) -> EchoStats:
        """:meth:`counts` as :class:`dataecho.EchoStats` (one example per item)."""
        fresh, emitted = self.counts()
        return EchoStats(fresh, emitted, fresh, emitted, None)

    def _config(self) -> dict[str, Any]:
        return {}

    def _snapshot(self) -> Any:
        return (self.upstream._snapshot(), self.yields)

    def _state(self, token: Any) -> State:
        return {"upstream": self.upstream._expand(token[0]), "yields": token[1]}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        upstream = state_mapping(state, "upstream", "Tally")
        yields = state_int(state, "yields", "Tally", rule="items handed over this epoch")
        self.upstream.load_state_dict(upstream)
        self.yields = yields

    def __repr__(self) -> str:
        return repr(self.upstream)


def upgrade_state(state: Any) -> tuple[Any, tuple[int, int] | None]:
    """A state in the epoch loop's format, and the totals an older one carried.

    States written by earlier versions, ``{"epoch", "pipeline", "totals"}`` (the
    position: None, ``"ended"``, a pipeline's state, or the state of the stage that
    wrapped it, ``Counted``), come back in the format of ``dataecho.loop.Epochs``
    with no counts of their own, and with their ``totals`` (fresh, emitted) over all
    workers; the counters in a pipeline's state count again once it is restored, so
    only the totals are exact. Any other value comes back as it is, with None.

    Example:
        >>> new, totals = upgrade_state({"epoch": 2, "pipeline": "ended", "totals": [4, 8]})
        >>> new["epoch"], new["stage"], totals
        (2, 'ended', (4, 8))
    """
    if not isinstance(state, Mapping) or any(k in state for k in ("stage", "done", "counts")):
        return state, None
    if "epoch" not in state:
        raise ValueError(
            f"state lacks the key 'epoch' that EchoDataset.state_dict() writes (it has "
            f"{', '.join(map(str, state)) or 'none'}): it was saved by another object; "
            "pass the dict saved from this dataset's checkpoint")
    epoch = state_int(state, "epoch", "EchoDataset", rule="the epoch to resume")
    position = state.get("pipeline")
    if isinstance(position, Mapping) and position.get("stage") == "Counted":
        position = _counted_position(position)
    if not (position is None or position == ENDED or isinstance(position, Mapping)):
        raise ValueError(
            f"state of EchoDataset has pipeline={position!r}, but it must be None (the "
            f"epoch's start), {ENDED!r} (after its end) or a pipeline's state dict: the "
            "checkpoint is damaged; pass the dict saved from this dataset's checkpoint")
    totals = state_value({"totals": (0, 0), **state}, "totals", "EchoDataset")
    if not isinstance(totals, Sequence) or isinstance(totals, str) or len(totals) != 2:
        raise ValueError(
            f"state of EchoDataset has totals={totals!r}, but it must be a list "
            "[fresh_examples, emitted_examples]: the checkpoint is damaged; pass the "
            "dict saved from this dataset's checkpoint")
    named = {"totals[0]": totals[0], "totals[1]": totals[1]}
    fresh = state_int(named, "totals[0]", "EchoDataset", rule="fresh examples")
    emitted = state_int(named, "totals[1]", "EchoDataset", rule="emitted examples")
    stage: object = position
    if isinstance(position, Mapping):
        stage = {"stage": "Tally", "version": Tally.VERSION, "config": {},
                 "upstream": dict(position), "yields": 0}
    zero = {"fresh_examples": 0, "emitted_examples": 0, "fresh_items": 0,
            "emitted_items": 0, "batches": None}
    return {"epoch": epoch, "done": zero, "stage": stage, "counts": dict(zero)}, (fresh, emitted)


def _counted_position(state: Mapping[str, Any]) -> Mapping[str, Any] | str:
    """The position in the state of ``Counted``, the stage that wrapped a pipeline."""
    state = {"ended": False, "epoch": 0, **state}  # keys older versions did not write
    ended = state_bool(state, "ended", "Counted")
    state_int(state, "epoch", "Counted", rule="the epoch the worker read")
    return ENDED if ended else state_mapping(state, "upstream", "Counted")
