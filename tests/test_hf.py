"""ExactResume checks the state it reads from a Trainer checkpoint before it resumes.

One process, in this one: 16 examples, factor 2, batches of 4, so an epoch is 8 batches.
A run with ``callbacks=[ExactResume()]`` saves a checkpoint at step 10 (epoch 1, 2 of
its batches trained, begun at global step 8); each test copies it, edits its
``trainer_state.json`` as damage or a mix-up would, and resumes from the copy. The
two-process runs, workers and gradient accumulation are in tests/test_accelerated.py.
"""
import json
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments

from dataecho.torch import EchoDataset
from dataecho.torch.hf import ExactResume

pytestmark = pytest.mark.torch

N, FACTOR, BATCH = 16, 2, 4
STEPS_PER_EPOCH = N * FACTOR // BATCH  # 8
STOP = STEPS_PER_EPOCH + 2  # the checkpoint: mid second epoch


class Recorder(nn.Module):
    """Records the ids of the examples it trains on."""

    def __init__(self):
        super().__init__()
        self.layer, self.seen = nn.Linear(3, 1), []

    def forward(self, i, x):
        self.seen += i.tolist()
        return {"loss": self.layer(x).pow(2).mean()}


ROWS = [{"i": torch.tensor(i), "x": torch.full((3,), i / N)} for i in range(N)]


