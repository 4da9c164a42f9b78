"""Batch echoing of any iterable of batches (a DataLoader or anything else)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from .._checks import check_bool, check_reiterable, check_seed, check_size
from .._rng import derive_seed
from ..echo import total_copies
from ..factor import Auto, as_factor, most_copies
from ..loop import Epochs
from ..readers import as_stage
from ..sizes import batch_size_of
from ..stage import Stage, State
from ..stats import EchoStats
from ..variants import echo_stage
from .inplace import Seen, clone


def tell_epoch(loader: Any, epoch: int) -> None:
    """Passes ``epoch`` to the first of these with a ``set_epoch``: the loader itself
    (accelerate's prepared loader, which passes it to its seeded sampler and would
    otherwise reset the sampler to its own count of finished passes), ``loader.sampler``
    (``DistributedSampler``), ``loader.batch_sampler``, ``loader.batch_sampler.sampler``.

    Example:
        >>> class Sampler:
        ...     def set_epoch(self, epoch): self.epoch = epoch
        >>> class Loader:
        ...     sampler = Sampler()
        >>> loader = Loader(); tell_epoch(loader, 3); loader.sampler.epoch
        3
    """
    batch_sampler = getattr(loader, "batch_sampler", None)
    for target in (loader, getattr(loader, "sampler", None), batch_sampler,
                   getattr(batch_sampler, "sampler", None)):
        if callable(getattr(target, "set_epoch", None)):
            target.set_epoch(epoch)  # type: ignore[union-attr]
            return


class EchoBatches:
    """Yields every batch of ``loader`` ``factor`` times, epoch after epoch.

    Wrap the prepared loader: ``loader = EchoBatches(DataLoader(...), factor=2)``.
    ``len()`` counts echoed steps (exactly, also for fractional factors), so LR
    schedules and progress bars see the real number of steps; ``set_epoch`` is passed
    to the loader's sampler (``DistributedSampler``) or to the loader.

    In-place safety: the copies of a batch are the same object. By default a batch is
    checked whenever it comes again: if the training step changed a tensor of it in
    place (``x.sub_(mean)``), a ``RuntimeError`` says so before a corrupted copy is
    yielded (with :class:`dataecho.Auto`, for every batch echoes may be drawn from).
    ``clone=True`` yields clones (one copy of the batch per echo), safe with in-place
    steps. Writes that bypass tensor version counters (``b.data.mul_()``, writes
    through ``b.numpy()``) are not seen: use ``clone=True`` for such steps. Writable
    numpy arrays keep no version: with ``check_inplace=True`` and ``clone=False`` a
    batch holding one is refused with a ``TypeError``.

    Lightning: return it from ``train_dataloader``; checkpoints carry its state, and
    the trainer tells it the epoch through :attr:`sampler`, as it does a DataLoader's.
    Hugging Face ``Trainer``: return it from ``get_train_dataloader``
    (``EchoBatches(super().get_train_dataloader(), factor=2)``, a whole-number factor,
    since the Trainer reads ``len()`` once); the Trainer tells it each epoch, and
    :class:`dataecho.torch.hf.ExactResume` resumes it exactly.

    Args:
        loader: any iterable of batches, re-iterable once per epoch (a DataLoader, a
            list); a one-shot iterator or generator is rejected.
        factor: echo factor >= 1, fractional allowed, or :class:`dataecho.Auto` (or
            ``"auto"``): a background thread reads the loader and a batch is echoed
            only while the next fresh one is late; ``len()`` is then unknown.
        seed: seed of the fractional draws (each epoch derives its own).
        clone: yield clones (tensors cloned, numpy arrays copied) so the step may
            modify batches in place.
        check_inplace: detect in-place modification (cheap: reads tensor versions);
            with ``clone=False`` it refuses batches holding writable numpy arrays.
        size: examples in a batch, for accounting (default:
            :func:`dataecho.sizes.batch_size_of`).

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
        factor: float | Auto | str,
        *,
        seed: int = 0,
        clone: bool = False,
        check_inplace: bool = True,
        size: Callable[[Any], int] | None = None,
    ) -> None:
        self.loader = check_reiterable(loader, "loader", "iterated once per epoch",
                                       "later epochs would be empty")
        self.factor = as_factor(factor)  # type: ignore[arg-type]
        self.seed = check_seed(seed)
        self.clone = check_bool(clone, "clone")
        self.check_inplace = check_bool(check_inplace, "check_inplace")
        self.size = check_size(size) or batch_size_of
        # A function of the parameters, not a bound method: a loop holding this object
        # would make a reference cycle, and a wrapped DataLoader's persistent workers
        # would then live until the garbage collector runs.
        self._loop = Epochs(partial(_make_echo, self.loader, self.factor, self.seed,
                                    self.size))

    @property
    def epoch(self) -> int:
        """The epoch the current or next iteration reads."""
        return self._loop.epoch

    def __len__(self) -> int:
        if isinstance(self.factor, Auto):
            raise TypeError(
                "len() of EchoBatches with factor=Auto(...) is unknown: the number of "
                "echoed steps depends on how fast the loader turns out to be; give LR "
                "schedules a step budget instead, or pass a fixed factor")
        n = len(self.loader)  # type: ignore[arg-type]
        total = total_copies(self.factor, derive_seed(self.seed, self.epoch), n)
        if total > sys.maxsize:  # len() itself would raise a bare OverflowError
            raise OverflowError(
                f"len() of EchoBatches is {total:.3g} batches (factor={self.factor!r} times "
                f"{n} loader batches), more than len() can return (2**63 - 1); pass a "
                "factor a training run can use (the paper's are below 10), or give LR "
                "schedules a step budget")
        return total

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch for this wrapper and passes it on to the loader.

        A loader with a ``set_epoch`` of its own gets it (accelerate's prepared loader,
        which the Hugging Face ``Trainer`` builds: it passes the epoch to its seeded
        sampler, and would otherwise reset the sampler to its own count of finished
        passes when iterated, which a loader left after ``len()`` batches never
        finishes); else the first of these with a ``set_epoch``: ``loader.sampler``
        (``DataLoader(sampler=DistributedSampler(...))``), ``loader.batch_sampler``,
        ``loader.batch_sampler.sampler``. A checkpoint loaded for another epoch is
        dropped (its counts stay in :meth:`stats`); one loaded for this epoch still
        resumes where it stopped.

        Raises:
            TypeError: ``epoch`` is not an int.
            ValueError: ``epoch`` is negative.
        """
        self._loop.set_epoch(epoch)
        tell_epoch(self.loader, self.epoch)

    @property
    def dataset(self) -> Any:
        """Not there: no loader can be rebuilt from this wrapper's data set.

        ``accelerate.skip_first_batches`` (and so the Hugging Face ``Trainer``'s
        resume) rebuilds a plain loader from ``loader.dataset``, which would drop the
        echo; reading this attribute raises an ``AttributeError`` that says how to
        resume instead (in the Trainer: :class:`dataecho.torch.hf.ExactResume`).
        """
        raise AttributeError(
            "EchoBatches has no dataset of its own to rebuild a loader from, so it cannot "
            "be resumed by skipping batches (accelerate.skip_first_batches, the Hugging "
            "Face Trainer's own resume_from_checkpoint); resume it exactly from its own "
            "state_dict() with load_state_dict(); in the Trainer, pass "
            "callbacks=[dataecho.torch.hf.ExactResume()] and "
            "TrainingArguments(ignore_data_skip=True), which do that from its checkpoints")

    @property
    def sampler(self) -> _EpochHook:
        """Where a trainer passes the epoch: ``sampler.set_epoch(e)`` is :meth:`set_epoch`.

        Lightning calls ``set_epoch`` on each train loader's ``sampler`` at every epoch
        start, and ends an epoch after ``len()`` batches without asking for another, so
        this wrapper never sees the epoch's end by itself. The wrapped loader's own
        sampler is ``self.loader.sampler``.

        Example:
            >>> import torch
            >>> from torch.utils.data import DataLoader
            >>> loader = EchoBatches(DataLoader(torch.arange(4.0), batch_size=2), factor=2)
            >>> loader.sampler.set_epoch(3)
            >>> loader.epoch
            3
        """
        return _EpochHook(self)

    # Lightning reads ``batch_sampler`` wherever it finds ``sampler``; there is none.
    batch_sampler = None

    def __iter__(self) -> Iterator[Any]:
        echo = self._loop.start()
        auto = isinstance(self.factor, Auto)
        # Batches that may still come again: the last one for a fixed factor (copies
        # are adjacent), the echo buffer's with Auto (it draws from its latest items);
        # none with factor 1, where no batch comes again.
        watch = self.check_inplace and (isinstance(self.factor, Auto) or self.factor > 1.0)
        seen = (Seen(self.factor.buffer("items") if isinstance(self.factor, Auto) else 1,
                    self.clone) if watch else None)
        cloning = self.clone
        try:
            for batch in echo:
                if seen is not None:
                    seen.check(batch)
                # A fixed factor knows whether another copy follows; Auto cannot.
                if cloning and (auto or getattr(echo, "repeating", False)):
                    batch = clone(batch)
                yield batch
        finally:
            echo.close()
        self._loop.end()

    def stats(self) -> EchoStats:
        """Fresh and emitted counts over all epochs so far (every emitted item a batch).

        After :meth:`load_state_dict` they include the counts the checkpoint carries,
        also before the first batch is taken.
        """
        counts = self._loop.stats()
        return replace(counts, batches=counts.emitted_items)

    def state_dict(self) -> State:
        """Epoch, totals of finished epochs, and the position within this epoch.

        Taken after :meth:`load_state_dict` and before the next batch, it is the
        loaded position, so checkpointing again at once loses nothing.
        """
        return self._loop.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Makes the next iteration resume where the checkpoint was taken.

        A loader with its own ``state_dict`` (torchdata's ``StatefulDataLoader``)
        restores itself; a plain ``DataLoader`` is re-iterated and the batches already
        consumed this epoch are skipped, which re-reads them: exact when the loader's
        order is a function of the epoch (``shuffle=False``, or a sampler with
        ``set_epoch``), and slower than a stateful loader. A fresh loader shuffled by a
        seeded ``generator`` draws epoch 0's order, so it resumes exactly only in the
        first epoch.
        """
        self._loop.load_state_dict(state, "EchoBatches", most_copies=most_copies(self.factor))
        self.set_epoch(self.epoch)  # tells the loader's sampler

    def __repr__(self) -> str:
        return (f"EchoBatches(<{type(self.loader).__name__}>, factor={self.factor!r}, "
                f"seed={self.seed!r}, clone={self.clone!r})")


def _make_echo(loader: Iterable[Any], factor: float | Auto, seed: int,
               size: Callable[[Any], int], epoch: int) -> Stage[Any]:
    return echo_stage(as_stage(loader), factor, seed=derive_seed(seed, epoch), level="items",
                      size=size)


class _EpochHook:
    """Forwards ``set_epoch`` to an :class:`EchoBatches` (see ``EchoBatches.sampler``)."""

    def __init__(self, owner: EchoBatches) -> None:
        self.owner = owner

    def set_epoch(self, epoch: int) -> None:
        self.owner.set_epoch(epoch)

    def __repr__(self) -> str:
        return f"<set_epoch of {self.owner!r}>"
