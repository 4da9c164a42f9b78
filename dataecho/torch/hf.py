"""Exact resume of an :class:`dataecho.torch.EchoDataset` under the Hugging Face Trainer.

The Trainer cannot resume an ``IterableDataset`` by itself: without ``len()`` it counts
a whole run as one epoch, so on resume it skips ``global_step`` batches from the start
of the data set's first epoch, and it numbers its passes over the data set from 0 in
every run, a resumed one included (``set_epoch(0)``, ``set_epoch(1)``, ...): a run
resumed in the second epoch trains that epoch again from its start. :class:`ExactResume`
keeps, in the Trainer's own checkpoints, which epoch the run is in and how many of its
batches were trained, and on resume makes the loader read that epoch, past those
batches, and the epochs after.
"""

from __future__ import annotations

from typing import Any

from ..factor import Auto
from .dataset import EchoDataset

try:
    from transformers import TrainerCallback
    from transformers.trainer_callback import ExportableState
except ModuleNotFoundError as error:  # pragma: no cover - depends on what is installed
    if error.name != "transformers":
        raise
    raise ModuleNotFoundError(
        "dataecho.torch.hf needs Hugging Face transformers, which is not installed; "
        "pip install 'dataecho[hf]'", name="transformers") from None
except ImportError as error:  # pragma: no cover - depends on the installed transformers
    raise ImportError(
        "dataecho.torch.hf needs transformers>=4.41 (its Trainer saves callback states "
        "in checkpoints from that version on); pip install -U transformers") from error

_NAME = "ExactResume"


class ExactResume(TrainerCallback, ExportableState):
    """Makes the Hugging Face ``Trainer`` resume an ``EchoDataset`` exactly, any epoch.

    Pass it to the Trainer with ``ignore_data_skip=True``::

        args = TrainingArguments(..., max_steps=..., ignore_data_skip=True)
        Trainer(model, args, train_dataset=EchoDataset(data, factor=2),
                callbacks=[ExactResume()]).train(resume_from_checkpoint=...)

    It counts the batches trained in each epoch of the data set and saves the epoch and
    the count in every checkpoint (``trainer_state.json``, written by process 0: every
    process trains the same steps). On resume the first pass reads the saved epoch and
    skips the batches trained before the checkpoint; each later pass reads the next
    epoch. The examples trained after the resume, appended to those before, are the
    uninterrupted run's, on one process or several, with DataLoader workers or without.

    The skipped batches are read again (not trained): the resume costs the reading time
    of that part of the epoch, and ``stats()`` counts from the resume on, those batches
    included. The order of an epoch must be a function of the seed and the epoch, as an
    ``EchoDataset`` with a fixed factor reads it; an adaptive one (``factor=Auto()``)
    echoes by timing, and is refused.

    Raises:
        ValueError: when training starts, if ``ignore_data_skip`` is False (the Trainer
            would skip batches from the start of the run on its own) or the data set
            echoes adaptively.
        TypeError: when training starts, if the train loader is not one that
            accelerate prepared over an ``EchoDataset``.

    Example:
        >>> callback = ExactResume()
        >>> callback.epoch, callback.batches
        (0, 0)
        >>> callback.state()["attributes"]
        {'epoch': 0, 'batches': 0}
    """

    def __init__(self) -> None:
        #: The epoch of the data set the next batch comes from.
        self.epoch = 0
        #: Batches of that epoch trained so far.
        self.batches = 0
        self._loader: Any = None  # the Trainer's prepared train loader
        self._first_pass = True  # no pass of this train() call has begun
        self._ended = False  # the last step took the pass's last batch

    def state(self) -> dict[str, Any]:
        """What the Trainer saves in each checkpoint: the epoch and the batches trained."""
        return {"args": {}, "attributes": {"epoch": self.epoch, "batches": self.batches}}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Checks the setup; on resume, makes the loader read on from the checkpoint."""
        if not args.ignore_data_skip:
            raise ValueError(
                "ExactResume needs TrainingArguments(ignore_data_skip=True): without it the "
                "Trainer skips batches from the start of the run on resume, by itself, "
                "which trains an epoch after the first again; pass ignore_data_skip=True "
                "and ExactResume resumes the epoch the checkpoint was taken in")
        loader: Any = kwargs.get("train_dataloader")
        _check_loader(loader)
        # Resumed (global_step > 0): the state is the checkpoint's, which the Trainer
        # loaded whether or not it restores callbacks from it. A new run starts at 0.
        saved = (getattr(state, "stateful_callbacks", None) or {}).get(_NAME)
        if isinstance(saved, list):  # several of these callbacks: the first one's
            saved = saved[0]
        attributes = (saved or {}).get("attributes", {}) if state.global_step > 0 else {}
        self.epoch = int(attributes.get("epoch", 0))
        self.batches = int(attributes.get("batches", 0))
        self._loader, self._first_pass, self._ended = loader, True, False
        loader.__dict__["set_epoch"] = _Shifted(loader, self.epoch)
        loader.skip_batches = self.batches  # re-read, not trained (accelerate's own skip)

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A new pass over the data set: the next epoch, unless it is this run's first."""
        if self._first_pass:
            self._first_pass = False
            return
        if not self._ended:  # the pass ended on a partial gradient accumulation
            self.epoch, self.batches = self.epoch + 1, 0
        self._ended = False
        self._loader.skip_batches = 0

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A batch trained without an optimizer step (gradient accumulation)."""
        self.batches += 1

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A batch trained and the optimizer stepped; a checkpoint may follow."""
        self.batches += 1
        # accelerate's loaders read one batch ahead, so they know the batch just trained
        # was their last before the Trainer asks for another; a checkpoint now must name
        # the next epoch, which a resume reads from its start.
        if getattr(self._loader, "end_of_dataloader", False):
            self.epoch, self.batches, self._ended = self.epoch + 1, 0, True

    def __repr__(self) -> str:
        return f"ExactResume(epoch={self.epoch}, batches={self.batches})"


