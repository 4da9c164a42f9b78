"""Per-item cost of the stages, this checkout against a base commit, in one run.

Usage: python benchmarks/stages.py [--base 4112318] [--this HEAD] [--items 200000]
                                   [--repeats 7]

The base commit's ``dataecho/`` is unpacked with ``git archive`` into a temporary
folder, and so is ``--this``'s (default: this checkout's working tree). Each repeat runs
one child process per version, alternating base and this checkout, so both see the same
load from other jobs on a shared machine. A child times every case (best of 3 passes
over N items) against plain iteration of a list of what the case emits; the table
reports medians over the repeats, in µs per emitted item (per input item for ``Batch``),
and the ratio this / base (the median of the ratios of runs made back to back, and of
the fastest runs). Checkpoint rows time one ``state_dict()`` or ``_snapshot()`` call.
Writes benchmarks/results/stages.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def drain(it: Iterable[Any]) -> int:
    n = 0
    for _ in it:
        n += 1
    return n


def best(fn: Callable[[], Any], passes: int = 3) -> float:
    times = []
    for _ in range(passes):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(n: int) -> dict[str, float]:
    """µs per item of every case, for the ``dataecho`` on ``sys.path`` (a child's job)."""
    from dataecho import Batch, Echo, Map, Shuffle, Source

    items = list(range(n))
    cases: dict[str, Callable[[], Iterable[Any]]] = {
        "Echo factor 1 (pass-through)": lambda: Echo(items, 1),
        "Echo factor 2": lambda: Echo(items, 2),
        "Echo factor 2.5 (fractional)": lambda: Echo(items, 2.5),
        "Shuffle buffer 1000": lambda: Shuffle(items, 1000),
        "Shuffle buffer 10000 after Echo factor 2": lambda: Shuffle(Echo(items, 2), 10_000),
        "Batch 128 (collate=list)": lambda: Batch(items, 128, collate=list),
        "Map fn(item)": lambda: Map(items, lambda x: x),
        "Map fn(item, rng), a generator per item": lambda: Map(items, lambda x, rng: x),
    }
    out = {"plain iteration": 1e6 * best(lambda: drain(items)) / n}
    for name, make in cases.items():
        emitted = items if name.startswith("Batch") else list(make())
        t_stage, t_plain = best(lambda make=make: drain(make())), best(lambda e=emitted: drain(e))
        out[name] = 1e6 * t_stage / len(emitted)
        out[name + " (overhead)"] = 1e6 * (t_stage - t_plain) / len(emitted)
    calls = max(n // 10, 1)
    for name, make in {"Map(Source)": lambda: Map(Source(range(100)), abs),
                       "Batch(Map(Source))": lambda: Batch(Map(Source(range(100)), abs), 4),
                       "Echo(Source) factor 2": lambda: Echo(Source(range(100)), 2)}.items():
        stage = make()
        next(stage)
        for method in ("state_dict", "_snapshot"):
            call = getattr(stage, method)
            out[f"{name}.{method}()"] = 1e6 * best(
                lambda call=call: [call() for _ in range(calls)]) / calls
    return out


def unpack(commit: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "dataecho"],
                             check=True, capture_output=True).stdout
    into.mkdir(parents=True)
    path = into / "code.tar"
    path.write_bytes(archive)
    with tarfile.open(path) as tar:
        tar.extractall(into, filter="data")
    return into


def child(root: Path, n: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, __file__, "--child", "--items", str(n)], env=env,
                          check=True, capture_output=True, text=True, cwd=root)
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", default="4112318", help="the commit to compare against")
    parser.add_argument("--this", help="the commit to measure (default: the working tree)")
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.items)))
        return
    load = os.getloadavg()[0]
    # The commits named now: one made during the run is not what ran.
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.this or "HEAD"],
                          check=True, capture_output=True, text=True).stdout.strip()
    runs: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
    with tempfile.TemporaryDirectory() as tmp:
        roots = {"base": unpack(args.base, Path(tmp) / "base"),
                 "this": unpack(head, Path(tmp) / "this") if args.this else ROOT}
        for r in range(args.repeats):
            for version in ("base", "this") if r % 2 == 0 else ("this", "base"):
                runs[version].append(child(roots[version], args.items))
            print(f"repeat {r + 1}/{args.repeats} done", file=sys.stderr)
    rows = {}
    for name in runs["this"][0]:
        base, this = ([run[name] for run in runs[v]] for v in ("base", "this"))
        # Runs r of both versions ran back to back: their ratio cancels most of the
        # load that other jobs put on a shared machine, which drifts over minutes.
        rows[name] = {"base": statistics.median(base), "this": statistics.median(this),
                      "ratio": statistics.median(t / b for t, b in zip(this, base, strict=True)),
                      "best_ratio": min(this) / min(base)}
    result = {"machine": platform.platform(), "python": platform.python_version(),
              "cpus": os.cpu_count(), "load_average": load, "base": args.base, "this": head,
              "items": args.items,
              "repeats": args.repeats, "median_us_per_item": rows, "runs": runs}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "stages.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# Stage cost (benchmarks/stages.py)", "",
             f"{args.items:,} items; median of {args.repeats} alternating runs per version, "
             f"each the best of 3 passes; {result['machine']}, {result['cpus']} CPUs "
             f"(load average {load:.1f} at the start), Python {result['python']}. "
             f"Base is commit {args.base}, this is {head}"
             f"{'' if args.this else ' (plus uncommitted changes, if any)'}. "
             "µs per emitted item (per input item for "
             "Batch); checkpoint rows are µs per call; overhead is the stage's time less "
             "plain iteration of what it emits.", "",
             "this / base is the median of the ratios of runs made back to back; best / best "
             "compares each version's fastest run.", "",
             "| case | base µs | this µs | this / base | best / best | overhead base µs "
             "| overhead this µs |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, v in rows.items():
        if name.endswith(" (overhead)"):
            continue
        over = rows.get(name + " (overhead)")
        extra = f"{over['base']:.3f} | {over['this']:.3f}" if over else "| "
        lines.append(f"| {name} | {v['base']:.3f} | {v['this']:.3f} | {v['ratio']:.2f} | "
                     f"{v['best_ratio']:.2f} | {extra} |")
    (RESULTS / "stages.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