def train(output_dir, max_steps, *, accumulation=1, resume=None, save_steps=None,
          callbacks=None):
    """The ids trained by one Trainer run (``save_steps``: a checkpoint every so many)."""
    args = TrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=BATCH, max_steps=max_steps,
        gradient_accumulation_steps=accumulation, ignore_data_skip=True, use_cpu=True,
        report_to=[], logging_strategy="no", disable_tqdm=True,
        save_strategy="no" if save_steps is None else "steps", save_steps=save_steps or 1)
    model = Recorder()
    Trainer(model=model, args=args, train_dataset=EchoDataset(ROWS, factor=FACTOR, seed=0),
            callbacks=[ExactResume()] if callbacks is None else callbacks
            ).train(resume_from_checkpoint=None if resume is None else str(resume))
    return model.seen


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A checkpoint at step STOP of a run with ExactResume."""
    out = tmp_path_factory.mktemp("run")
    train(out, STOP, save_steps=STOP)
    return out / f"checkpoint-{STOP}"


def resume_edited(checkpoint, tmp_path, edit, **kwargs):
    """Resumes from a copy of ``checkpoint`` whose ExactResume state ``edit`` changed."""
    copy = tmp_path / checkpoint.name
    shutil.copytree(checkpoint, copy)
    path = copy / "trainer_state.json"
    state = json.loads(path.read_text())
    edit(state["stateful_callbacks"]["ExactResume"]["attributes"], state)
    path.write_text(json.dumps(state))
    return train(tmp_path / "resumed", 3 * STEPS_PER_EPOCH, resume=copy, **kwargs)


def test_the_checkpoint_holds_the_epoch_its_batches_and_the_step_it_began_at(checkpoint):
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["global_step"] == STOP
    assert state["stateful_callbacks"]["ExactResume"]["attributes"] == {
        "epoch": 1, "batches": 2, "start_step": STEPS_PER_EPOCH}


@pytest.mark.parametrize(("accumulation", "stop"), [
    (1, STOP),
    (2, STOP // 2),  # 2 batches a step: the same place in the data
    (3, 3),  # an epoch of 8 batches is 2 steps and 2 batches carried into the next
])
def test_a_checkpoint_that_exact_resume_wrote_passes_its_checks_and_resumes_exactly(
        tmp_path, accumulation, stop):
    # The checks must not refuse what ExactResume writes, with gradient accumulation
    # too, where an epoch ends between two optimizer steps.
    total = 3 * STEPS_PER_EPOCH // accumulation
    whole = train(tmp_path / "whole", total, accumulation=accumulation)
    before = train(tmp_path / "out", stop, accumulation=accumulation, save_steps=stop)
    after = train(tmp_path / "out", total, accumulation=accumulation,
                  resume=tmp_path / "out" / f"checkpoint-{stop}")
    assert before + after == whole


def _set(key, value):
    def edit(attributes, state):
        attributes[key] = value
    return edit


def _drop(key):
    def edit(attributes, state):
        del attributes[key]
    return edit


@pytest.mark.parametrize(("edit", "error", "match"), [
    # Before these checks: the whole rest of the epoch skipped, training stopped at once.
    (_set("batches", 10**9), ValueError,
     r"batches=1000000000.*global_step 10.*2 optimizer steps.*2 batches with "
     r"gradient_accumulation_steps=1"),
    # Before: 3 batches trained again.
    (_set("batches", -3), ValueError, r"batches=-3, but it must be an int >= 0"),
    # Before: int(2.7), one batch trained again; True read as 1.
    (_set("batches", 2.7), TypeError, r"batches=2.7 of type float, but it must be an int"),
    (_set("batches", True), TypeError, r"batches=True of type bool, but it must be an int"),
    # Before: a bare TypeError of int(None).
    (_set("epoch", None), TypeError, r"epoch=None of type NoneType, but it must be an int"),
    # Before: the run went on from epoch 0.
    (_drop("epoch"), ValueError, r"lacks the key 'epoch' that ExactResume.state\(\) writes "
                                 r"\(it has 'batches', 'start_step'\)"),
    (_drop("start_step"), ValueError, r"lacks the key 'start_step'"),
    # In range, but not what 2 optimizer steps since the epoch began trained.
    (_set("batches", 1), ValueError, r"batches=1 .*global_step 10 means 2 optimizer steps"),
    (_set("start_step", 11), ValueError, r"start_step=11, but it must be an int in \[0, 10\]"),
    (_set("epoch", 0), ValueError, r"epoch=0 and start_step=8, but the first epoch begins "
                                   r"at global step 0"),
])
def test_exact_resume_refuses_a_damaged_state_naming_the_key_the_rule_and_the_fix(
        checkpoint, tmp_path, edit, error, match):
    with pytest.raises(error, match=match) as caught:
        resume_edited(checkpoint, tmp_path, edit)
    assert "resume from a checkpoint that a run with callbacks=[ExactResume()] wrote" in str(
        caught.value)


def test_exact_resume_refuses_a_state_that_is_not_a_dict(checkpoint, tmp_path):
    def edit(attributes, state):
        state["stateful_callbacks"]["ExactResume"] = [7]
    with pytest.raises(TypeError, match=r"holds 7 of type int as ExactResume's state, but it "
                                        r"must be a dict"):
        resume_edited(checkpoint, tmp_path, edit)


def test_exact_resume_refuses_a_checkpoint_saved_without_it_with_the_fix(tmp_path):
    # Before: the run restarted at epoch 0, training the first 10 batches again.
    out = tmp_path / "plain"
    train(out, STOP, save_steps=STOP, callbacks=[])
    with pytest.raises(ValueError, match=r"no state of its own in the checkpoint .*global "
                                         r"step 10.*trained without ExactResume.*start a "
                                         r"new run with callbacks=\[ExactResume\(\)\]"):
        train(tmp_path / "resumed", 3 * STEPS_PER_EPOCH, resume=out / f"checkpoint-{STOP}")


def test_exact_resume_refuses_another_gradient_accumulation_than_the_checkpoints(
        checkpoint, tmp_path):
    # 2 steps of 2 batches would be 4 batches of the epoch; the checkpoint says 2.
    with pytest.raises(ValueError, match=r"batches=2 .*2 optimizer steps.*3 to 4 batches "
                                         r"with gradient_accumulation_steps=2.*resume with "
                                         r"the gradient_accumulation_steps"):
        resume_edited(checkpoint, tmp_path, lambda attributes, state: None, accumulation=2)


class Trained(TrainerCallback):
    """Counts the batches trained."""

    def __init__(self):
        self.batches = 0

    def on_substep_end(self, args, state, control, **kwargs):
        self.batches += 1

    def on_step_end(self, args, state, control, **kwargs):
        self.batches += 1


def test_exact_resume_refuses_a_count_past_the_epochs_end_when_the_epoch_is_read(
        checkpoint, tmp_path):
    # Consistent with the global step (10 batches in 10 steps since step 0), but the
    # epoch has 8 batches: the skip passed its end. Before: the resumed run trained
    # nothing and stopped with a warning.
    def edit(attributes, state):
        attributes.update(batches=STOP, start_step=0)

    counted = Trained()
    with pytest.raises(ValueError, match=r"batches=10 .*but epoch 1 has no more than 10 "
                                         r"batches.*another data set, batch size"):
        resume_edited(checkpoint, tmp_path, edit, callbacks=[ExactResume(), counted])
    assert counted.batches == 0
