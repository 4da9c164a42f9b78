"""One trial: evaluation grid, stopping rules and what the record holds."""

import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from dataecho.experiments.conditions import Condition
from dataecho.experiments.search import HParams
from dataecho.experiments.trial import Trial, train
from dataecho.experiments.workloads import WORKLOADS

pytestmark = pytest.mark.torch

DIGITS = WORKLOADS["digits"]
GOOD = HParams(0.1, 0.1)


def _run(variant="baseline", factor=1, buffer=None, hp=GOOD, mode="target", prune_at=None):
    cond = Condition.default("digits", variant, factor, 32, buffer)
    return train(DIGITS, Trial(cond, hp, 0, mode), prune_at=prune_at)


def test_evaluations_fall_once_per_grid_interval_even_when_a_shuffle_buffer_reads_ahead():
    # A 50-batch window reads 800 fresh examples before the first step: two grid points.
    record = _run("before_augmentation", 2, buffer=50, mode="budget")
    grid = DIGITS.budget(32) / DIGITS.evals
    indices = [math.floor(f / grid) for f in record["curve"]["fresh"]]
    assert record["curve"]["fresh"][0] == 0
    assert indices == sorted(set(indices))
    assert record["fresh"] >= DIGITS.budget(32)


def test_a_target_trial_stops_at_the_first_evaluation_reaching_the_target():
    record = _run()
    assert record["status"] == "reached"
    assert record["curve"]["metric"][-1] >= DIGITS.target > max(record["curve"]["metric"][:-1])
    assert record["crossing"]["first"] == record["curve"]["fresh"][-1]


def test_a_trial_past_the_best_crossing_of_its_search_is_pruned_there():
    record = _run(hp=HParams(0.01, 0.3), prune_at=1000.0)
    assert record["status"] == "pruned" and record["crossing"] is None
    assert 1000 <= record["fresh"] < 1000 + DIGITS.budget(32) / DIGITS.evals + 32


def test_an_exploding_learning_rate_is_recorded_as_diverged_not_as_a_miss():
    record = _run(hp=HParams(1e4, 0.01))
    assert record["status"] == "diverged" and record["steps"] < 50


def test_the_record_carries_config_pipeline_version_and_timings():
    record = _run("batch", 2)
    assert record["config"]["workload"]["name"] == "digits"
    assert record["config"]["fresh_budget"] == DIGITS.budget(32)
    assert record["pipeline"].startswith("Echo(Batch(")
    assert record["version"] and record["cpu_seconds"] > 0 and record["steps_per_second"] > 0


def test_a_trial_depends_on_its_seed_only_and_leaves_the_global_torch_rng_alone():
    import torch

    trial = Trial(Condition.default("digits", "baseline", 1, 32), HParams(0.1, 0.1), 4)
    curves = []
    for outer in (0, 99):
        torch.manual_seed(outer)
        state = torch.get_rng_state()
        curves.append(train(WORKLOADS["digits"], trial)["curve"]["loss"][1:])
        assert torch.equal(torch.get_rng_state(), state)
    assert curves[0] == curves[1]


def test_stopping_and_the_stored_curve_agree_for_a_value_within_rounding_of_the_target():
    import dataclasses

    class Near(type(DIGITS)):
        def evaluate(self, model, data):
            return self.target - 4e-7  # stored as the target itself (6 decimals)

    near = Near(**{f.name: getattr(DIGITS, f.name) for f in dataclasses.fields(DIGITS)})
    cond = Condition.default("digits", "baseline", 1, 32)
    record = train(near, Trial(cond, GOOD, 0, "target"))
    assert record["curve"]["metric"][0] == DIGITS.target
    # It stops at the first evaluation after the start (the one at the start never
    # stops a trial), instead of training to the budget past a stored crossing.
    assert record["status"] == "reached" and len(record["curve"]["metric"]) == 2
