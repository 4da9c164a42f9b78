"""Batch echoing of any iterable of batches (a DataLoader or anything else)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch

from .._checks import check_factor, check_iterable, check_positive_int, check_seed
from .._rng import derive_seed
from ..adaptive import DEFAULT_BUFFER, DEFAULT_MAX_FACTOR, AdaptiveEcho
from ..echo import Echo, total_copies
from ..iterable import as_stage
from ..stage import Stage, State
from ..stats import Counting, Counts, EchoStats, add_counts, as_counts


class EchoBatches:
    """Yields every batch of ``loader`` ``factor`` times, epoch after epoch.

    Wrap the prepared loader: ``loader = EchoBatches(DataLoader(...), factor=2)``.
    ``len()`` counts echoed steps (exactly, also for fractional factors), so LR
    schedules and progress bars see the real number of steps; ``set_epoch`` is passed
    to the loader's sampler (``DistributedSampler``) or to the loader.

    In-place safety: the copies of a batch are the same object. By default a batch is
    checked whenever it comes again: if the training step changed a tensor of it in
    place (``x.sub_(mean)``), a ``RuntimeError`` says so before a corrupted copy is
    yielded. With ``factor="auto"`` the check covers every batch echoes may be drawn
    from (the ``buffer_size`` latest), not only the previous one. ``clone=True`` yields
    clones (costs one copy of the batch per echo) so in-place steps are safe.

    Batch echoing repeats the same examples in consecutive steps; the paper found
    example echoing (:class:`dataecho.torch.EchoDataset`) at least as good.

    ``factor="auto"`` reads the loader in a background thread and echoes a batch only
    while the next fresh one is not ready, at most ``max_factor`` uses per batch
    (:class:`dataecho.AdaptiveEcho`); ``len()`` is then unknown and a ``TypeError``.

    Args:
        loader: any iterable of batches, re-iterable once per epoch (a DataLoader, a
            list); a one-shot iterator or generator is rejected.
        factor: echo factor >= 1, fractional allowed, or ``"auto"``.
        max_factor: cap on uses per fresh batch with ``factor="auto"``.
        buffer_size: with ``factor="auto"``, recent batches echoes are drawn from
            (default: :class:`dataecho.AdaptiveEcho`'s); make it exceed the bursts your
            loader delivers in, e.g. a windowed shuffle's window in batches.
        agree: with ``factor="auto"`` under DDP, a
            ``dataecho.torch_distributed.RankAgreement()`` so ranks take equal steps.
        seed: seed of the fractional draws (each epoch derives its own).
        clone: yield clones so the step may modify batches in place.
        check_inplace: detect in-place modification (cheap: reads tensor versions).
        size: examples in a batch, for accounting (default: first dimension of the
            first tensor found in the batch).

    Example:
        >>> import torch
        >>> from torch.utils.data import DataLoader
        >>> loader = EchoBatches(DataLoader(torch.arange(10.0), batch_size=5), factor=2)
        >>> len(loader), [b.tolist()[0] for b in loader]
        (4, [0.0, 0.0, 5.0, 5.0])
        >>> loader.stats().fresh_examples, loader.stats().emitted_examples
        (10, 20)
    """

    def __init__(
        self,
        loader: Iterable[Any],
        factor: float | str,
        *,
        max_factor: int = DEFAULT_MAX_FACTOR,
        buffer_size: int | None = None,
        agree: Any = None,
        seed: int = 0,
        clone: bool = False,
        check_inplace: bool = True,
        size: Callable[[Any], int] | None = None,
    ) -> None:
        self.loader = _check_loader(loader)
        self.auto = factor == "auto"
        self.factor = 1.0 if self.auto else check_factor(factor)
        self.max_factor = check_positive_int(max_factor, "max_factor")
        self.buffer_size = None if buffer_size is None else check_positive_int(
            buffer_size, "buffer_size")
        if agree is not None and not callable(agree):
            raise TypeError(
                f"agree must be None or a callable agreement, got {agree!r} of type "
                f"{type(agree).__name__}; pass dataecho.torch_distributed.RankAgreement() "
                "under DDP, or leave it None"
            )
        self.agree = agree
        self.seed = check_seed(seed)
        self.clone, self.check_inplace = bool(clone), bool(check_inplace)
        if size is not None and not callable(size):
            raise TypeError(
                f"size must be None or a function batch -> number of examples, got "
                f"{size!r} of type {type(size).__name__}; pass e.g. size=len, or leave it "
                "None to count the first dimension of the batch's first tensor"
            )
        self.size = size or batch_size_of
        self.epoch = 0
        self._echo: Stage[Any] | None = None
        self._pending: Mapping[str, Any] | None = None
        self._done: Counts = (0, 0, 0, 0)  # counts of finished epochs

    def _epoch_seed(self) -> int:
        return derive_seed(self.seed, self.epoch)

    def __len__(self) -> int:
        if self.auto:
            raise TypeError(
                "len() of EchoBatches with factor='auto' is unknown: the number of echoed "
                "steps depends on how fast the loader turns out to be; give LR schedules a "
                "step budget instead, or pass a fixed factor"
            )
        n = len(self.loader)  # type: ignore[arg-type]
        return total_copies(self.factor, self._epoch_seed(), n)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch for this wrapper and the loader's sampler or the loader."""
        self.epoch = int(epoch)
        for target in (getattr(self.loader, "sampler", None), self.loader):
            if callable(getattr(target, "set_epoch", None)):
                target.set_epoch(epoch)  # type: ignore[union-attr]
                break

    def _echo_buffer(self) -> int:
        return DEFAULT_BUFFER if self.buffer_size is None else self.buffer_size

    def _make_echo(self) -> Stage[Any]:
        upstream = as_stage(self.loader)
        if self.auto:
            return AdaptiveEcho(upstream, max_factor=self.max_factor, seed=self._epoch_seed(),
                                size=self.size, agree=self.agree,
                                buffer_size=self._echo_buffer())
        return Echo(upstream, self.factor, seed=self._epoch_seed(), size=self.size)

    def __iter__(self) -> Iterator[Any]:
        self._finish_epoch()
        echo = self._make_echo()
        if self._pending is not None:
            echo.load_state_dict(self._pending)
            self._pending = None
        self._echo = echo
        # Batches that may still come again: the last one for a fixed factor (copies
        # are adjacent), the echo buffer's for "auto" (it draws from its latest items).
        seen = _Seen(self._echo_buffer() if self.auto else 1) if self.check_inplace else None
        try:
            for batch in echo:
                if seen is not None:
                    seen.check(batch)
                # A fixed factor knows whether another copy follows; "auto" cannot.
                repeats = self.auto or getattr(echo, "_left", 0) > 0
                yield _clone(batch) if self.clone and repeats else batch
        finally:
            echo.close()
        self._finish_epoch()
        self.epoch += 1

    def _counts(self) -> Counts:
        echo = self._echo
        return echo.echo_counts() if isinstance(echo, Counting) else (0, 0, 0, 0)

    def _finish_epoch(self) -> None:
        if self._echo is not None:
            self._done = add_counts(self._done, self._counts())
            self._echo = None

    def stats(self) -> EchoStats:
        """Fresh and emitted counts over all epochs so far."""
        counts = add_counts(self._done, self._counts())
        return EchoStats(*counts, counts[3])  # every emitted item is a batch

    def state_dict(self) -> State:
        """Epoch, totals of finished epochs, and the position within this epoch."""
        return {"epoch": self.epoch, "done": list(self._done),
                "echo": None if self._echo is None else self._echo.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Makes the next iteration resume where the checkpoint was taken.

        A loader with its own ``state_dict`` (torchdata's ``StatefulDataLoader``)
        restores itself; a plain ``DataLoader`` is re-iterated and the batches already
        consumed this epoch are skipped, which re-reads them: exact when the loader's
        order is seeded (``generator=torch.Generator().manual_seed(...)`` or
        ``set_epoch``), and slower than a stateful loader.
        """
        if not isinstance(state, Mapping) or "echo" not in state:
            raise TypeError(
                "state must be a dict returned by EchoBatches.state_dict(), got "
                f"{type(state).__name__}; pass the dict saved from the checkpoint"
            )
        self.set_epoch(int(state["epoch"]))
        self._done = as_counts(state["done"])
        self._echo, self._pending = None, state["echo"]

    def __repr__(self) -> str:
        factor = "auto" if self.auto else self.factor
        return (f"EchoBatches(<{type(self.loader).__name__}>, factor={factor!r}, "
                f"seed={self.seed!r}, clone={self.clone!r})")


def _check_loader(loader: object) -> Iterable[Any]:
    loader = check_iterable(loader, "loader")
    # Not iter(loader) is loader: iterating a DataLoader would start its workers.
    if isinstance(loader, Iterator):
        raise TypeError(
            f"loader must be re-iterable (iterated once per epoch), got a one-shot "
            f"iterator ({type(loader).__name__}) whose later epochs would be empty; pass "
            "the DataLoader (or list) itself rather than iter(...) or a generator, or an "
            "object whose __iter__ returns a fresh generator"
        )
    return loader


class _Seen:
    """Tensor versions of the last ``size`` distinct batches yielded, by first use.

    Holding the batches keeps their ids from being reused by new objects; it keeps at
    most ``size`` batches alive, those the echo stage may still echo.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._versions: OrderedDict[int, tuple[Any, list[int]]] = OrderedDict()

    def check(self, batch: Any) -> None:
        """Raises if ``batch`` was yielded before and changed in place since; records it."""
        now = _versions(batch)
        entry = self._versions.get(id(batch))
        if entry is not None and entry[1] != now:
            raise RuntimeError(
                "the training step modified an echoed batch in place (a tensor's version "
                "counter changed), so its next copy would be corrupted; pass clone=True to "
                "EchoBatches, or avoid in-place ops on the input batch"
            )
        self._versions[id(batch)] = (batch, now)  # a known id keeps its place
        if len(self._versions) > self.size:
            self._versions.popitem(last=False)


def _tensors(batch: Any) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, Mapping):
        for v in batch.values():
            yield from _tensors(v)
    elif isinstance(batch, list | tuple):
        for v in batch:
            yield from _tensors(v)


def _versions(batch: Any) -> list[int]:
    return [t._version for t in _tensors(batch)]


def _clone(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, Mapping):
        return type(batch)({k: _clone(v) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_clone(v) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(_clone(v) for v in batch)
    return batch


def batch_size_of(batch: Any) -> int:
    """Examples in a batch: the first dimension of its first tensor or array.

    Example:
        >>> import torch
        >>> batch_size_of((torch.zeros(32, 3), torch.zeros(32)))
        32
    """
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, Mapping):
        return batch_size_of(next(iter(batch.values())))
    if isinstance(batch, list | tuple) and batch:
        first = batch[0]
        return batch_size_of(first) if hasattr(first, "shape") or isinstance(
            first, Mapping | list | tuple) else len(batch)
    return 1
