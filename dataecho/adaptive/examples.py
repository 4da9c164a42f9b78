"""Adaptive example echoing before augmentation, the paper's best variant."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .. import _rng
from .._checks import check_bool, check_positive_int, state_int
from ..batch import collate as default_collate
from ..factor import DEFAULT_MAX_FACTOR
from ..map import fn_name, takes_rng
from ..sizes import one_per_item
from ..stage import State
from .echo import AdaptiveEcho
from .schedule import Agreement, Feed


class AdaptiveExamples(AdaptiveEcho[Any]):
    """Batches of the fresh examples that are ready, topped up with re-augmented echoes.

    A thread reads decoded examples ahead. Each batch takes the fresh examples that
    are ready and fills the shortfall with echoes drawn at random from the
    ``buffer_size`` most recent examples, each copy augmented anew with a generator
    keyed by ``(seed, example's fresh index, copy number)``. An example is never drawn
    into the batch it arrived in, nor twice into one batch, nor used more than
    ``max_factor`` times; when the buffer cannot fill a batch, the consumer waits.
    Augmentation runs in the consumer's thread, so it counts as blocked time.

    The first ``min_fresh`` examples, fresh, stock echo budget that keeps copies apart.
    The last batch is topped up with echoes when the buffer allows, else partial (dropped
    with ``drop_last``, and always under an ``agree``, so that all ranks stop together).
    Checkpoint, threads, errors and agreement: as :class:`AdaptiveEcho`.

    Args:
        upstream: decoded examples (the expensive read happens upstream).
        batch_size: examples per batch.
        augment: ``fn(example, rng)`` or ``fn(example)``, applied to every copy.
        min_fresh: fresh examples before echoing may begin; default 4 batches (or
            ``buffer_size`` if smaller).
        buffer_size: recent examples echoes are drawn from; default 8 batches, as
            upstreams deliver in bursts (``benchmarks/results/bursts.md``).
        prefetch: examples read ahead; default 2 batches.
        drop_last: drop a final partial batch.
        collate: list of examples -> batch; default :func:`dataecho.collate` (numpy).
        max_factor, timeout, seed, agree, feed, clock: as :class:`AdaptiveEcho`.

    Example:
        >>> with AdaptiveExamples(range(8), 4, augment=lambda x, rng: x * 10) as stage:
        ...     batches = [b.tolist() for b in stage]
        >>> batches[0], stage.stats().fresh_examples
        ([0, 10, 20, 30], 8)
    """

    one_item_steps = False  # a step is a batch of fresh examples and echoes

    def __init__(self, upstream: Iterable[Any], batch_size: int, *,
                 augment: Callable[..., Any] | None = None,
                 max_factor: int = DEFAULT_MAX_FACTOR, min_fresh: int | None = None,
                 buffer_size: int | None = None, prefetch: int | None = None,
                 drop_last: bool = False, collate: Callable[[list[Any]], Any] | None = None,
                 timeout: float | None = 120.0, seed: int = 0, agree: Agreement | None = None,
                 feed: Callable[[Callable[[], Any]], Feed[Any]] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.batch_size = check_positive_int(batch_size, "batch_size")
        for name, value, usage, fix in (  # (messages kept word for word)
                ("augment", augment, "augment(example, rng) or augment(example)", ""),
                ("collate", collate, "collate(list_of_examples)", " for the default")):
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be callable as {usage}, got "
                                f"{type(value).__name__}; pass a function or None{fix}")
        self.augment = augment
        self.collate: Callable[[list[Any]], Any] = collate or default_collate
        b = self.batch_size
        buffer_size = (8 * b if buffer_size is None  # checked before min_fresh derives from it
                       else check_positive_int(buffer_size, "buffer_size"))
        prefetch = 2 * b if prefetch is None else check_positive_int(prefetch, "prefetch")
        super().__init__(upstream, max_factor=max_factor,
                         min_fresh=min(4 * b, buffer_size) if min_fresh is None else min_fresh,
                         buffer_size=buffer_size, prefetch=prefetch,
                         timeout=timeout, seed=seed, size=one_per_item, agree=agree,
                         feed=feed, clock=clock)
        self.random = augment is not None and takes_rng(augment)
        self._stream = _rng.Stream(self.seed, _rng.ADAPTIVE_COPIES)
        self.drop_last = check_bool(drop_last, "drop_last")
        self.last_size = 0  # examples in the latest batch (read by a later Echo)

    def batch_counts(self) -> tuple[int, int, int]:
        """(batches, examples in them with echoes, 0: a dropped batch stays read, not sent)."""
        return self._schedule.steps, self._schedule.emitted_ex, 0

    def _step(self) -> Any:
        copies = self._schedule.step(self.batch_size)
        partial = len(copies) < self.batch_size
        if not copies or (partial and (self.drop_last or not self._solo)):
            raise StopIteration
        augment, cap = self.augment, self.max_factor
        if augment is None:
            values = [c[0] for c in copies]
        elif self.random:  # copy ``use`` of fresh example ``index``: substream index * cap + use
            values = [augment(v, self._stream.at(i * cap + use)) for v, i, use, _ in copies]
        else:
            values = [augment(c[0]) for c in copies]
        batch = self.collate(values)  # may raise: count after
        self._schedule.emit(copies)
        self.last_size = len(copies)
        return batch

    def _config(self) -> dict[str, Any]:
        name = fn_name(self.augment) if self.augment is not None else None
        return {**super()._config(), "batch_size": self.batch_size, "augment": name,
                "drop_last": self.drop_last}

    def _repr_args(self) -> dict[str, Any]:
        args = {"batch_size": self.batch_size, **super()._repr_args(),
                "buffer_size": self.buffer_size, "seed": self.seed}
        if self.augment is not None:
            args["augment"] = self._cfg["augment"]
        return args

    def _snapshot(self) -> State:
        return {**super()._snapshot(), "last_size": self.last_size}

    def _set_state(self, state: Any) -> None:
        last_size = state_int(state, "last_size", type(self).__name__, maximum=self.batch_size,
                              rule="examples in the latest batch, at most batch_size")
        super()._set_state(state)
        self.last_size = last_size
