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

import reprlib
from collections.abc import Mapping
from typing import Any

from .._checks import state_int
from .._extras import needs
from ..factor import Auto
from .batches import EchoBatches
from .dataset import EchoDataset

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

_NAME = "ExactResume"
_KEYS = ("epoch", "batches", "start_step")  # the attributes of its state, all required
_FIX = ("resume from a checkpoint that a run with callbacks=[ExactResume()] wrote, with "
        "its trainer_state.json as written")


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
        self._loader: Any = None  # the Trainer's prepared train loader
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
        batched = isinstance(loader, EchoBatches)
        if batched:
            _check_batches(loader)
        else:
            _check_loader(loader)
        accumulation = args.gradient_accumulation_steps
        # Resumed (global_step > 0): the state is the checkpoint's, which the Trainer
        # loaded whether or not it restores callbacks from it. A new run starts at 0.
        saved = (_saved(state, accumulation, batched) if state.global_step > 0
                 else (0, 0, 0, None))
        self.epoch, self.batches, self.start_step, loader_state = saved
        self._loader, self._first_pass, self._ended = loader, True, False
        self._trained = False
        if batched:  # the Trainer numbers a sized loader's epochs itself
            self._skip = 0
            if loader_state is not None:
                _resume_batches(loader, self, loader_state, state.global_step, accumulation)
            return
        self._skip = self.batches
        loader.__dict__["set_epoch"] = _Shifted(loader, self.epoch)
        loader.skip_batches = self.batches  # re-read, not trained (accelerate's own skip)

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A new pass over the data set: the next epoch, unless it is this run's first."""
        if self._first_pass:
            self._first_pass = False
            return
        if not self._ended:  # the pass ended on a partial gradient accumulation
            self.epoch, self.batches, self.start_step = self.epoch + 1, 0, state.global_step
        self._ended = False
        if not isinstance(self._loader, EchoBatches):
            self._loader.skip_batches = 0

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
                f"state of {_NAME} has batches={skip} (the batches of epoch {self.epoch} "
                f"trained before the checkpoint), but epoch {self.epoch} has no more than "
                f"{skip} batches: the resume read the whole epoch without a batch to train. "
                "The checkpoint was taken with another data set, batch size or number of "
                f"processes, or edited; {_FIX}, with the data, per_device_train_batch_size "
                "and number of processes of the run that wrote it")

    def __repr__(self) -> str:
        return (f"ExactResume(epoch={self.epoch}, batches={self.batches}, "
                f"start_step={self.start_step})")


def _saved(state: Any, accumulation: int,
           batched: bool) -> tuple[int, int, int, Mapping[str, Any] | None]:
    """The checkpoint's epoch, batches and start step, checked against its global step,
    and (``batched``: for an ``EchoBatches``) the loader's state, checked to be a dict.

    The Trainer trains ``accumulation`` batches an optimizer step, so the steps since the
    epoch began say how many of its batches were trained: exactly that many times the
    steps, or up to ``accumulation - 1`` fewer where the Trainer carries a partial
    accumulation from the previous epoch into the first step of this one (older
    transformers count accumulation across epochs).
    """
    step = state.global_step
    callbacks = getattr(state, "stateful_callbacks", None) or {}
    saved = callbacks.get(_NAME)
    if isinstance(saved, list):  # several of these callbacks: the first one's
        saved = saved[0] if saved else None
    if saved is None:
        raise ValueError(
            f"{_NAME} finds no state of its own in the checkpoint (trainer_state.json, at "
            f"global step {step}, holds states of {', '.join(map(repr, callbacks)) or 'no'} "
            f"callbacks): the run that wrote it trained without {_NAME}, so which epoch of "
            "the data set it reached, and how far into it, is unknown. Resume it without "
            f"{_NAME} (the Trainer's own skip, exact in the first epoch only), or start a "
            f"new run with callbacks=[{_NAME}()]")
    attributes = saved.get("attributes") if isinstance(saved, Mapping) else None
    if not isinstance(attributes, Mapping):
        raise TypeError(
            f"trainer_state.json holds {reprlib.repr(saved)} of type {type(saved).__name__} "
            f"as {_NAME}'s state, but it must be a dict with the dict 'attributes' that "
            f"{_NAME}.state() writes: the checkpoint is damaged; {_FIX}")
    for key in _KEYS + (("loader",) if batched else ()):
        if key not in attributes:
            raise ValueError(
                f"state of {_NAME} lacks the key {key!r} that {_NAME}.state() writes (it "
                f"has {', '.join(map(repr, attributes)) or 'none'}): the checkpoint is "
                f"damaged or was written by another version of dataecho; {_FIX}")
    epoch = state_int(attributes, "epoch", _NAME, rule="an epoch of the data set", fix=_FIX)
    start = state_int(attributes, "start_step", _NAME, maximum=step, fix=_FIX,
                      rule=f"the global step the epoch began at, at most the checkpoint's "
                           f"global_step {step}")
    batches = state_int(attributes, "batches", _NAME, fix=_FIX,
                        rule="the batches of the epoch trained")
    if epoch == 0 and start:
        raise ValueError(
            f"state of {_NAME} has epoch=0 and start_step={start}, but the first epoch "
            f"begins at global step 0: the checkpoint is damaged or edited; {_FIX}")
    steps = step - start
    low, high = max(0, accumulation * steps - accumulation + 1), accumulation * steps
    if not low <= batches <= high:
        count = f"{low} to {high}" if low < high else f"{high}"
        raise ValueError(
            f"state of {_NAME} has batches={batches} (of epoch {epoch}, begun at global "
            f"step {start}), but the checkpoint's global_step {step} means {steps} "
            f"optimizer steps in that epoch, {count} batches with "
            f"gradient_accumulation_steps={accumulation}: the checkpoint is damaged or "
            "edited, or was taken with another gradient_accumulation_steps; resume with "
            f"the gradient_accumulation_steps it was taken with, or {_FIX}")
    loader = attributes.get("loader") if batched else None
    if batched and not isinstance(loader, Mapping):
        raise TypeError(
            f"state of {_NAME} has loader={reprlib.repr(loader)} of type "
            f"{type(loader).__name__}, but it must be a dict (the EchoBatches' state_dict()): "
            f"the checkpoint is damaged; {_FIX}")
    return epoch, batches, start, loader


