"""Echoing inside a ``torchdata.nodes`` graph: :class:`EchoNode`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .._extras import needs

try:
    from torchdata.nodes import BaseNode
except ModuleNotFoundError as error:
    raise needs(error, "dataecho.torch.nodes", "torchdata", "torchdata") from None

from .. import _rng
from .._checks import check_positive_int, check_seed, check_size
from .._rng import derive_seed
from ..factor import Auto, as_factor, most_copies
from ..loop import Epochs
from ..readers import NodeSource, is_node
from ..shuffle import Shuffle
from ..sizes import one_per_item
from ..stage import Stage, State
from ..stats import EchoStats
from ..variants import echo_stage

T = TypeVar("T")

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

    ``factor=Auto(...)`` echoes only while the next fresh item is not ready
    (:class:`dataecho.AdaptiveEcho`: a background thread reads the source node;
    :meth:`close` stops it, so does the end of an epoch).

    Args:
        source: the node to read, a ``torchdata.nodes.BaseNode``.
        factor: copies per item, a real number >= 1, or :class:`dataecho.Auto`
            (``"auto"`` for ``Auto()``).
        buffer_size: items in the post-echo shuffle window; None: copies stay adjacent.
        seed: seed of the fractional draws, echo picks and shuffle orders.
        size: examples in an item, for accounting; default 1 per item (``len`` for
            the lists a ``Batcher`` yields).

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
        factor: float | Auto | str,
        *,
        buffer_size: int | None = None,
        seed: int = 0,
        size: Callable[[T], int] | None = None,
    ) -> None:
        super().__init__()
        if not is_node(source):
            raise TypeError(
                f"source must be a torchdata.nodes.BaseNode, got {type(source).__name__}; "
                "wrap an iterable with torchdata.nodes.IterableWrapper(...) first")
        self.source = source
        self.factor = as_factor(factor)  # type: ignore[arg-type]
        self.buffer_size = None if buffer_size is None else check_positive_int(
            buffer_size, "buffer_size")
        self.seed = check_seed(seed)
        self.size = check_size(size)
        self._loop = Epochs(self._build)
        self._started = False  # the first reset() reads epoch 0, later ones the next

    @property
    def epoch(self) -> int:
        """The epoch being read."""
        return self._loop.epoch

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        """Starts the next epoch, or resumes from a :meth:`state_dict`."""
        super().reset(initial_state)
        if initial_state is None:
            if self._started:
                self._loop.end()
            self.source.reset(None)
        else:
            self._loop.load_state_dict(initial_state, "EchoNode", "initial_state",
                                       most_copies(self.factor))
        self._started = True
        self._loop.start()  # a loaded state also resets the source node

    def _build(self, epoch: int) -> Stage[T]:
        seed = derive_seed(self.seed, epoch)
        # AdaptiveEcho's own default measures items as batches; a node's items count 1
        # each unless size says otherwise, as with a fixed factor.
        size = self.size or one_per_item if isinstance(self.factor, Auto) else self.size
        echo: Stage[T] = echo_stage(NodeSource(self.source), self.factor, level="items",
                                    seed=derive_seed(seed, _rng.NODE_ECHO_KEY), size=size)
        if self.buffer_size is None:
            return echo
        return Shuffle(echo, self.buffer_size, seed=derive_seed(seed, _rng.NODE_SHUFFLE_KEY))

    def _current(self) -> Stage[T]:
        # BaseNode calls reset() before the first next() or state_dict(), so the stage
        # exists unless a subclass skipped that.
        stage = self._loop.stage
        if stage is None:
            raise RuntimeError("EchoNode was not reset(); iterate it or wrap it in a Loader")
        return stage

    def next(self) -> T:
        return next(self._current())

    def get_state(self) -> State:
        self._current()
        return self._loop.state_dict()

    def stats(self) -> EchoStats:
        """Fresh and emitted counts over all epochs so far (``batches`` is None)."""
        return self._loop.stats()

    def close(self) -> None:
        """Stops the reading thread of ``factor=Auto(...)``; a no-op otherwise."""
        self._loop.close()

    def __repr__(self) -> str:
        return (f"EchoNode({type(self.source).__name__}, factor={self.factor!r}, "
                f"buffer_size={self.buffer_size!r}, seed={self.seed!r})")
