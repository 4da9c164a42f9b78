"""Batch echoing of any iterable of batches (a DataLoader or anything else)."""

from __future__ import annotations

import copy
import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from .._checks import check_factor, check_iterable, check_positive_int, check_seed
from .._rng import derive_seed
from ..adaptive import DEFAULT_BUFFER, DEFAULT_MAX_FACTOR, AdaptiveEcho
from ..echo import Echo, total_copies
from ..iterable import as_stage
from ..sizes import batch_len
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
    clones (costs one copy of the batch per echo) so in-place steps are safe. Tensors
    are found in tensors, dicts, lists, tuples (named too) and dataclasses, nested;
    inference tensors (``torch.inference_mode``) keep no version and are not watched.
    Writable numpy arrays keep no version either: with ``check_inplace=True`` and
    ``clone=False`` a batch holding one raises a ``TypeError`` at once (pass
    ``clone=True``, which copies arrays too, or ``check_inplace=False`` when the step
    never modifies its batch in place). Other values (ints, strings) cannot be changed
    in place by a step and pass.

    Batch echoing repeats the same examples in consecutive steps; the paper found
    example echoing (:class:`dataecho.torch.EchoDataset`) at least as good.

    Lightning: return it from ``train_dataloader``; checkpoints carry its state, and
    the trainer tells it the epoch through :attr:`sampler`, as it does a DataLoader's.

    ``factor="auto"`` reads the loader in a background thread and echoes a batch only
    while the next fresh one is not ready, at most ``max_factor`` uses per batch
    (:class:`dataecho.AdaptiveEcho`); ``len()`` is then unknown and a ``TypeError``.

    Args:
        loader: any iterable of batches, re-iterable once per epoch (a DataLoader, a
            list); a one-shot iterator or generator is rejected.
        factor: echo factor >= 1, fractional allowed, or ``"auto"``.
        max_factor: cap on uses per fresh batch with ``factor="auto"`` (default 4).
            ``max_factor``, ``buffer_size`` and ``agree`` only act with
            ``factor="auto"``: given with a fixed factor they raise a ``ValueError``.
        buffer_size: with ``factor="auto"``, recent batches echoes are drawn from
            (default: :class:`dataecho.AdaptiveEcho`'s); make it exceed the bursts your
            loader delivers in, e.g. a windowed shuffle's window in batches.
        agree: with ``factor="auto"`` under DDP, a
            ``dataecho.torch_distributed.RankAgreement()`` so ranks take equal steps.
        seed: seed of the fractional draws (each epoch derives its own).
        clone: yield clones (tensors cloned, numpy arrays copied) so the step may
            modify batches in place.
        check_inplace: detect in-place modification (cheap: reads tensor versions);
            with ``clone=False`` it refuses batches holding writable numpy arrays.
        size: examples in a batch, for accounting (default: :func:`batch_size_of`).

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
        max_factor: int | None = None,
        buffer_size: int | None = None,
        agree: Any = None,
        seed: int = 0,
        clone: bool = False,
        check_inplace: bool = True,
        size: Callable[[Any], int] | None = None,
    ) -> None:
        self.loader = _check_loader(loader)
        self.auto = isinstance(factor, str) and factor == "auto"
        self.factor = 1.0 if self.auto else check_factor(factor)
        if not self.auto:
            reject_auto_only(self.factor, max_factor=max_factor, buffer_size=buffer_size,
                             agree=agree)
        self.max_factor = check_positive_int(
            DEFAULT_MAX_FACTOR if max_factor is None else max_factor, "max_factor")
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
                "None to count the examples by dataecho.torch.batches.batch_size_of"
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
        """Sets the epoch for this wrapper and passes it on to the loader.

        The first of these with a ``set_epoch`` gets it: ``loader.sampler``
        (``DataLoader(sampler=DistributedSampler(...))``), ``loader.batch_sampler``,
        ``loader.batch_sampler.sampler`` (``DataLoader(batch_sampler=BatchSampler(
        DistributedSampler(...), ...))``), the loader itself.

        A checkpoint loaded for another epoch is dropped (its epoch is over or skipped;
        its counts stay in :meth:`stats`); one loaded for this epoch still resumes where
        it stopped.

        Raises:
            TypeError: ``epoch`` is not an int.
            ValueError: ``epoch`` is negative.
        """
        epoch = check_positive_int(epoch, "epoch", minimum=0)
        if epoch != self.epoch:
            # The old epoch's iteration is over even if it never reached its end
            # (Lightning takes len() batches and never asks for the next): count it
            # now, so that a state taken before the new epoch's first batch holds no
            # position of the old one.
            self._finish_epoch()
        if self._pending is not None and epoch != self.epoch:
            self._done = add_counts(self._done, _state_counts(self._pending))
            self._pending = None
        self.epoch = epoch
        batch_sampler = getattr(self.loader, "batch_sampler", None)
        for target in (getattr(self.loader, "sampler", None), batch_sampler,
                       getattr(batch_sampler, "sampler", None), self.loader):
            if callable(getattr(target, "set_epoch", None)):
                target.set_epoch(epoch)  # type: ignore[union-attr]
                break

    @property
    def sampler(self) -> _EpochHook:
        """Where a trainer passes the epoch: ``sampler.set_epoch(e)`` is :meth:`set_epoch`.

        Lightning calls ``set_epoch`` on the ``sampler`` of each train loader at every
        epoch start (for a DataLoader, to reach its ``DistributedSampler``). It ends an
        epoch after ``len()`` batches without asking for another, so this wrapper's
        iteration never reaches its end, where the epoch would advance by itself;
        without this hook every epoch would reuse epoch 0's fractional draws and
        sampler order, and a checkpoint taken at an epoch's last step would resume into
        that finished epoch, leaving Lightning's next epoch without a batch. The wrapped
        loader's own sampler is ``self.loader.sampler``.

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
        # are adjacent), the echo buffer's for "auto" (it draws from its latest items);
        # none with factor 1, where no batch comes again.
        watch = self.check_inplace and (self.auto or self.factor > 1.0)
        seen = _Seen(self._echo_buffer() if self.auto else 1, self.clone) if watch else None
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
        if isinstance(echo, Counting):
            return echo.echo_counts()
        if echo is None and self._pending is not None:  # loaded, not iterated yet
            return _state_counts(self._pending)
        return (0, 0, 0, 0)

    def _finish_epoch(self) -> None:
        if self._echo is not None:
            self._done = add_counts(self._done, self._counts())
            self._echo = None

    def stats(self) -> EchoStats:
        """Fresh and emitted counts over all epochs so far.

        After :meth:`load_state_dict` they include the counts the checkpoint carries,
        also before the first batch is taken.
        """
        counts = add_counts(self._done, self._counts())
        return EchoStats(*counts, counts[3])  # every emitted item is a batch

    def state_dict(self) -> State:
        """Epoch, totals of finished epochs, and the position within this epoch.

        Taken after :meth:`load_state_dict` and before the next batch, it is the
        loaded position, so checkpointing again at once loses nothing.
        """
        if self._echo is not None:
            echo: State | None = self._echo.state_dict()
        else:
            echo = None if self._pending is None else dict(self._pending)
        return {"epoch": self.epoch, "done": list(self._done), "echo": echo}

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


class _EpochHook:
    """Forwards ``set_epoch`` to an :class:`EchoBatches` (see ``EchoBatches.sampler``)."""

    def __init__(self, owner: EchoBatches) -> None:
        self.owner = owner

    def set_epoch(self, epoch: int) -> None:
        self.owner.set_epoch(epoch)

    def __repr__(self) -> str:
        return f"<set_epoch of {self.owner!r}>"


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
    most ``size`` batches alive, those the echo stage may still echo. Without ``clone``
    a batch holding a writable numpy array is refused: its changes cannot be seen.
    """

    def __init__(self, size: int, clone: bool = False) -> None:
        self.size, self.clone = size, clone
        self._versions: OrderedDict[int, tuple[Any, list[int]]] = OrderedDict()

    def check(self, batch: Any) -> None:
        """Raises if ``batch`` was yielded before and changed in place since; records it."""
        now = _versions(batch, self.clone)
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


