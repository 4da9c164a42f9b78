"""The wall-clock benchmark's grid: a rerun skips finished runs, baselines are shared."""

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

from dataecho.demo.grid import BASELINE, Spec, Store, plan, run_grid
from dataecho.demo.gridreport import summary, with_speedups

VARIANTS = ["before_augmentation", "after_augmentation", "batch"]


def numbers(spec):
    """What a run returns, made up: echoing at factor e is e times faster, to the point."""
    e = 2.5 if spec.factor == "auto" else float(spec.factor)
    return {"reached": True, "time_to_target": 60.0 / e, "fresh_to_target": int(6400 / e),
            "steps": 500, "realised_factor": e, "stall_fraction": 0.5, "final_accuracy": 0.9,
            "ratio_seen": spec.ratio * 0.9, "target": 0.85, "device_note": "device: fake",
            "versions": {"platform": "test", "torch": "none"}}


class Recorder:
    """A run function that records what it ran and can be interrupted after ``stop`` runs."""

    def __init__(self, stop=None):
        self.ran, self.stop = [], stop

    def __call__(self, spec):
        if self.stop is not None and len(self.ran) == self.stop:
            raise KeyboardInterrupt
        self.ran.append(spec.key())
        return numbers(spec)


def test_the_plan_has_one_shared_baseline_per_ratio_and_seed_and_no_duplicate_factors():
    specs = plan([2, 6], ["2", "4", "R", "auto"], VARIANTS, [0, 1], preset="quick", budget=None)
    baselines = [(s.ratio, s.seed) for s in specs if s.variant == BASELINE]
    assert baselines == [(2.0, 0), (6.0, 0), (2.0, 1), (6.0, 1)]  # seeds outermost
    # R = 2 resolves to 2, already listed: 3 factors at R = 2, 4 at R = 6, per variant.
    assert len(specs) == 4 + 2 * 3 * 3 + 2 * 3 * 4
    assert len({s.key() for s in specs}) == len(specs)


def test_a_rerun_skips_finished_runs_and_continues_where_it_stopped(tmp_path):
    store = Store(tmp_path / "grid.jsonl")
    specs = plan([4], ["2", "auto"], VARIANTS, [0, 1], preset="quick", budget=None)
    first = Recorder(stop=5)
    with pytest.raises(KeyboardInterrupt):
        run_grid(specs, store, first, log=lambda line: None)
    assert store.done() == set(first.ran) and len(first.ran) == 5
    lines = []
    second = Recorder()
    assert run_grid(specs, store, second, log=lines.append) == len(specs) - 5
    assert not set(second.ran) & set(first.ran)
    assert first.ran + second.ran == [s.key() for s in specs]
    assert lines[0].endswith(f"5 of {len(specs)} runs already in {store.path}; 9 to run")
    assert lines[1].strip().startswith(f"[6/{len(specs)}] R=4 seed=0") and "ETA" in lines[1]
    third = Recorder()
    assert run_grid(specs, store, third, log=lambda line: None) == 0 and third.ran == []


def test_a_line_cut_short_by_a_crash_is_skipped_and_the_next_append_starts_a_new_line(tmp_path):
    store = Store(tmp_path / "grid.jsonl")
    spec = Spec(2.0, 2.0, "batch", 0, "quick", None)
    store.append({"kind": "run", "key": spec.key(), **numbers(spec)})
    with store.path.open("a") as handle:
        handle.write('{"kind": "run", "key": "cut')
    assert store.done() == {spec.key()}
    store.append({"kind": "run", "key": "next"})
    assert store.done() == {spec.key(), "next"}


def test_speedups_come_from_the_same_ratio_and_seed_baseline_with_spread_over_seeds():
    specs = plan([4], ["2"], ["batch"], [0, 1], preset="quick", budget=None)
    runs = [{**numbers(s), **dataclasses.asdict(s), "key": s.key()} for s in specs]
    runs[3]["time_to_target"] = 20.0  # seed 1's batch run: 3x faster than its baseline
    rows = {(r["seed"], r["variant"]): r for r in with_speedups(runs)}
    assert rows[0, "batch"]["speedup"] == 2.0 and rows[1, "batch"]["speedup"] == 3.0
    assert rows[0, "batch"]["fresh_ratio"] == 0.5
    (batch,) = [g for g in summary(runs) if g["variant"] == "batch"]
    assert (batch["trials"], batch["reached"], batch["speedup_mean"], batch["speedup_min"],
            batch["speedup_max"], batch["speedup_n"]) == (2, 2, 2.5, 2.0, 3.0, 2)


