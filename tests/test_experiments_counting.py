"""The fresh-example count of every trial pipeline equals the items read from the source."""

import itertools

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from dataecho.experiments.conditions import Condition
from dataecho.experiments.search import HParams
from dataecho.experiments.trial import Counted, Trial, build_pipeline, train
from dataecho.experiments.workloads import WORKLOADS

pytestmark = pytest.mark.torch

DIGITS = WORKLOADS["digits"]

CASES = [
    ("baseline", 1, 32, None), ("before_augmentation", 2, 32, None),
    ("after_augmentation", 3, 16, None), ("batch", 2, 32, None), ("batch", 4, 8, 10),
    ("before_augmentation", 8, 64, 0), ("after_augmentation", 2, 50, 50),
    ("before_augmentation", 2, 32, 1),
]


@pytest.mark.parametrize(("variant", "factor", "batch_size", "buffer"), CASES)
@pytest.mark.parametrize("steps", [1, 7, 100])
def test_fresh_examples_equal_reads_of_the_source_after_any_number_of_steps(
        variant, factor, batch_size, buffer, steps):
    cond = Condition.default("digits", variant, factor, batch_size, buffer)
    data = Counted(DIGITS.data().train)
    stage = build_pipeline(DIGITS, cond, 3, data)
    for _ in itertools.islice(stage, steps):
        assert stage.stats().fresh_examples == data.reads
    assert data.reads > 0


def test_a_trial_records_the_same_fresh_count_as_its_source_counter():
    cond = Condition.default("digits", "before_augmentation", 2, 32)
    record = train(DIGITS, Trial(cond, HParams(0.1, 0.1), 0))
    assert record["reads"] == record["fresh"] > 0
    assert record["emitted"] >= record["fresh"]
    assert record["curve"]["fresh"][0] == 0
    assert "Echo(" in record["pipeline"] and "CropFlip" in record["pipeline"]
