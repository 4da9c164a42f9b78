"""Exact resume of an ``EchoDataset`` or ``EchoBatches`` under the Hugging Face Trainer.

The Trainer cannot resume an ``IterableDataset`` by itself: without ``len()`` it counts
a whole run as one epoch, so on resume it skips ``global_step`` batches from the start
of the data set's first epoch, and it numbers its passes over the data set from 0 in
every run, a resumed one included (``set_epoch(0)``, ``set_epoch(1)``, ...): a run
resumed in the second epoch trains that epoch again from its start. Nor can it resume
an :class:`dataecho.torch.EchoBatches` (returned by ``get_train_dataloader``): its
skip rebuilds a plain loader without the echo, and with ``ignore_data_skip=True`` it
reads the checkpoint's epoch from its start. :class:`ExactResume` keeps, in the
Trainer's own checkpoints, which epoch the run is in and how many of its batches were
trained (and an ``EchoBatches``' own state), and on resume makes the loader read that
epoch, past those batches, and the epochs after.
"""

from __future__ import annotations

from typing import Any

from .._extras import needs
from .batches import EchoBatches
from .distributed import EqualSteps
from .resumable import FIX, NAME, check_batches, check_loader, resume_batches, saved_state

try:
    from transformers import TrainerCallback
    from transformers.trainer_callback import ExportableState
except ModuleNotFoundError as error:  # pragma: no cover - depends on what is installed
    raise needs(error, "dataecho.torch.hf", "transformers", "hf",
                what="Hugging Face transformers") from None
except ImportError as error:  # pragma: no cover - depends on the installed transformers
    raise ImportError(
        "dataecho.torch.hf needs transformers>=4.41 (its Trainer saves callback states "
        "in checkpoints from that version on); pip install -U transformers") from error