def _resume_batches(loader: EchoBatches, saved: ExactResume, loader_state: Mapping[str, Any],
                    step: int, accumulation: int) -> None:
    """Loads an ``EchoBatches``' state, after checking the Trainer resumes its epoch.

    The Trainer resumes at epoch ``step // steps_per_epoch`` (an epoch's optimizer
    steps, from ``len()``) and tells the loader so: the checkpoint must name that
    epoch. A state taken after an epoch's last batch names that epoch, read to its end;
    the Trainer's ``set_epoch`` for the next one then leaves it.
    """
    size = len(loader)
    per_epoch = -(-size // accumulation)
    epoch, batches = saved.epoch, saved.batches
    if step // per_epoch != epoch:
        raise ValueError(
            f"state of {_NAME} has epoch={epoch}, but the Trainer resumes global step "
            f"{step} in epoch {step // per_epoch} ({per_epoch} optimizer steps an epoch: "
            f"len() of the EchoBatches is {size} batches, gradient_accumulation_steps="
            f"{accumulation}): the checkpoint was taken with another data set, batch size, "
            f"factor or number of processes; {_FIX}, with the data, "
            "per_device_train_batch_size, factor and number of processes of the run that "
            "wrote it")
    loader.load_state_dict(loader_state)  # checked by the loader itself
    if not (loader.epoch == epoch or (batches == 0 and loader.epoch == epoch - 1)):
        raise ValueError(
            f"state of {_NAME} has epoch={epoch} and batches={batches}, but its "
            f"EchoBatches state (loader) is of epoch {loader.epoch}: the two were not "
            f"taken together; the checkpoint is damaged or edited; {_FIX}")


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
        over = ("without a dataset" if dataset is None
                else f"over a {type(dataset).__name__}")
        raise TypeError(
            f"ExactResume resumes the Trainer's train loader when it is an EchoBatches or "
            f"a loader that accelerate prepared over an EchoDataset; got a "
            f"{type(loader).__name__} {over}; pass the EchoDataset as the Trainer's "
            "train_dataset, or return EchoBatches(super().get_train_dataloader(), "
            "factor=...) from get_train_dataloader")
    if isinstance(echo.recipe.factor, Auto):
        raise ValueError(
            f"ExactResume resumes by reading the epoch again up to the checkpoint, which "
            f"gives the same examples only for a fixed factor; {echo.recipe.factor!r} echoes by "
            "timing; pass a fixed factor")


def _check_batches(loader: EchoBatches) -> None:
    """An EchoBatches the Trainer can resume: a whole-number factor, so a fixed len()."""
    factor = loader.factor
    if isinstance(factor, Auto) or not float(factor).is_integer():
        why = ("echoes by timing, so an epoch read again is not the same"
               if isinstance(factor, Auto) else
               "draws its extra copies per batch, so len() changes from epoch to epoch, "
               "but the Trainer reads len() once and counts every epoch that long")
        raise ValueError(
            f"ExactResume resumes an EchoBatches with a whole-number factor; "
            f"factor={factor!r} {why}; pass a whole number (2, 3, ...)")
