"""The wall-clock benchmark's grid: a rerun skips finished runs, baselines are shared."""

import dataclasses
import importlib.util
import json
import re
from pathlib import Path

import pytest

from dataecho.demo.grid import BASELINE, Spec, finished, plan, run_grid, run_records
from dataecho.demo.gridreport import markdown, summary, with_speedups
from dataecho.experiments.store import Store

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
    assert finished(store) == set(first.ran) and len(first.ran) == 5
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
    assert finished(store) == {spec.key()}
    store.append({"kind": "run", "key": "next"})
    assert finished(store) == {spec.key(), "next"}


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



def test_the_report_has_a_section_with_its_own_runs_per_preset():
    specs = [s for preset in ("quick", "smoke")
             for s in plan([4], ["2"], ["batch"], [0], preset=preset, budget=None)]
    runs = [{**numbers(s), **dataclasses.asdict(s), "key": s.key()} for s in specs]
    text = markdown(runs, [], "test")
    quick, smoke = text.split("## quick preset")[1].split("## smoke preset")
    for section in (quick, smoke):
        every = section.split("Every run:")[1]
        assert every.count("| 4 | 0 | ") == 2  # the baseline and the batch run, once each


ROOT = Path(__file__).parent.parent


def test_a_missed_run_is_reported_with_its_best_accuracy_not_its_last():
    # The only missed run of the committed full grid: its curve peaked, then fell back.
    curve = [0.877, 0.8795, 0.877, 0.872, 0.874, 0.8745, 0.8725]
    specs = plan([4], ["2"], ["batch"], [0], preset="quick", budget=None)
    runs = [{**numbers(s), **dataclasses.asdict(s), "key": s.key()} for s in specs]
    runs[1] |= {"reached": False, "time_to_target": None, "fresh_to_target": None,
                "final_accuracy": 0.8725,
                "points": [{"seconds": 10.0 * k, "accuracy": a} for k, a in enumerate(curve)]}
    # A record from before best_accuracy was stored: the best comes from its points.
    assert with_speedups(runs)[1]["best_accuracy"] == 0.8795
    assert "| no (best 87.95%) |" in markdown(runs, [], "test")  # not 87.2%, nor 88.0%
    runs[1] |= {"best_accuracy": 0.8795, "points": []}  # a new record: as stored
    assert "| no (best 87.95%) |" in markdown(runs, [], "test")


def test_the_committed_full_grid_reports_the_best_accuracy_of_its_missed_run():
    store = Store(ROOT / "benchmarks" / "results" / "wallclock-full.jsonl")
    if not store.path.exists():
        pytest.skip("no committed full grid")
    runs = run_records(store)
    (missed,) = [r for r in with_speedups(runs) if not r["reached"]]
    assert (missed["ratio"], missed["variant"], missed["factor"], missed["seed"]) == (
        2.0, "after_augmentation", 4.0, 2)
    assert (missed["final_accuracy"], missed["best_accuracy"]) == (0.8725, 0.8795)
    assert "| no (best 87.95%) |" in markdown(runs, [], "test")
    assert "| no (best 87.95%) |" in store.path.with_suffix(".md").read_text()  # replotted


NO_TORCH = """
import importlib.util, sys
sys.modules["torch"] = None  # any import of torch now raises ImportError
import dataecho.demo.gridreport
import dataecho.demo.report
spec = importlib.util.spec_from_file_location("wallclock", sys.argv[1])
wallclock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wallclock)
wallclock.plot = lambda groups, path: None  # faster; matplotlib needs no torch either
assert wallclock.main(["--replot", "--tag", "t", "--out", sys.argv[2]]) == 0
"""