def _is_dataclass_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _leaves(batch: Any) -> Iterator[Any]:
    """The tensors and numpy arrays in a batch, through containers and dataclasses."""
    if isinstance(batch, torch.Tensor | np.ndarray):
        yield batch
    elif isinstance(batch, Mapping):
        for v in batch.values():
            yield from _leaves(v)
    elif isinstance(batch, list | tuple):
        for v in batch:
            yield from _leaves(v)
    elif _is_dataclass_instance(batch):
        for field in dataclasses.fields(batch):
            yield from _leaves(getattr(batch, field.name, None))


def _versions(batch: Any, clone: bool = False) -> list[int]:
    versions = []
    for leaf in _leaves(batch):
        if isinstance(leaf, torch.Tensor):
            if not leaf.is_inference():  # inference tensors keep no version counter
                versions.append(leaf._version)
        elif leaf.flags.writeable and not clone:
            raise TypeError(
                "check_inplace=True cannot watch numpy arrays (numpy keeps no version "
                "counter), and an echoed batch is the same object as the batch before it: "
                f"got a batch holding a writable numpy array of shape {leaf.shape} with "
                "clone=False; pass clone=True to yield copies (safe with in-place steps), "
                "or check_inplace=False if the step never modifies its batch in place, or "
                "make the loader yield tensors (DataLoader's default collate does)"
            )
    return versions


