"""Adaptive echoing with real threads: does the realised factor track R without stalls?

Usage: python benchmarks/adaptive.py [--trials 3] [--steps 300] [--step-ms 10]
                                     [--base 1dc233e [--this HEAD]]
                                     [--baseline OTHER/results/adaptive.json]

The upstream sleeps ``t_up = R * t_down`` per batch (read by AdaptiveEcho's prefetch
thread), the consumer sleeps ``t_down`` per step. For each R, in the same process:
the consumer alone on a cached batch (the downstream-bound rate), no echo (the same
prefetch thread, max_factor=1), a fixed factor ``e = min(R, max_factor)`` (Echo after
that thread) and adaptive echoing (AdaptiveEcho, default max_factor; with the default
4-batch echo buffer and with buffer_size=1; also max_factor=8 where R exceeds the
default). A drift run changes R from 2 to 4 to 1.5 mid-run,
against the fixed factor chosen for R = 2.
Targets (issue 3), for R <= max_factor: stall < 5%, realised factor within 15% of R,
steps/s within 5% of the downstream-bound rate; and the cost of one ``next()``: the
adaptive median within 2x of the fixed factor's at every R, as the median over trials
of the ratio of each trial's two runs, made back to back (a median of microseconds
after a sleep moves by 2-3x between runs minutes apart). Where neither stage waits
(R <= the fixed factor), a paired run also steps the two stages in turn, each every
``t_down``, so both see the same machine moment (where the fixed factor waits, its
waits would hand the adaptive stage fresh items it would not have had).
The machine's load average is recorded before and after. ``--base REV`` compares
against a commit in the same run: its ``dataecho/`` (``git archive``) and this checkout's
(or ``--this REV``'s) take turns, one child process per version and trial, base first
in even trials, so both see the same load from other jobs; the results are this
version's, with each per-step cost over the base's. ``--baseline`` takes instead the
JSON of another tree's run made just before (the script of that tree, its dataecho on
PYTHONPATH). Writes results/adaptive.json and .md; ``--only R=1 --only drift`` runs
those scenarios alone, and ``--tag T`` writes results/adaptive-T.* instead (a rerun).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dataecho
from dataecho import Echo
from dataecho.adaptive import DEFAULT_MAX_FACTOR, AdaptiveEcho
from dataecho.stage import Stage

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
HIGH = 8  # the top of the paper's useful range, for R above the default cap


@dataclass(frozen=True)
class Config:
    ratios: tuple[float, ...] = (1.0, 2.0, 4.0, 6.0)  # R = t_up / t_down
    step_ms: float = 10.0  # the consumer's step, t_down
    steps: int = 300  # steps timed per echo run
    baseline_steps: int = 100  # steps per no-echo run (its rate is steady and slow)
    trials: int = 5  # repeats of everything; checks use the median trial
    only: tuple[str, ...] = ()  # scenario name prefixes to run; () for all
    max_factor: int = DEFAULT_MAX_FACTOR  # adaptive cap, the library default


def upstream(period: Callable[[int], float]) -> Iterator[int]:
    k = 0
    while True:  # endless: runs are cut by steps
        time.sleep(period(k))
        yield k
        k += 1


def consume(stage: Any, steps: int, step_s: float) -> dict[str, float]:
    """Runs ``steps`` steps; times next() (blocked) and the whole loop (wall).

    ``next_us`` is the median time of one next() after the first (which waits for the
    first batch): the per-step cost of the stage where it does not wait. ``cpu_us`` is
    the training thread's CPU time inside next() per step, the mean over the steps
    after the first: the whole cost, decisions taken on one step for later ones
    included (a wait costs little CPU). Its window holds the two wall-clock reads, the
    same for every stage.
    """
    blocked, start, each, cpu = 0.0, time.perf_counter(), [], []
    for _ in range(steps):
        c = time.thread_time()
        t = time.perf_counter()
        next(stage)
        each.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
        blocked += each[-1]
        time.sleep(step_s)
    wall = time.perf_counter() - start
    s = stage.stats() if isinstance(stage, Stage) else None
    if isinstance(stage, Stage):
        stage.close()
    factor = s.emitted_items / s.fresh_items if s and s.fresh_items else 1.0
    return {"steps_per_s": steps / wall, "stall": blocked / wall, "factor": factor,
            "wall_s": wall, "next_us": statistics.median(each[1:] or each) * 1e6,
            "cpu_us": statistics.fmean(cpu[1:] or cpu) * 1e6}


def paired(stages: dict[str, Any], steps: int, step_s: float) -> dict[str, float]:
    """Median next() in µs of each stage, stepped in turn, each every ``step_s``."""
    each: dict[str, list[float]] = {name: [] for name in stages}
    for _ in range(steps):
        for name, stage in stages.items():
            t = time.perf_counter()
            next(stage)
            each[name].append(time.perf_counter() - t)
            time.sleep(step_s / len(stages))
    for stage in stages.values():
        stage.close()
    return {name: statistics.median(t[1:] or t) * 1e6 for name, t in each.items()}


def alone(cfg: Config) -> dict[str, float]:
    return consume(iter(lambda: 0, 1), cfg.steps, cfg.step_ms / 1e3)


def conditions(cfg: Config, ratio: float | Callable[[int], float]
               ) -> dict[str, tuple[Callable[[], Any], int]]:
    period = ratio if callable(ratio) else (lambda _k, r=ratio: r)
    t = cfg.step_ms / 1e3

    def up() -> Iterator[int]:
        return upstream(lambda k: period(k) * t)

    fixed = min(period(0), cfg.max_factor)
    runs = {
        "no echo": (lambda: AdaptiveEcho(up(), max_factor=1), cfg.baseline_steps),
        f"fixed e={fixed:g}": (lambda: Echo(AdaptiveEcho(up(), max_factor=1), fixed),
                               cfg.steps),
        "adaptive": (lambda: AdaptiveEcho(up(), max_factor=cfg.max_factor), cfg.steps),
        # The default buffer (4) draws each echo at random from the latest batches; 1
        # echoes the latest: the A/B behind the README's advice for steady loaders.
        "adaptive buffer_size=1": (
            lambda: AdaptiveEcho(up(), max_factor=cfg.max_factor, buffer_size=1), cfg.steps),
    }
    if not callable(ratio) and ratio > cfg.max_factor:  # R above the default cap
        runs[f"adaptive max_factor={HIGH}"] = (lambda: AdaptiveEcho(up(), max_factor=HIGH),
                                               cfg.steps)
    return runs


def drift(k: int) -> float:
    return 2.0 if k < 40 else 4.0 if k < 80 else 1.5  # R per upstream batch: 80, 160, 60+ steps


def summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        out[key] = {"mean": statistics.fmean(values), "median": statistics.median(values),
                    "min": min(values), "max": max(values)}
    out["trials"] = runs
    return out


def version() -> str:
    """The commit of the dataecho this process imported (an installed copy may be another
    checkout's than this script's), with "+dirty" for uncommitted changes to its code (a
    results file written by an earlier run is not one)."""
    root = Path(dataecho.__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True, cwd=root).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "dataecho", "benchmarks/*.py"],
                               capture_output=True, text=True, cwd=root)
        return rev + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def measure(cfg: Config) -> dict[str, Any]:
    """``cfg.trials`` trials of every scenario: the runs, the paired runs and the
    consumer-alone reference, as lists over trials (a child's job under ``--base``)."""
    scenarios: dict[str, float | Callable[[int], float]] = {f"R={r:g}": r for r in cfg.ratios}
    scenarios["drift R=2->4->1.5"] = drift
    if cfg.only:
        scenarios = {k: v for k, v in scenarios.items() if k.startswith(cfg.only)}
    raw: dict[str, dict[str, list[dict[str, float]]]] = {}
    pairs: dict[str, list[dict[str, float]]] = {}
    reference: list[dict[str, float]] = []
    for trial in range(cfg.trials):
        for name, ratio in scenarios.items():
            # Paired with each scenario: a shared machine's speed drifts over minutes.
            reference.append(alone(cfg))
            for cond, (make, steps) in conditions(cfg, ratio).items():
                result = consume(make(), steps, cfg.step_ms / 1e3)
                result["of_bound"] = result["steps_per_s"] / reference[-1]["steps_per_s"]
                raw.setdefault(name, {}).setdefault(cond, []).append(result)
                print(f"trial {trial} {name:18s} {cond:12s} {result['steps_per_s']:6.1f} "
                      f"steps/s, factor {result['factor']:.2f}, stall {result['stall']:.1%}",
                      file=sys.stderr)
            if callable(ratio) or ratio > cfg.max_factor:
                continue  # the fixed factor waits: no pair (see the module docstring)
            runs = conditions(cfg, ratio)
            fixed = next(cond for cond in runs if cond.startswith("fixed"))
            pair = paired({"fixed": runs[fixed][0](), "adaptive": runs["adaptive"][0]()},
                          cfg.steps, cfg.step_ms / 1e3)
            pairs.setdefault(name, []).append(pair)
            print(f"trial {trial} {name:18s} paired next(): fixed {pair['fixed']:.1f} µs, "
                  f"adaptive {pair['adaptive']:.1f} µs", file=sys.stderr)
    return {"raw": raw, "pairs": pairs, "reference": reference}


def report(cfg: Config, measured: dict[str, Any], code: str,
           load: dict[str, Any]) -> dict[str, Any]:
    """The results of ``measure``'s trials (or of several joined), as written out."""
    raw, pairs, reference = measured["raw"], measured["pairs"], measured["reference"]
    table = {name: {cond: summary(runs) for cond, runs in conds.items()}
             for name, conds in raw.items()}
    checks = {}
    for r in cfg.ratios:
        for cond, cap in (("adaptive", cfg.max_factor), (f"adaptive max_factor={HIGH}", HIGH)):
            if cond not in table.get(f"R={r:g}", {}):
                continue
            a = table[f"R={r:g}"][cond]
            checks[f"R={r:g} {cond}"] = {
                "applies": r <= cap,
                "stall_below_5pct": a["stall"]["median"] < 0.05,
                "factor_within_15pct_of_R": abs(a["factor"]["median"] - r) / r < 0.15,
                "throughput_within_5pct": a["of_bound"]["median"] >= 0.95,
            }
    costs = next_costs(table, pairs)
    for name, c in costs.items():
        checks[f"{name} next()"] = {"applies": True, "within_2x_of_fixed": c["ratio"] <= 2.0}
    return {"config": asdict(cfg), "code": code, "dataecho": dataecho.__version__,
            "machine": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "load_average": load,
            "next_us": costs,
            "pipeline": repr(AdaptiveEcho([], max_factor=cfg.max_factor)),
            "downstream_bound_steps_per_s": summary(reference),
            "nominal_steps_per_s": 1e3 / cfg.step_ms, "results": table, "targets": checks}


def unpack(commit: str, into: Path) -> Path:
    """``commit``'s ``dataecho/`` under ``into``, for a child's PYTHONPATH."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "dataecho"],
                             check=True, capture_output=True).stdout
    into.mkdir(parents=True)
    (into / "code.tar").write_bytes(archive)
    with tarfile.open(into / "code.tar") as tar:
        tar.extractall(into, filter="data")
    return into


def child(root: Path, cfg: Config) -> dict[str, Any]:
    """One trial, in a process whose ``dataecho`` is the one under ``root``."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", "--trials", "1", "--steps", str(cfg.steps),
         "--step-ms", str(cfg.step_ms), *(f"--only={o}" for o in cfg.only)],
        env={**os.environ, "PYTHONPATH": str(root)}, check=True, stdout=subprocess.PIPE,
        text=True, cwd=root)
    measured: dict[str, Any] = json.loads(done.stdout)
    return measured