class _Shifted:
    """A prepared loader's ``set_epoch`` that reads the Trainer's passes from ``first``.

    The Trainer numbers its passes over an ``IterableDataset`` from 0 in every run, a
    resumed one included, and calls ``loader.set_epoch(pass)`` before each; accelerate's
    loader calls ``set_epoch(loader.iteration)`` again when its iteration starts and
    passes it to the data set. The data set reads ``first + pass - pass0``; the loader
    keeps counting passes, so both calls agree.
    """

    def __init__(self, loader: Any, first: int) -> None:
        self.set_epoch = type(loader).set_epoch.__get__(loader)  # the loader's own
        self.loader, self.first = loader, first
        self.start: int | None = None  # the Trainer's number for the first pass

    def __call__(self, epoch: int) -> None:
        if self.start is None:
            self.start = epoch
        self.set_epoch(self.first + epoch - self.start)
        self.loader.iteration = epoch


def _check_loader(loader: Any) -> None:
    """The Trainer's train loader: prepared by accelerate, over a fixed-factor EchoDataset."""
    dataset = getattr(loader, "dataset", None)
    echo = dataset if isinstance(dataset, EchoDataset) else getattr(dataset, "dataset", None)
    if not isinstance(echo, EchoDataset) or not hasattr(loader, "skip_batches"):
        raise TypeError(
            f"ExactResume resumes the Trainer's train loader over an EchoDataset, which "
            f"accelerate prepared; got a {type(loader).__name__} over "
            f"{type(dataset).__name__}; pass the EchoDataset as the Trainer's train_dataset")
    if isinstance(echo.factor, Auto):
        raise ValueError(
            f"ExactResume resumes by reading the epoch again up to the checkpoint, which "
            f"gives the same examples only for a fixed factor; {echo.factor!r} echoes by "
            "timing; pass a fixed factor")