def _clone(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, np.ndarray):
        return batch.copy()
    if isinstance(batch, Mapping):
        return type(batch)({k: _clone(v) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_clone(v) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(_clone(v) for v in batch)
    if _is_dataclass_instance(batch):
        # A shallow copy with cloned fields: no __init__ or __post_init__ runs, and
        # init=False fields are kept; object.__setattr__ also sets frozen fields.
        clone = copy.copy(batch)
        for field in dataclasses.fields(batch):
            if hasattr(batch, field.name):
                object.__setattr__(clone, field.name, _clone(getattr(batch, field.name)))
        return clone
    return batch


def reject_auto_only(factor: float, **given: Any) -> None:
    """Raises ``ValueError`` for a parameter of ``factor="auto"`` given with a fixed factor.

    Example:
        >>> try:
        ...     reject_auto_only(2.0, max_factor=3)
        ... except ValueError as e:
        ...     print(str(e)[:53])
        max_factor only acts with factor='auto' (it caps uses
    """
    for name, value in given.items():
        if value is not None:
            purpose = _AUTO_ONLY.get(name, "configures adaptive echoing")
            raise ValueError(
                f"{name} only acts with factor='auto' (it {purpose}) and does nothing with "
                f"a fixed factor={factor:g}, got {name}={value!r}; drop {name}, or pass "
                "factor='auto'"
            )


_AUTO_ONLY = {
    "max_factor": "caps uses per fresh item",
    "buffer_size": "sizes the buffer of recent batches echoes are drawn from",
    "agree": "makes DDP ranks agree on each step",
}


def _state_counts(state: Mapping[str, Any]) -> Counts:
    """The counts an echo stage's ``state_dict`` carries, as its ``echo_counts()``."""
    stage = AdaptiveEcho if state.get("stage") == "AdaptiveEcho" else Echo
    return stage.counts_of_state(state)


def batch_size_of(batch: Any) -> int:
    """Examples in a batch: :func:`dataecho.sizes.batch_len`, plus per-sample fields.

    As :func:`dataecho.sizes.batch_len` (the rule of the core stages): a tensor or
    array counts its first dimension; a dict its first value; a tuple (fields, named
    or not) its first field; a list its length (a list of samples, e.g. from
    ``collate_fn=lambda b: b``), unless its first element is a tensor or array
    (``default_collate``'s list of fields), whose first dimension counts. Added here:
    a dataclass counts as a dict of its fields, and a tuple, dict or dataclass whose
    fields are all lists or tuples of one length (per-sample fields, as the detection
    collate ``tuple(zip(*batch))`` makes) counts that length. Pass ``size=`` to
    :class:`EchoBatches` for batches laid out otherwise.

    Example:
        >>> import torch
        >>> batch_size_of((torch.zeros(32, 3), torch.zeros(32)))
        32
        >>> images, targets = (torch.zeros(3, 8, 8),) * 4, ({"boxes": None},) * 4
        >>> batch_size_of((images, targets)), batch_size_of([(torch.zeros(3), 0)] * 5)
        (4, 5)
    """
    if _is_dataclass_instance(batch):
        batch = {f.name: getattr(batch, f.name, None) for f in dataclasses.fields(batch)}
    fields = (list(batch.values()) if isinstance(batch, Mapping)
              else batch if isinstance(batch, tuple) else None)
    if fields:
        lengths = {len(f) if isinstance(f, list | tuple) and not hasattr(f, "_fields")
                   else None for f in fields}
        if len(lengths) == 1:
            n = lengths.pop()
            if n:
                return n
    return batch_len(batch)
