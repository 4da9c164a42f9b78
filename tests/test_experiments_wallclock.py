"""Finding 2 from the wall-clock benchmark: loading its summary and judging the claim."""

import json

import pytest

from dataecho.experiments.findings import f2_time
from dataecho.experiments.wallclock import load


def runs(speedups, *, ratio=6.0, variant="before_augmentation", factor=4.0, missed=()):
    """Wall-clock run records as benchmarks/wallclock.py writes them (with baselines)."""
    out = []
    for seed, s in enumerate(speedups):
        out.append({"ratio": ratio, "seed": seed, "variant": "none", "factor": 1.0,
                    "reached": True, "ratio_measured": ratio, "speedup_interpolated": 1.0})
        reached = seed not in missed
        out.append({"ratio": ratio, "seed": seed, "variant": variant, "factor": factor,
                    "reached": reached, "ratio_measured": ratio,
                    "speedup_interpolated": s if reached else None, "speedup": s})
    return out


def write(tmp_path, records):
    path = tmp_path / "wallclock-t.json"
    path.write_text(json.dumps({"summary": [], "runs": records}))
    return path


def test_load_groups_runs_by_ratio_variant_and_factor_without_baselines(tmp_path):
    path = write(tmp_path, runs([2.0, 3.0, 4.0]) + runs([1.5, 1.6, 1.7], factor="auto")
                 + runs([1.1, 1.2, 1.3], ratio=2.0, variant="batch", factor=2.0))
    cells = {(c.ratio, c.label()): c for c in load(path)}
    assert set(cells) == {(6.0, "before e=4"), (6.0, "before e=auto"), (2.0, "batch e=2")}
    before = cells[6.0, "before e=4"].speedup
    assert (before.median, before.min, before.max, before.n) == (3.0, 2.0, 4.0, 3)


def test_a_run_that_missed_the_target_counts_as_no_speedup_and_stays_in_n(tmp_path):
    (cell,) = load(write(tmp_path, runs([2.0, 3.0, 4.0], missed=(2,))))
    assert cell.missed == 1
    assert (cell.speedup.n, cell.speedup.min, cell.speedup.median) == (3, 0.0, 2.0)


def test_load_rejects_a_file_that_is_not_a_summary(tmp_path):
    path = tmp_path / "wallclock-t.jsonl"
    path.write_text('{"kind": "run"}\n')
    with pytest.raises(ValueError, match="no 'runs' list"):
        load(path)


def test_finding_2_holds_only_when_every_seed_gains(tmp_path):
    gains = load(write(tmp_path, runs([2.5, 3.0, 3.8]) + runs([1.1, 1.2, 1.4], ratio=2.0)))
    finding = f2_time({}, {}, gains, "w.json")
    assert finding.verdict == "held"
    assert "R = 6" in finding.measured and "before e=4 3.00x [2.50, 3.80] (n=3)" in finding.measured
    mixed = load(write(tmp_path, runs([0.9, 1.2, 1.4])))
    assert f2_time({}, {}, mixed, "w.json").verdict == "partly"
    losses = load(write(tmp_path, runs([0.7, 0.8, 0.9])))
    assert f2_time({}, {}, losses, "w.json").verdict == "not held"


def test_finding_2_without_a_wall_clock_file_is_inconclusive_and_says_how_to_measure():
    finding = f2_time({}, {}, None)
    assert finding.verdict == "inconclusive"
    assert "benchmarks/wallclock.py" in finding.measured


def test_adaptive_echoing_is_shown_but_does_not_decide_finding_2(tmp_path):
    # Adaptive echoing is ours, not the paper's: only fixed factors decide the verdict.
    cells = load(write(tmp_path, runs([0.9, 1.2, 1.4], factor=2.0)
                       + runs([1.5, 1.6, 1.7], factor="auto")))
    finding = f2_time({}, {}, cells, "w.json")
    assert finding.verdict == "partly"
    assert "before e=auto 1.60x" in finding.measured
