"""What :class:`dataecho.torch.hf.ExactResume` resumes, and the state it saved, checked.

The train loaders it can resume (an ``EchoBatches`` with a whole-number factor, or a
loader accelerate prepared over a fixed-factor ``EchoDataset``), and its state as the
Trainer's checkpoint holds it (``trainer_state.json``), read back and checked against
the checkpoint's global step before anything is read. Needs no transformers.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from typing import Any

from .._checks import state_int
from ..factor import Auto
from .batches import EchoBatches
from .dataset import EchoDataset

#: The callback's name, as the Trainer saves its state.
NAME = "ExactResume"
KEYS = ("epoch", "batches", "start_step")  # the attributes of its state, all required
#: How to mend a refused state, for every error about it.
FIX = ("resume from a checkpoint that a run with callbacks=[ExactResume()] wrote, with "
        "its trainer_state.json as written")



def saved_state(state: Any, accumulation: int,
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
    saved = callbacks.get(NAME)
    if isinstance(saved, list):  # several of these callbacks: the first one's
        saved = saved[0] if saved else None
    if saved is None:
        raise ValueError(
            f"{NAME} finds no state of its own in the checkpoint (trainer_state.json, at "
            f"global step {step}, holds states of {', '.join(map(repr, callbacks)) or 'no'} "
            f"callbacks): the run that wrote it trained without {NAME}, so which epoch of "
            "the data set it reached, and how far into it, is unknown. Resume it without "
            f"{NAME} (the Trainer's own skip, exact in the first epoch only), or start a "
            f"new run with callbacks=[{NAME}()]")
    attributes = saved.get("attributes") if isinstance(saved, Mapping) else None
    if not isinstance(attributes, Mapping):
        raise TypeError(
            f"trainer_state.json holds {reprlib.repr(saved)} of type {type(saved).__name__} "
            f"as {NAME}'s state, but it must be a dict with the dict 'attributes' that "
            f"{NAME}.state() writes: the checkpoint is damaged; {FIX}")
    for key in KEYS + (("loader",) if batched else ()):
        if key not in attributes:
            raise ValueError(
                f"state of {NAME} lacks the key {key!r} that {NAME}.state() writes (it "
                f"has {', '.join(map(repr, attributes)) or 'none'}): the checkpoint is "
                f"damaged or was written by another version of dataecho; {FIX}")
    epoch = state_int(attributes, "epoch", NAME, rule="an epoch of the data set", fix=FIX)
    start = state_int(attributes, "start_step", NAME, maximum=step, fix=FIX,
                      rule=f"the global step the epoch began at, at most the checkpoint's "
                           f"global_step {step}")
    batches = state_int(attributes, "batches", NAME, fix=FIX,
                        rule="the batches of the epoch trained")
    if epoch == 0 and start:
        raise ValueError(
            f"state of {NAME} has epoch=0 and start_step={start}, but the first epoch "
            f"begins at global step 0: the checkpoint is damaged or edited; {FIX}")
    steps = step - start
    low, high = max(0, accumulation * steps - accumulation + 1), accumulation * steps
    if not low <= batches <= high:
        count = f"{low} to {high}" if low < high else f"{high}"
        raise ValueError(
            f"state of {NAME} has batches={batches} (of epoch {epoch}, begun at global "
            f"step {start}), but the checkpoint's global_step {step} means {steps} "
            f"optimizer steps in that epoch, {count} batches with "
            f"gradient_accumulation_steps={accumulation}: the checkpoint is damaged or "
            "edited, or was taken with another gradient_accumulation_steps; resume with "
            f"the gradient_accumulation_steps it was taken with, or {FIX}")
    loader = attributes.get("loader") if batched else None
    if batched and not isinstance(loader, Mapping):
        raise TypeError(
            f"state of {NAME} has loader={reprlib.repr(loader)} of type "
            f"{type(loader).__name__}, but it must be a dict (the EchoBatches' state_dict()): "
            f"the checkpoint is damaged; {FIX}")
    return epoch, batches, start, loader


def resume_batches(loader: EchoBatches, epoch: int, batches: int,
                   loader_state: Mapping[str, Any], step: int, accumulation: int) -> None:
    """Loads an ``EchoBatches``' state, after checking the Trainer resumes its epoch.

    The Trainer resumes at epoch ``step // steps_per_epoch`` (an epoch's optimizer
    steps, from ``len()``) and tells the loader so: the checkpoint must name that
    epoch. A state taken after an epoch's last batch names that epoch, read to its end;
    the Trainer's ``set_epoch`` for the next one then leaves it.
    """
    size = len(loader)
    per_epoch = -(-size // accumulation)
    if step // per_epoch != epoch:
        raise ValueError(
            f"state of {NAME} has epoch={epoch}, but the Trainer resumes global step "
            f"{step} in epoch {step // per_epoch} ({per_epoch} optimizer steps an epoch: "
            f"len() of the EchoBatches is {size} batches, gradient_accumulation_steps="
            f"{accumulation}): the checkpoint was taken with another data set, batch size, "
            f"factor or number of processes; {FIX}, with the data, "
            "per_device_train_batch_size, factor and number of processes of the run that "
            "wrote it")
    loader.load_state_dict(loader_state)  # checked by the loader itself
    if not (loader.epoch == epoch or (batches == 0 and loader.epoch == epoch - 1)):
        raise ValueError(
            f"state of {NAME} has epoch={epoch} and batches={batches}, but its "
            f"EchoBatches state (loader) is of epoch {loader.epoch}: the two were not "
            f"taken together; the checkpoint is damaged or edited; {FIX}")


def check_loader(loader: Any) -> None:
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


def check_batches(loader: EchoBatches) -> None:
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
