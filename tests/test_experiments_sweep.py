"""Resumable sweeps: an interrupted sweep continues and ends with the same store.

The sweep logic is tested with a stand-in for training (instant and deterministic, with
a crossing that depends on the learning rate), so pruning points are exercised too;
one test checks that real training is deterministic, which resuming relies on.
"""

import json
import time

import pytest

pytest.importorskip("torch")

from dataecho.experiments import sweep
from dataecho.experiments.conditions import Condition
from dataecho.experiments.protocol import Plan
from dataecho.experiments.record import comparable, trial_key
from dataecho.experiments.search import HParams
from dataecho.experiments.store import Store
from dataecho.experiments.text import hms
from dataecho.experiments.trial import Trial, train
from dataecho.experiments.workloads import WORKLOADS

pytestmark = pytest.mark.torch

BASE = Condition.default("digits", "baseline", 1, 32)
PLAN = Plan("digits", "test", (0, 1), 5, (BASE, Condition.default("digits", "batch", 2, 32)),
            no_harm=(BASE,))
TRIALS = 2 * 2 * 5 + 2  # conditions x seeds x trials, plus a no-harm trial per seed


def fake_train(workload, trial, *, prune_at=None, log=None):
    crossing = round(100.0 / trial.hparams.lr * trial.condition.factor ** -0.5, 3)
    pruned = trial.mode == "target" and prune_at is not None and crossing > prune_at
    return {"kind": "trial", "key": trial_key(workload, trial), "workload": workload.name,
            "condition": trial.condition.as_dict(), "hparams": trial.hparams.as_dict(),
            "seed": trial.seed, "mode": trial.mode, "index": trial.index,
            "status": "pruned" if pruned else "reached", "prune_at": prune_at,
            "crossing": None if pruned else {"interpolated": crossing, "first": crossing},
            "best_metric": 0.9, "seconds": time.perf_counter(),
            "cpu_seconds": 2.0 * trial.condition.factor}


@pytest.fixture(autouse=True)
def instant_training(monkeypatch):
    monkeypatch.setattr(sweep, "train", fake_train)


def _records(path):
    return [comparable(r) for r in Store(path)]


def _run(path, limit=None):
    return sweep.run([PLAN], path, limit=limit, echo=lambda _: None)


def test_a_sweep_runs_every_search_trial_and_the_no_harm_trials(tmp_path):
    path = tmp_path / "results.jsonl"
    assert _run(path) == TRIALS
    trials = [r for r in Store(path) if r["kind"] == "trial"]
    assert len(trials) == TRIALS
    assert sum(r["status"] == "pruned" for r in trials) > 0
    no_harm = [r for r in trials if r["mode"] == "budget"]
    best = min((r for r in trials if r["crossing"] and r["seed"] == 0
                and r["condition"]["variant"] == "baseline"),
               key=lambda r: r["crossing"]["interpolated"])
    assert [r["hparams"] for r in no_harm if r["seed"] == 0] == [best["hparams"]]


@pytest.mark.parametrize("first", [1, 3, 7, 11])
def test_resuming_an_interrupted_sweep_skips_finished_trials_and_gives_the_same_store(
        tmp_path, first):
    full, resumed = tmp_path / "full.jsonl", tmp_path / "resumed.jsonl"
    _run(full)
    assert _run(resumed, limit=first) == first  # the "crash"
    assert _run(resumed, limit=2) == 2
    assert _run(resumed) == TRIALS - first - 2
    assert _records(resumed) == _records(full)


def test_rerunning_a_finished_sweep_runs_nothing_and_leaves_the_store_untouched(tmp_path):
    path = tmp_path / "results.jsonl"
    _run(path)
    before = path.read_bytes()
    assert _run(path) == 0
    assert path.read_bytes() == before


def test_a_line_cut_short_by_a_crash_is_skipped_and_its_trial_runs_again(tmp_path):
    full, cut = tmp_path / "full.jsonl", tmp_path / "cut.jsonl"
    _run(full)
    lines = full.read_text().splitlines(keepends=True)
    cut.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    assert _run(cut) == 1
    assert _records(cut) == _records(full)


def test_real_training_is_deterministic_so_resumed_trials_match_uninterrupted_ones():
    pytest.importorskip("sklearn")
    trial = Trial(Condition.default("digits", "before_augmentation", 2, 32),
                  HParams(0.1, 0.1), 0)
    first, second = (train(WORKLOADS["digits"], trial) for _ in range(2))
    # NaN (the loss before the first step) is not equal to itself: compare as JSON.
    assert json.dumps(comparable(first)) == json.dumps(comparable(second))


def test_a_limit_with_parallel_processes_is_refused_rather_than_ignored(tmp_path):
    with pytest.raises(ValueError, match="limit=3 needs jobs=1"):
        sweep.run([PLAN], tmp_path / "s.jsonl", jobs=2, limit=3, echo=lambda _: None)
    assert not (tmp_path / "s.jsonl").exists()


def test_the_eta_counts_only_the_missing_trials_at_the_stores_measured_times(tmp_path):
    path = tmp_path / "s.jsonl"
    _run(path, limit=3)  # three baseline trials of seed 0, 2 CPU-s each
    have = Store(path).index()
    assert sweep.seconds_per_trial(have) == {("digits", "baseline", 1.0, 32): 2.0}
    seed0, seed1, batch0, _ = sweep.units_of([PLAN])
    assert seed0.cost(have, 2.0) == (2 + 3) * 2.0  # two trials and the no-harm trial
    assert seed1.cost(have, 2.0) == (5 + 3) * 2.0
    assert seed1.cost(None, 2.0) == seed1.cost({}, 2.0) == 16.0
    modelled = 5 * WORKLOADS["digits"].trial_seconds * 2 ** 0.8  # batch e=2: not measured
    assert batch0.cost(have) == pytest.approx(modelled)
    lines: list[str] = []
    sweep.run([PLAN], path, echo=lines.append)
    left = 10.0 + 16.0 + 2 * modelled
    assert (f"running 4 with 1 process(es); about {hms(left)} of work left at the "
            f"store's measured trial times (2 of 4 searches measured") in lines[0]
    assert lines[0].endswith("the others modelled)")
    assert f"{10.0 / left:.0%} done" in lines[1]  # the measured cost of what ran
    after = Store(path).index()
    assert all(u.cost(after) == 0.0 for u in sweep.units_of([PLAN]))
