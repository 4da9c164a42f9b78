"""Exact resume of example echoing under PyTorch Lightning: :class:`LightningLoader`.

Lightning saves a train loader's ``state_dict()`` in its checkpoints, but a loader
without ``len()`` (a ``StatefulDataLoader`` over an :class:`dataecho.torch.EchoDataset`)
is read one batch ahead of the training step, and on a run's first epoch the first
batch is read before Lightning says which epoch it is. :class:`LightningLoader` saves
the loader's state as of the batches trained, not read, and asks the trainer which
epoch it trains before each iteration starts.
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from .._checks import state_bool, state_int, state_value
from ..stats import EchoStats

# Loader states kept: Lightning trains at most one batch behind the one it read last
# (its prefetch of a loader without len()); one more for safety.
_KEEP = 3

_OWNER = "LightningLoader"


@dataclass
class _Pass:
    """One iteration of the wrapped loader: its epoch and its recent states."""

    epoch: int
    count: int  # batches of the epoch yielded so far, those before a restore included
    states: dict[int, Any] = field(default_factory=dict)  # count -> loader state then
    ahead: bool = False  # the last batch yielded waits in the trainer's prefetch
    ended: bool = False  # the loader's iteration ran to its end


class LightningLoader:
    """Makes Lightning resume a stateful loader exactly, mid-epoch and across epochs.

    Return it from ``train_dataloader`` around a torchdata ``StatefulDataLoader`` over
    an :class:`dataecho.torch.EchoDataset`::

        return LightningLoader(StatefulDataLoader(EchoDataset(data, factor=2),
                                                  batch_size=128, num_workers=4),
                               self.trainer)

    Lightning reads a loader without ``len()`` one batch ahead of the training step and
    saves its ``state_dict()`` with that batch taken. This wrapper keeps the loader's
    state after each of the last few batches it yielded and saves the one after the
    batches Lightning has trained (all it yielded but the one Lightning holds ahead),
    so a resume from any checkpoint Lightning restores the loader from starts at the
    next untrained batch.
    Each iteration reads the epoch the trainer trains (``set_epoch`` on the loader's
    data set before the loader starts): a resume from an end-of-epoch checkpoint, which
    Lightning restores no loader state from, still reads the next epoch's order.

    Cost: one ``state_dict()`` of the loader per batch. With DataLoader workers it is
    about a microsecond (the workers send their state with each batch); with
    ``num_workers=0`` the data set's state is taken in the training process, about
    0.1-0.2 ms per batch for an ``EchoDataset``.

    Args:
        loader: a loader that checkpoints its own position (``state_dict()`` and
            ``load_state_dict()``: torchdata's ``StatefulDataLoader``) and has no
            ``len()``; its data set's ``set_epoch``, if any, is told each epoch.
        trainer: the ``lightning.Trainer`` that fits with this loader
            (``self.trainer`` in ``train_dataloader``).

    Raises:
        TypeError: ``loader`` keeps no state, or has ``len()``; ``trainer`` is not a
            Lightning ``Trainer``; when iterated, the ``training_step`` reads batches
            itself (``dataloader_iter``).
        RuntimeError: when iterated, the trainer trains another epoch than the one the
            iteration reads (it restored a checkpoint after it began to read, see
            ``estimated_stepping_batches`` in the Lightning page of the docs).

    Example:
        >>> import lightning as L
        >>> from torchdata.stateful_dataloader import StatefulDataLoader
        >>> from dataecho.torch import EchoDataset
        >>> trainer = L.Trainer(accelerator="cpu", logger=False)
        >>> loader = LightningLoader(
        ...     StatefulDataLoader(EchoDataset(list(range(8)), factor=2), batch_size=4),
        ...     trainer)
        >>> len(list(loader)), loader.stats().fresh_examples
        (4, 8)
    """

    def __init__(self, loader: Any, trainer: Any) -> None:
        self.loader = _check_loader(loader)
        self.trainer = _check_trainer(trainer)
        self._pass: _Pass | None = None
        self._loaded: dict[str, Any] | None = None  # a state the next iteration resumes

    def __iter__(self) -> Iterator[Any]:
        # A generator: Lightning calls iter() once only to see that it can, and nothing
        # is read (nor any worker started) before the first batch is asked for.
        _check_step(self.trainer)
        loaded, self._loaded = self._loaded, None
        if loaded is None:
            epoch, count, restore = _epoch_of(self.trainer), 0, None
        elif loaded["ended"]:
            # Saved after the epoch's last batch: the next epoch follows. The loader's
            # state still carries what its data set counted.
            epoch, count, restore = loaded["epoch"] + 1, 0, loaded["loader"]
        else:
            epoch, count, restore = loaded["epoch"], loaded["batches"], loaded["loader"]
        set_epoch = getattr(getattr(self.loader, "dataset", None), "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)  # a restored position of this epoch still wins
        if restore is not None:
            self.loader.load_state_dict(restore)
        batches = iter(self.loader)
        live = self._pass = _Pass(epoch, count)
        live.states[count] = self.loader.state_dict()
        try:
            while True:
                if live.ahead:  # asked for the next: the trainer now trains the last
                    _check_epoch(self.trainer, live)
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                live.count += 1
                live.states[live.count] = self.loader.state_dict()
                live.states.pop(live.count - _KEEP, None)
                live.ahead = True
                yield batch
            live.states[live.count] = self.loader.state_dict()  # the finished iteration
            live.ahead, live.ended = False, True
        finally:
            if not live.ended and self._pass is live:  # closed early: the fit is over
                del batches
                _release(self.loader)

    def state_dict(self) -> dict[str, Any]:
        """The loader's state after the batches of this epoch the trainer has trained.

        ``"epoch"``, ``"batches"`` (trained this epoch), ``"ended"`` (the loader's
        iteration ended there) and ``"loader"``, the wrapped loader's state. Taken
        after :meth:`load_state_dict` and before the next batch, it is the loaded state.
        Under ``torch.distributed`` (DDP), where Lightning writes rank 0's checkpoint
        only, every rank's state, gathered: ``{"ranks": [state of rank 0, ...]}``.
        Every rank must then call it, as every rank calls ``trainer.save_checkpoint``.
        """
        state = self._own_state()
        if _world_size() == 1:
            return state
        states: list[Any] = [None] * _world_size()
        dist.all_gather_object(states, state)
        return {"ranks": states}

    def _own_state(self) -> dict[str, Any]:
        live = self._pass
        if live is None:
            if self._loaded is not None:
                return dict(self._loaded)
            return {"epoch": _epoch_of(self.trainer), "batches": 0, "ended": False,
                    "loader": None}
        # Lightning reads a loader without len() one batch ahead, and asks for the next
        # batch when it starts to train the one it read ahead (fetchers.py): all
        # batches yielded but the last are trained, the last too once the loader ended.
        trained = live.count - live.ahead
        return {"epoch": live.epoch, "batches": trained,
                "ended": live.ended, "loader": live.states[trained]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Makes the next iteration resume where :meth:`state_dict` was taken.

        Raises:
            TypeError: ``state`` is not a dict, or a value has the wrong type.
            ValueError: a key is missing, a count is negative, or a state taken mid-epoch
                (``batches`` > 0, not ``ended``) holds no state of the wrapped loader.
        """
        if not isinstance(state, Mapping):
            raise TypeError(
                f"state must be a dict from LightningLoader.state_dict(), got "
                f"{reprlib.repr(state)} of type {type(state).__name__}; pass the dict "
                "saved in the checkpoint")
        if "ranks" in state:
            state = _own_rank(state["ranks"])
        loader = state_value(state, "loader", _OWNER)
        if loader is not None and not isinstance(loader, Mapping):
            raise TypeError(
                f"state of {_OWNER} has loader={reprlib.repr(loader)} of type "
                f"{type(loader).__name__}, but it must be the wrapped loader's state (a "
                "dict) or None: the checkpoint is damaged; pass the dict saved from this "
                "one's checkpoint")
        epoch, batches = state_int(state, "epoch", _OWNER), state_int(state, "batches", _OWNER)
        ended = state_bool(state, "ended", _OWNER)
        # Only a state taken before an epoch's first batch may lack the loader's: without
        # it, a mid-epoch resume would read the epoch from its start and train its first
        # batches again.
        if batches and not ended and not loader:
            raise ValueError(
                f"state of {_OWNER} has loader={reprlib.repr(loader)} with "
                f"batches={batches} of epoch {epoch} trained and the epoch not ended, but "
                "a mid-epoch state must hold the wrapped loader's state (a non-empty dict, "
                "as state_dict() saves it) to resume at the next batch: the checkpoint is "
                "damaged; pass the dict saved from this one's checkpoint")
        self._loaded = {"epoch": epoch, "batches": batches, "ended": ended, "loader": loader}
        self._pass = None

    def stats(self) -> EchoStats:
        """The wrapped loader's data set's counts (:meth:`EchoDataset.stats`).

        Raises:
            TypeError: the loader's data set has no ``stats()``.
        """
        dataset = getattr(self.loader, "dataset", None)
        if not callable(getattr(dataset, "stats", None)):
            raise TypeError(
                f"LightningLoader.stats() reads the stats() of the loader's data set, and "
                f"{type(dataset).__name__} has none; count the batches in the training "
                "step, or wrap a loader over an EchoDataset")
        return dataset.stats()  # type: ignore[union-attr,no-any-return]

    def __repr__(self) -> str:
        return f"LightningLoader(<{type(self.loader).__name__}>)"


def _release(loader: Any) -> None:
    """Lets a ``StatefulDataLoader``'s workers stop now, as Lightning stops a DataLoader's.

    Lightning shuts down the workers of the loader it was given when a fit ends; those
    of the loader inside this wrapper would live on until the garbage collector finds
    them, and joining them there can stall a later step for seconds.
    """
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:  # then the loader is not one
        return
    if isinstance(loader, StatefulDataLoader):
        loader.load_state_dict({})  # drops its iterator (no state to restore): it stops


def _check_loader(loader: object) -> Any:
    if not all(callable(getattr(loader, m, None))
               for m in ("__iter__", "state_dict", "load_state_dict")):
        raise TypeError(
            f"loader must checkpoint its own position (state_dict() and "
            f"load_state_dict()), so that a resume starts at the next batch; got "
            f"{type(loader).__name__}, which has no such state; wrap the data set in "
            "torchdata's StatefulDataLoader(dataset, batch_size=..., num_workers=...) "
            "instead of a DataLoader")
    try:
        length: int | None = len(loader)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        length = None  # an IterableDataset's loader: what this wrapper is for
    if length is not None:
        raise TypeError(
            f"loader must have no len() (Lightning reads such a loader one batch ahead, "
            f"which this wrapper accounts for), got {type(loader).__name__} with len() "
            f"{length}, which Lightning does not read ahead and resumes from its own "
            "state; return the loader from train_dataloader as it is")
    return loader


def _check_trainer(trainer: object) -> Any:
    try:
        _epoch_of(trainer)
    except AttributeError:
        raise TypeError(
            f"trainer must be the lightning.Trainer that fits with this loader (its "
            f"progress says which epoch to read and what was trained), got a "
            f"{type(trainer).__name__}, which has no such progress; pass self.trainer "
            "from train_dataloader (of the LightningModule or the LightningDataModule)"
            ) from None
    return trainer


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _own_rank(states: object) -> Mapping[str, Any]:
    """This rank's state from a gathered ``{"ranks": [...]}`` state."""
    world_size = _world_size()
    if not isinstance(states, list) or len(states) != world_size:
        count = len(states) if isinstance(states, list) else type(states).__name__
        raise ValueError(
            f"state of {_OWNER} holds the states of {count} ranks, but this job has "
            f"{world_size}: each rank resumes its own part of the data; resume with the "
            "number of processes the checkpoint was taken with")
    state = states[dist.get_rank() if world_size > 1 else 0]
    if not isinstance(state, Mapping):
        raise TypeError(
            f"state of {_OWNER} holds {reprlib.repr(state)} of type "
            f"{type(state).__name__} for this rank, but it must be a dict: the "
            "checkpoint is damaged; pass the dict saved from this one's checkpoint")
    return state


def _epoch_of(trainer: Any) -> int:
    """The epoch the trainer trains: the one it passes to its samplers' ``set_epoch``."""
    return int(trainer.fit_loop.epoch_progress.current.processed)


def _check_epoch(trainer: Any, live: _Pass) -> None:
    """Refuses to go on reading an epoch other than the one the trainer trains."""
    epoch = _epoch_of(trainer)
    if epoch != live.epoch:
        raise RuntimeError(
            f"LightningLoader reads epoch {live.epoch}, but the trainer trains epoch "
            f"{epoch}: the trainer began to read this loader before it restored its "
            "checkpoint (reading trainer.estimated_stepping_batches in "
            "configure_optimizers does so, Lightning#20550), or another loop reads it; "
            "give the optimizer a step budget of your own (max_epochs times the steps "
            "of an epoch), and let only the trainer iterate the loader")


def _check_step(trainer: Any) -> None:
    module = getattr(trainer, "lightning_module", None)
    step = getattr(module, "training_step", None)
    if step is not None and "dataloader_iter" in inspect.signature(step).parameters:
        raise TypeError(
            f"LightningLoader needs one batch per training step, but "
            f"{type(module).__name__}.training_step takes dataloader_iter and reads "
            "batches itself, so the trainer's count of steps says nothing about the "
            "batches read; take the batch as training_step(batch, batch_idx), or return "
            "the StatefulDataLoader itself")