class ExactResume(TrainerCallback, ExportableState):
    """Makes the Hugging Face ``Trainer`` resume an ``EchoDataset`` exactly, any epoch.

    Pass it to the Trainer with ``ignore_data_skip=True``::

        args = TrainingArguments(..., max_steps=..., ignore_data_skip=True)
        Trainer(model, args, train_dataset=EchoDataset(data, factor=2),
                callbacks=[ExactResume()]).train(resume_from_checkpoint=...)

    It resumes an :class:`dataecho.torch.EchoBatches` too, returned by a Trainer
    subclass's ``get_train_dataloader`` (``EchoBatches(super().get_train_dataloader(),
    factor=2)``, a whole-number factor): the checkpoint then also holds the
    ``EchoBatches``' own state (JSON, a few counters), which the resume loads, so the
    batches and the counts of ``stats()`` go on as the uninterrupted run's. The Trainer
    knows the epochs of a loader with ``len()`` and tells it each one (``set_epoch``).
    And it resumes :class:`dataecho.torch.distributed.EqualSteps` around the Trainer's
    own loader (``EqualSteps(super().get_train_dataloader())``: a stream read sliced,
    whose processes' parts may differ in length), which ends the epoch where every
    process can still take a step.

    It counts the batches trained in each epoch of the data set and saves the epoch, the
    count and the global step the epoch began at in every checkpoint
    (``trainer_state.json``, written by process 0: every process trains the same steps).
    On resume the first pass reads the saved epoch and skips the batches trained before
    the checkpoint; each later pass reads the next epoch. The examples trained after the
    resume, appended to those before, are the uninterrupted run's, on one process or
    several, with DataLoader workers or without.

    The saved state is checked before anything is read, as every state in dataecho is:
    each key present and an int in its range, and the count of batches the one the
    checkpoint's ``global_step`` implies (``gradient_accumulation_steps`` batches a step
    since the epoch began). A count past the end of the epoch is refused once the epoch
    has been read. An edit consistent with all of these is not caught: the state is
    trusted as the rest of the checkpoint is.

    The skipped batches are read again (not trained): the resume costs the reading time
    of that part of the epoch, and ``stats()`` counts from the resume on, those batches
    included. The order of an epoch must be a function of the seed and the epoch, as an
    ``EchoDataset`` with a fixed factor reads it; an adaptive one (``factor=Auto()``)
    echoes by timing, and is refused.

    Raises:
        ValueError: when training starts, if ``ignore_data_skip`` is False (the Trainer
            would skip batches from the start of the run on its own) or the data set
            echoes adaptively; on resume, if the checkpoint holds no state of this
            callback (it was saved by a run without it), or a key of the state is
            missing, out of its range, or disagrees with the checkpoint's global step;
            at the end of the resumed epoch, if it had no batches past the count.
            With ``EchoBatches``: when training starts, if its factor is not a whole
            number (its ``len()`` would change from epoch to epoch, which the Trainer
            reads once); on resume, if the checkpoint's epoch is not the one its
            global step falls in, or its ``EchoBatches`` state is refused.
        TypeError: when training starts, if the train loader is neither an
            ``EchoBatches`` nor one that accelerate prepared over an ``EchoDataset``; on
            resume, if the state or one of its values has the wrong type.

    Example:
        >>> callback = ExactResume()
        >>> callback.epoch, callback.batches
        (0, 0)
        >>> callback.state()["attributes"]
        {'epoch': 0, 'batches': 0, 'start_step': 0}
    """

    def __init__(self) -> None:
        #: The epoch of the data set the next batch comes from.
        self.epoch = 0
        #: Batches of that epoch trained so far.
        self.batches = 0
        #: The Trainer's global step when that epoch began.
        self.start_step = 0
        self._loader: Any = None  # the Trainer's train loader
        self._prepared: Any = None  # accelerate's loader in it: skips, and is told epochs
        self._first_pass = True  # no pass of this train() call has begun
        self._ended = False  # the last step took the pass's last batch
        self._skip = 0  # batches the loader skips in this pass (a resume's first)
        self._trained = False  # a batch of this pass was trained

    def state(self) -> dict[str, Any]:
        """What the Trainer saves in each checkpoint: the epoch, its batches trained, the
        global step it began at, and an ``EchoBatches``' state (``"loader"``)."""
        attributes: dict[str, Any] = {"epoch": self.epoch, "batches": self.batches,
                                      "start_step": self.start_step}
        if isinstance(self._loader, EchoBatches):
            attributes["loader"] = self._loader.state_dict()
        return {"args": {}, "attributes": attributes}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Checks the setup; on resume, makes the loader read on from the checkpoint."""
        if not args.ignore_data_skip:
            raise ValueError(
                "ExactResume needs TrainingArguments(ignore_data_skip=True): without it the "
                "Trainer skips batches from the start of the run on resume, by itself, "
                "which trains an epoch after the first again; pass ignore_data_skip=True "
                "and ExactResume resumes the epoch the checkpoint was taken in")
        loader: Any = kwargs.get("train_dataloader")
        # EqualSteps (a stream read sliced) says where the epoch ends on every rank;
        # the loader it wraps reads the epoch, past the skip.
        prepared: Any = loader.loader if isinstance(loader, EqualSteps) else loader
        batched = isinstance(loader, EchoBatches)
        if batched:
            check_batches(loader)
        else:
            check_loader(prepared)
        accumulation = args.gradient_accumulation_steps
        # Resumed (global_step > 0): the state is the checkpoint's, which the Trainer
        # loaded whether or not it restores callbacks from it. A new run starts at 0.
        saved = (saved_state(state, accumulation, batched) if state.global_step > 0
                 else (0, 0, 0, None))
        self.epoch, self.batches, self.start_step, loader_state = saved
        self._loader, self._prepared = loader, prepared
        self._first_pass, self._ended = True, False
        self._trained = False
        if batched:  # the Trainer numbers a sized loader's epochs itself
            self._skip = 0
            if loader_state is not None:
                resume_batches(loader, self.epoch, self.batches, loader_state,
                               state.global_step, accumulation)
            return
        self._skip = self.batches
        prepared.__dict__["set_epoch"] = _Shifted(prepared, self.epoch)
        prepared.skip_batches = self.batches  # re-read, not trained (accelerate's own skip)

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A new pass over the data set: the next epoch, unless it is this run's first."""
        if self._first_pass:
            self._first_pass = False
            return
        if not self._ended:  # the pass ended on a partial gradient accumulation
            self.epoch, self.batches, self.start_step = self.epoch + 1, 0, state.global_step
        self._ended = False
        if not isinstance(self._loader, EchoBatches):
            self._prepared.skip_batches = 0

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A batch trained without an optimizer step (gradient accumulation)."""
        self.batches, self._trained = self.batches + 1, True

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A batch trained and the optimizer stepped; a checkpoint may follow."""
        self.batches, self._trained = self.batches + 1, True
        # accelerate's loaders read one batch ahead, so they know the batch just trained
        # was their last before the Trainer asks for another (an EchoBatches' len() says
        # it); a checkpoint now must name the next epoch, which a resume reads from its
        # start.
        if (self.batches >= len(self._loader) if isinstance(self._loader, EchoBatches)
                else getattr(self._loader, "end_of_dataloader", False)):
            self.epoch, self.batches, self._ended = self.epoch + 1, 0, True
            self.start_step = state.global_step

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Refuses a resume whose skip ran past the end of the epoch it resumed."""
        skip, self._skip = self._skip, 0
        # A checkpoint's count is below its epoch's batches: after the last batch the
        # state names the next epoch. A pass with nothing left after the skip had fewer.
        if skip and not self._trained:
            raise ValueError(
                f"state of {NAME} has batches={skip} (the batches of epoch {self.epoch} "
                f"trained before the checkpoint), but epoch {self.epoch} has no more than "
                f"{skip} batches: the resume read the whole epoch without a batch to train. "
                "The checkpoint was taken with another data set, batch size or number of "
                f"processes, or edited; {FIX}, with the data, per_device_train_batch_size "
                "and number of processes of the run that wrote it")

    def __repr__(self) -> str:
        return (f"ExactResume(epoch={self.epoch}, batches={self.batches}, "
                f"start_step={self.start_step})")


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