def test_a_run_that_missed_or_whose_baseline_missed_gets_no_speedup():
    specs = plan([4], ["2"], ["batch"], [0], preset="quick", budget=None)
    runs = [{**numbers(s), **dataclasses.asdict(s), "key": s.key()} for s in specs]
    runs[1] |= {"reached": False, "time_to_target": None, "fresh_to_target": None}
    (batch,) = [g for g in summary(runs) if g["variant"] == "batch"]
    assert (batch["reached"], batch["speedup_mean"], batch["speedup_n"]) == (0, None, 0)


def load_wallclock():
    pytest.importorskip("torch")
    path = Path(__file__).parent.parent / "benchmarks" / "wallclock.py"
    spec = importlib.util.spec_from_file_location("wallclock", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.torch
def test_the_benchmark_command_resumes_and_replots_from_its_store(tmp_path, monkeypatch,
                                                                   capsys):
    wallclock = load_wallclock()
    ran, interrupt = [], [3]  # Ctrl-C at the fourth run of the first invocation

    class FakeBench:  # the real one starts a server and trains; this one makes numbers up
        def __init__(self, cfg, store):
            self.cfg = cfg

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def __call__(self, spec):
            if interrupt and len(ran) == interrupt[0]:
                interrupt.clear()
                raise KeyboardInterrupt
            ran.append(spec.key())
            return numbers(spec)

    monkeypatch.setattr(wallclock, "Bench", FakeBench)
    plot = wallclock.plot
    monkeypatch.setattr(wallclock, "plot", lambda groups, path: None)  # faster; replot draws
    argv = ["--ratios", "6", "--factors", "2", "R", "auto", "--seeds", "0",
            "--preset", "quick", "--tag", "t", "--out", str(tmp_path)]
    assert wallclock.main(argv) == 130  # Ctrl-C: what ran is stored
    assert wallclock.main(argv) == 0
    assert len(ran) == len(set(ran)) == 1 + 3 * 3  # baseline + 3 variants x (2, 6, auto)
    assert "3 of 10 runs already in" in capsys.readouterr().out
    table = (tmp_path / "wallclock-t.md").read_text()
    assert "| 6 | 5.40 | batch | 6 | 6.00 | 1/1 | 6.00x (6.00-6.00, n=1) |" in table
    saved = json.loads((tmp_path / "wallclock-t.json").read_text())
    assert len(saved["runs"]) == 10 and saved["trials"] == 1
    (tmp_path / "wallclock-t.md").unlink()
    monkeypatch.setattr(wallclock, "plot", plot)
    assert wallclock.main(["--replot", "--tag", "t", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "wallclock-t.md").read_text() == table
    assert (tmp_path / "wallclock-t.png").read_bytes()[:4] == b"\x89PNG"
    assert len(ran) == 10  # the replot ran nothing


@pytest.mark.torch
def test_a_one_file_result_from_before_the_store_is_converted(tmp_path):
    wallclock = load_wallclock()
    row = {"ratio_set": 6.0, "seed": 0, "name": "baseline", "train_s": 10.0, "wait_s": 8.0,
           **numbers(Spec(6.0, 1.0, BASELINE, 0, "quick", 150.0))}
    legacy = {"config": {"preset": "quick", "budget_s": 150.0}, "device": "cpu",
              "device_note": "cpu", "t_down_s": 0.04, "target": 0.85,
              "versions": {"platform": "test", "torch": "none"},
              "rows": [{**row, "factor": 1.0},
                       {**row, "factor": 4.0, "name": "e=4.0", "time_to_target": 20.0}]}
    (tmp_path / "wallclock-old.json").write_text(json.dumps(legacy))
    assert wallclock.main(["--replot", "--tag", "old", "--out", str(tmp_path)]) == 0
    runs = Store(tmp_path / "wallclock-old.jsonl").runs()
    assert [(r["variant"], r["factor"], r["ratio_seen"]) for r in runs] == [
        (BASELINE, 1.0, 5.0), ("before_augmentation", 4.0, 5.0)]
    assert with_speedups(runs)[1]["speedup"] == 3.0