def test_the_grid_report_and_its_replot_need_no_torch(tmp_path):
    import subprocess
    import sys

    spec = Spec(6.0, 2.0, "batch", 0, "quick", None)
    base = Spec(6.0, 1.0, BASELINE, 0, "quick", None)
    store = Store(tmp_path / "wallclock-t.jsonl")
    for s in (base, spec):
        store.append({**numbers(s), **dataclasses.asdict(s), "kind": "run", "key": s.key()})
    done = subprocess.run([sys.executable, "-c", NO_TORCH, str(ROOT / "benchmarks" /
                           "wallclock.py"), str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "wallclock-t.md").read_text()
    assert "| 6 | 5.40 | batch | 2 | 2.00 | 1/1 | 2.00x (2.00-2.00, n=1) |" in table


NO_TORCH_MODULES = """
import sys
sys.modules["torch"] = None  # any import of torch now raises ImportError
import dataecho.experiments as experiments
from dataecho.experiments import analysis, crossing, findings, report, store, text, verdict
assert not hasattr(experiments, "__getattr__")  # no lazy loader: the package imports nothing
"""


def test_the_experiment_store_analysis_and_report_modules_import_without_torch():
    import subprocess
    import sys

    pytest.importorskip("matplotlib", reason="the report draws figures with matplotlib")

    done = subprocess.run([sys.executable, "-c", NO_TORCH_MODULES], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


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
    runs = run_records(Store(tmp_path / "wallclock-old.jsonl"))
    assert [(r["variant"], r["factor"], r["ratio_seen"]) for r in runs] == [
        (BASELINE, 1.0, 5.0), ("before_augmentation", 4.0, 5.0)]
    assert with_speedups(runs)[1]["speedup"] == 3.0


def refuse_to_start(monkeypatch, wallclock):
    """Makes any data preparation or run fail the test: the flags must be checked first."""
    class NoBench:
        def __init__(self, cfg, store):
            pytest.fail("the grid started before the flags were checked")

    monkeypatch.setattr(wallclock, "Bench", NoBench)
    monkeypatch.setattr(wallclock, "prepare", lambda *a, **k: pytest.fail("data prepared"))


@pytest.mark.torch
@pytest.mark.parametrize("argv, message", [
    (["--ratios", "0"], r"--ratios must be finite numbers >= 1 .* got 0; pass e\.g\. "
                        r"--ratios 6 4 2"),
    (["--ratios", "-1"], r"--ratios must be finite numbers >= 1 .* got -1"),
    (["--ratios", "inf"], r"--ratios must be finite numbers >= 1 .* got inf"),
    (["--factors", "x"], r"--factors must each be a finite number >= 1 .* got 'x'; pass e\.g\. "
                         r"--factors 2 4 R auto"),
    (["--factors", "2", "inf"], r"--factors must each be .* got 'inf'"),
    (["--factors", "nan"], r"--factors must each be .* got 'nan'"),
    (["--budget", "-5"], r"--budget must be a finite number of seconds > 0, got -5; pass"),
    (["--budget", "0"], r"--budget must be a finite number of seconds > 0, got 0; pass"),
    (["--seeds", "0", "-1"], r"--seeds must be ints in \[0, 2\*\*63\), got -1; pass"),
])
def test_bad_benchmark_flags_exit_with_status_2_naming_the_flag_before_anything_runs(
        argv, message, tmp_path, monkeypatch, capsys):
    wallclock = load_wallclock()
    refuse_to_start(monkeypatch, wallclock)
    with pytest.raises(SystemExit) as exit:
        wallclock.main([*argv, "--tag", "t", "--out", str(tmp_path)])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # no store was written


@pytest.mark.torch
def test_a_store_of_another_device_is_refused_not_reused(tmp_path, monkeypatch, capsys):
    torch = pytest.importorskip("torch")

    wallclock = load_wallclock()
    refuse_to_start(monkeypatch, wallclock)
    spec = Spec(6.0, 1.0, BASELINE, 0, "quick", None)
    Store(tmp_path / "wallclock-t.jsonl").append(
        {**numbers(spec), **dataclasses.asdict(spec), "kind": "run", "key": spec.key(),
         "device": "cpu"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    argv = ["--ratios", "6", "--factors", "2", "--seeds", "0", "--preset", "quick",
            "--tag", "t", "--out", str(tmp_path)]
    for device in ("cuda", "auto"):  # auto trains on the GPU where there is one
        with pytest.raises(SystemExit) as exit:
            wallclock.main([*argv, "--device", device])
        assert exit.value.code == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"--device {device} trains on cuda, but" in err
        assert "(--tag 't') holds runs trained on cpu" in err
        assert "pass --device cpu to continue that grid, or --tag t-cuda" in err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit:
        wallclock.main([*argv, "--device", "cuda"])
    assert exit.value.code == 2
    assert "--device cuda needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.torch
def test_the_committed_full_store_is_found_whole_on_the_cpu_and_refused_on_a_gpu():
    # The key has no device; the stored CPU grid must still match the default grid's keys
    # (R rounded half up is R for whole R) and must not pass for a GPU grid.
    wallclock = load_wallclock()
    store = Store(wallclock.RESULTS / "wallclock-full.jsonl")
    if not store.path.exists():
        pytest.skip("no committed full grid")
    specs = plan([6.0, 4.0, 2.0], ["2", "4", "R", "auto"], VARIANTS, [0, 1, 2],
                 preset="default", budget=None)
    assert {s.key() for s in specs} <= finished(store)
    wallclock.check_store_device(store, "cpu", "auto", "full")
    with pytest.raises(ValueError, match=r"--device cuda trains on cuda.*--tag full-cuda"):
        wallclock.check_store_device(store, "cuda", "cuda", "full")


@pytest.mark.torch
def test_a_store_of_one_max_factor_refuses_adaptive_runs_of_another(tmp_path, capsys):
    wallclock = load_wallclock()
    store = Store(wallclock.RESULTS / "wallclock-window.jsonl")
    if not store.path.exists():
        pytest.skip("no committed window grid")
    wallclock.check_store_max_factor(store, 4, "window")  # the grid's own cap
    with pytest.raises(ValueError, match=r"max_factor 4.*--max-factor 4.*new --tag"):
        wallclock.check_store_max_factor(store, 8, "window")
    with pytest.raises(SystemExit) as exit:
        wallclock.main(["--preset", "smoke", "--max-factor", "0", "--out", str(tmp_path)])
    assert exit.value.code == 2
    assert "--max-factor must be an int >= 1" in capsys.readouterr().err


def test_the_demo_passes_max_factor_to_its_adaptive_arms():
    from dataecho.demo.config import DemoConfig, check_config, parse_args

    assert parse_args(["--max-factor", "8"]).max_factor == 8
    with pytest.raises(ValueError, match="--max-factor must be an int >= 1"):
        check_config(DemoConfig(max_factor=0))
