"""What an ``EchoDataset`` worker hands over, counted.

:class:`Tally` is the stage an ``EchoDataset``'s epoch loop builds for each epoch: the
worker's pipeline, counted as the DataLoader receives it, cheaply enough to publish
after every example.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._checks import state_int, state_mapping
from ..stage import Stage, State
from ..stats import EchoStats, chain


class Tally(Stage[Any]):
    """Counts the fresh and emitted examples of the pipeline it reads.

    Fresh examples are those of the first echo stage, or with no echo stage (factor 1)
    the reads of the last stage that counts them (a ``Shard`` after a stream keeps only
    this reader's share), or else the items handed over; each is emitted once.

    Args:
        upstream: the pipeline of one epoch.
        reader: ``(index, count)``: which reader (worker of a rank) of how many reads
            this pipeline. Part of the configuration, so a state taken by another reader
            or under another split (other workers or ranks) is refused, not replayed.

    Example:
        >>> from dataecho import Echo
        >>> tally = Tally(Echo(range(3), factor=2))
        >>> len(list(tally)), tally.counts()
        (6, (3, 6))
    """

    VERSION = 2  # 2: the configuration names the reader
    upstream: Stage[Any]

    def __init__(self, upstream: Stage[Any], reader: tuple[int, int] = (0, 1)) -> None:
        self.upstream, self.yields, self.reader = upstream, 0, reader
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
        return {"reader": list(self.reader)}

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