def joined(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The measurements of one-trial children as those of one run of all the trials."""
    out: dict[str, Any] = {"raw": {}, "pairs": {}, "reference": []}
    for m in trials:
        for name, conds in m["raw"].items():
            for cond, runs in conds.items():
                out["raw"].setdefault(name, {}).setdefault(cond, []).extend(runs)
        for name, runs in m["pairs"].items():
            out["pairs"].setdefault(name, []).extend(runs)
        out["reference"].extend(m["reference"])
    return out


def short(commit: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", commit],
                          check=True, capture_output=True, text=True).stdout.strip()


def next_costs(table: dict[str, dict[str, Any]],
               pairs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per scenario: median next() in µs of the fixed factor and of adaptive, and their ratio.

    Each is the median over trials of a run's median ``next()``; the ratio is the median
    over trials of adaptive (default buffer) over fixed, each trial's two runs made back
    to back. ``paired_*``, where the scenario has paired runs: the medians over trials of
    each stage's median and of the trial's ratio. ``cpu_*`` are the medians over trials
    of the CPU time per step inside next() (``consume``'s ``cpu_us``).
    """
    out: dict[str, dict[str, float]] = {}
    for name, conds in table.items():
        fixed = next(s for cond, s in conds.items() if cond.startswith("fixed"))
        adaptive = conds["adaptive"]
        each = [a["next_us"] / f["next_us"] for f, a in zip(fixed["trials"],
                                                             adaptive["trials"], strict=True)]
        cf, ca = fixed["cpu_us"]["median"], adaptive["cpu_us"]["median"]
        out[name] = {"fixed": fixed["next_us"]["median"],
                     "adaptive": adaptive["next_us"]["median"],
                     "adaptive buffer_size=1":
                         conds["adaptive buffer_size=1"]["next_us"]["median"],
                     "ratio": statistics.median(each), "cpu_fixed": cf, "cpu_adaptive": ca,
                     "cpu_ratio": ca / cf if cf > 0 else math.inf}
        if name in pairs:
            pair = pairs[name]
            out[name] |= {"paired_fixed": statistics.median(p["fixed"] for p in pair),
                          "paired_adaptive": statistics.median(p["adaptive"] for p in pair),
                          "paired_ratio": statistics.median(p["adaptive"] / p["fixed"]
                                                            for p in pair)}
    return out


def against(res: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Per scenario: each tree's adaptive over fixed ``next()`` (the same-run ratio), and
    this run's adaptive ``next()``, paired ``next()`` and CPU per step over the baseline's."""
    out: dict[str, Any] = {"code": base["code"], "trials": base["config"]["trials"]}
    for name, c in res["next_us"].items():
        b = base["next_us"][name]
        out[name] = {"same_run": c["ratio"], "baseline_same_run": b["ratio"],
                     "next": c["adaptive"] / b["adaptive"],
                     "cpu": c["cpu_adaptive"] / b["cpu_adaptive"]}
        if "paired_adaptive" in c:
            out[name]["paired"] = c["paired_adaptive"] / b["paired_adaptive"]
    return out


def markdown(res: dict[str, Any]) -> str:
    cfg, bound = res["config"], res["downstream_bound_steps_per_s"]["steps_per_s"]
    lines = [
        "# Adaptive echoing with real threads (benchmarks/adaptive.py)", "",
        f"Consumer step {cfg['step_ms']:g} ms (time.sleep); upstream sleeps R x that per "
        f"batch in AdaptiveEcho's prefetch thread. {cfg['trials']} trials: mean (min-max) of "
        "steps/s and factor; median (max) of stall; 'of bound' is the median over trials of "
        "steps/s over the consumer-alone rate measured just before (paired). "
        f"{cfg['steps']} steps per echo run, {cfg['baseline_steps']} per no-echo run. "
        f"Adaptive: `{res['pipeline']}`. Code {res['code']}, {res['machine']}, "
        f"Python {res['python']}, {res['cpus']} CPUs; load average (1, 5, 15 min) "
        f"{_load(res['load_average']['before'])} before the run, "
        f"{_load(res['load_average']['after'])} after.", "",
        f"Downstream-bound rate (consumer alone): {bound['mean']:.1f} steps/s "
        f"({bound['min']:.1f}-{bound['max']:.1f}; nominal {res['nominal_steps_per_s']:.1f}).",
        "",
        "| scenario | run | steps/s | of bound | realised factor | stall median (max) "
        "| next() median |",
        "|---|---|---:|---:|---:|---:|---:|"]
    for name, conds in res["results"].items():
        for cond, s in conds.items():
            v, f, st = s["steps_per_s"], s["factor"], s["stall"]
            lines.append(
                f"| {name} | {cond} | {v['mean']:.1f} ({v['min']:.1f}-{v['max']:.1f}) | "
                f"{s['of_bound']['median']:.1%} | {f['mean']:.2f} ({f['min']:.2f}-"
                f"{f['max']:.2f}) | {st['median']:.1%} ({st['max']:.1%}) | "
                f"{s['next_us']['median']:.0f} µs |")
    lines += ["", "Cost of one `next()` (median after the first): in the runs above (median "
              "over trials of each run's median; the ratio is the median over trials of "
              "each trial's adaptive run over its fixed one, made back to back: the "
              "target's measure); in the paired run, which steps the two stages in turn "
              "where neither waits (medians over trials of each stage's median and of "
              "their ratio); and the training thread's CPU time inside `next()` per step, "
              "the mean over the steps (median over trials), which counts the echoes "
              "adaptive echoing plans on one step for later ones.", "",
              "| scenario | fixed | adaptive | adaptive / fixed | adaptive buffer_size=1 "
              "| paired: fixed | adaptive | adaptive / fixed | CPU per step: fixed "
              "| adaptive | adaptive / fixed |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, c in res["next_us"].items():
        pair = (f"{c['paired_fixed']:.1f} µs | {c['paired_adaptive']:.1f} µs | "
                f"{c['paired_ratio']:.2f}x" if "paired_ratio" in c else "- | - | -")
        lines.append(f"| {name} | {c['fixed']:.1f} µs | {c['adaptive']:.1f} µs | "
                     f"{c['ratio']:.2f}x | {c['adaptive buffer_size=1']:.1f} µs | {pair} | "
                     f"{c['cpu_fixed']:.1f} µs | {c['cpu_adaptive']:.1f} µs | "
                     f"{c['cpu_ratio']:.2f}x |")
    lines += ["", "Targets of issue 3 for adaptive runs with R <= max_factor, on the median "
              "trial: stall < 5%, realised factor within 15% of R, steps/s within 5% of the "
              "downstream-bound rate.", ""]
    for name, c in res["targets"].items():
        marks = ", ".join(f"{k} {'met' if v else 'missed'}" for k, v in c.items()
                          if k != "applies")
        note = "" if c["applies"] else (" (R > max_factor: the cap holds the factor at "
                                        "max_factor by design; targets do not apply)")
        lines.append(f"- {name}: {marks}{note}")
    if "baseline" in res:
        base = res["baseline"]
        when = ("in the same run, trials taking turns" if res.get("same_run_base")
                else "run just before")
        lines += ["", f"Against the baseline {when}, code {base['code']} "
                  f"({base['trials']} trials): the adaptive stage's cost per step in this run "
                  "over that run's (medians as above), and in each run adaptive over fixed.", "",
                  "| scenario | next(): this / baseline | paired next() | CPU per step "
                  "| adaptive / fixed: this run | baseline run |", "|---|---:|---:|---:|---:|---:|"]
        for name, c in base.items():
            if isinstance(c, dict):
                paired = f"{c['paired']:.2f}x" if "paired" in c else "-"
                lines.append(f"| {name} | {c['next']:.2f}x | {paired} | {c['cpu']:.2f}x | "
                             f"{c['same_run']:.2f}x | {c['baseline_same_run']:.2f}x |")
    return "\n".join(lines) + "\n"


def _load(avg: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in avg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=Config.trials)
    parser.add_argument("--steps", type=int, default=Config.steps)
    parser.add_argument("--step-ms", type=float, default=Config.step_ms)
    parser.add_argument("--base", help="a commit to compare against in the same run")
    parser.add_argument("--this", help="the commit to measure under --base (default: this "
                        "checkout's working tree)")
    parser.add_argument("--baseline", type=Path, help="another tree's results JSON")
    parser.add_argument("--only", action="append", help="run only the scenarios whose name "
                        "starts with this (R=1, drift, ...); repeatable")
    parser.add_argument("--tag", help="write results/adaptive-TAG.* (a rerun beside a run)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cfg = Config(trials=args.trials, steps=args.steps, step_ms=args.step_ms,
                 only=tuple(args.only or ()))
    if args.child:
        print(json.dumps(measure(cfg)))
        return
    before = os.getloadavg()
    if args.base:  # the commits named now: a commit made meanwhile is not what ran
        base_code, this_code = short(args.base), short(args.this) if args.this else version()
        parts: dict[str, list[dict[str, Any]]] = {"base": [], "this": []}
        with tempfile.TemporaryDirectory() as tmp:
            roots = {"base": unpack(base_code, Path(tmp) / "base"),
                     "this": unpack(this_code, Path(tmp) / "this") if args.this else ROOT}
            for trial in range(cfg.trials):
                for v in ("base", "this") if trial % 2 == 0 else ("this", "base"):
                    parts[v].append(child(roots[v], cfg))
                print(f"trial {trial + 1}/{cfg.trials} of both done", file=sys.stderr)
        load = {"before": before, "after": os.getloadavg()}
        res = report(cfg, joined(parts["this"]), this_code, load)
        base = report(cfg, joined(parts["base"]), base_code, load)
        res["baseline"], res["same_run_base"] = against(res, base), True
    else:
        res = report(cfg, measure(cfg), version(),
                     {"before": before, "after": os.getloadavg()})
    if args.baseline:
        res["baseline"] = against(res, json.loads(args.baseline.read_text()))
    RESULTS.mkdir(exist_ok=True)
    name = f"adaptive-{args.tag}" if args.tag else "adaptive"
    (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
