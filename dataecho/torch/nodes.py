"""Echoing inside a ``torchdata.nodes`` graph: :class:`EchoNode`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from torchdata.nodes import BaseNode

from .._checks import check_factor, check_positive_int, check_seed, check_size
from .._rng import derive_seed
from ..adaptive import DEFAULT_MAX_FACTOR, AdaptiveEcho
from ..echo import Echo
from ..iterable import NodeSource, is_node
from ..shuffle import Shuffle
from ..stage import Stage, State
from ..stats import Counts, EchoStats, add_counts, as_counts, collect
from .batches import reject_auto_only

T = TypeVar("T")

_ECHO, _SHUFFLE = 1, 2  # seed tags of the two stages, per epoch


class EchoNode(BaseNode[T]):  # type: ignore[misc]  # torchdata ships no types
    """A ``torchdata.nodes`` node that echoes the items of the node before it.

    Where it stands decides the paper's variant, as with :class:`dataecho.Echo`:
    before an augmenting ``Mapper`` (example echoing before augmentation: each copy
    is augmented anew), after it (identical copies), or after a ``Batcher`` (batch
    echoing; pass ``size=len`` so fresh examples, not batches, are counted).
    ``buffer_size`` adds the paper's shuffle buffer after the echo, which spreads the
    copies of an example apart.

    Checkpoint: ``state_dict()`` (or the ``Loader``'s) holds the epoch, counters and
    the source node's own state, never elements; ``reset(state)`` resumes exactly.
    Each ``reset()`` without a state starts a new epoch (``Loader`` does this at every
    ``iter()``), and each epoch derives its own seeds, so fractional draws and shuffle
    orders differ between epochs and are the same on every rerun.

    ``factor="auto"`` echoes only while the next fresh item is not ready, at most
    ``max_factor`` uses per item (:class:`dataecho.AdaptiveEcho`: a background thread
    reads the source node; :meth:`close` stops it, so does the end of an epoch).

    Args:
        source: the node to read, a ``torchdata.nodes.BaseNode``.
        factor: copies per item, a real number >= 1, or ``"auto"``.
        buffer_size: items in the post-echo shuffle window; None: copies stay adjacent.
        seed: seed of the fractional draws, echo picks and shuffle orders.
        size: examples in an item, for accounting; default 1 per item, with a fixed
            factor and with ``"auto"`` (``len`` for the lists a ``Batcher`` yields).
        max_factor: with ``factor="auto"``, the most uses of one fresh item (default
            4); an error with a fixed factor, where it would do nothing.

    Example:
        >>> from torchdata.nodes import Batcher, IterableWrapper, Loader
        >>> node = EchoNode(Batcher(IterableWrapper(range(4)), batch_size=2), 2, size=len)
        >>> loader = Loader(node)
        >>> list(loader)
        [[0, 1], [0, 1], [2, 3], [2, 3]]
        >>> node.stats().fresh_examples, node.stats().emitted_examples
        (4, 8)
    """

    def __init__(
        self,
        source: BaseNode[T],
        factor: float | str,
        *,
        buffer_size: int | None = None,
        seed: int = 0,
        size: Callable[[T], int] | None = None,
        max_factor: int | None = None,
    ) -> None:
        super().__init__()
        if not is_node(source):
            raise TypeError(
                f"source must be a torchdata.nodes.BaseNode, got {type(source).__name__}; "
                "wrap an iterable with torchdata.nodes.IterableWrapper(...) first")
        self.source = source
        self.auto = isinstance(factor, str) and factor == "auto"
        self.factor = 1.0 if self.auto else check_factor(factor)
        if not self.auto:
            reject_auto_only(self.factor, max_factor=max_factor)
        self.buffer_size = None if buffer_size is None else check_positive_int(
            buffer_size, "buffer_size")
        self.seed = check_seed(seed)
        self.size = check_size(size)
        self.max_factor = check_positive_int(
            DEFAULT_MAX_FACTOR if max_factor is None else max_factor, "max_factor")
        self.epoch = -1  # the first reset() starts epoch 0
        self._stage: Stage[T] | None = None
        self._done: Counts = (0, 0, 0, 0)  # counts of finished epochs

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        """Starts the next epoch, or resumes from a :meth:`state_dict`."""
        super().reset(initial_state)
        self._finish_epoch()
        if initial_state is None:
            self.epoch += 1
            self.source.reset(None)
            self._stage = self._build()
            return
        if not isinstance(initial_state, dict) or "stage" not in initial_state:
            raise TypeError(
                "initial_state must be a dict returned by EchoNode.state_dict(), got "
                f"{type(initial_state).__name__}; pass the state saved from the checkpoint")
        self.epoch = int(initial_state["epoch"])
        self._done = as_counts(initial_state["done"])
        self._stage = self._build()
        self._stage.load_state_dict(initial_state["stage"])  # resets the source node too

    def _build(self) -> Stage[T]:
        seed = derive_seed(self.seed, self.epoch)
        upstream: NodeSource[T] = NodeSource(self.source)
        echo: Stage[T]
        if self.auto:
            # AdaptiveEcho's own default measures items as batches; a node's items
            # count 1 each unless size says otherwise, as with a fixed factor.
            echo = AdaptiveEcho(upstream, max_factor=self.max_factor,
                                seed=derive_seed(seed, _ECHO), size=self.size or _one)
        else:
            echo = Echo(upstream, self.factor, seed=derive_seed(seed, _ECHO), size=self.size)
        if self.buffer_size is None:
            return echo
        return Shuffle(echo, self.buffer_size, seed=derive_seed(seed, _SHUFFLE))

    def _current(self) -> Stage[T]:
        # BaseNode calls reset() before the first next() or state_dict(), so the stage
        # exists unless a subclass skipped that.
        if self._stage is None:
            raise RuntimeError("EchoNode was not reset(); iterate it or wrap it in a Loader")
        return self._stage

    def next(self) -> T:
        return next(self._current())

    def get_state(self) -> State:
        return {"epoch": self.epoch, "done": list(self._done),
                "stage": self._current().state_dict()}

    def _counts(self) -> Counts:
        if self._stage is None:
            return (0, 0, 0, 0)
        s = collect(self._stage)
        return (s.fresh_examples, s.emitted_examples, s.fresh_items, s.emitted_items)

    def _finish_epoch(self) -> None:
        if self._stage is not None:
            self._done = add_counts(self._done, self._counts())
            self._stage.close()
            self._stage = None

    def stats(self) -> EchoStats:
        """Fresh and emitted counts over all epochs so far (``batches`` is None)."""
        return EchoStats(*add_counts(self._done, self._counts()), None)

    def close(self) -> None:
        """Stops the reading thread of ``factor="auto"``; a no-op otherwise."""
        if self._stage is not None:
            self._stage.close()

    def __repr__(self) -> str:
        factor = "auto" if self.auto else self.factor
        return (f"EchoNode({type(self.source).__name__}, factor={factor!r}, "
                f"buffer_size={self.buffer_size!r}, seed={self.seed!r})")


def _one(item: object) -> int:
    """One example per item: the default count of :class:`EchoNode`."""
    return 1
