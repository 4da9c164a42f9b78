"""The docs site's figures, drawn from the committed wall-clock results.

Usage: python benchmarks/figures.py [--out docs/figures]

Reads benchmarks/results/wallclock-dec2026.jsonl (the 63-run grid the wall-clock page
leads with) and reports/full/results.jsonl (the reproduction's full protocol), and writes:

- ``accuracy-vs-time.png``: test accuracy against training seconds for one seed at
  the `R` set to 6: no echoing, example echoing before augmentation at e = 2, 4, 6,
  and adaptive echoing. What ``dataecho demo`` draws in its ``accuracy.png``.
- ``speedup-vs-r.png``: speedup to the target against the measured `R` before
  augmentation, one line per factor, and the three variants side by side at the
  largest `R` (mean over seeds, min-max bars).
- ``fresh-vs-factor.png``: the reproduction's Fig. 5 on Fashion-MNIST, fresh examples
  to the target against the echo factor per variant, as ``dataecho report`` draws it.

Nothing is run or measured here; the figures change only when the results do. Agg
backend, no timestamps in the files, so reruns write the same bytes.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt

from dataecho.demo.gridreport import summary
from dataecho.pipeline import VARIANTS

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "benchmarks" / "results" / "wallclock-dec2026.jsonl"
REPRODUCTION = ROOT / "reports" / "full" / "results.jsonl"
TITLES = {"before_augmentation": "example echoing before augmentation",
          "after_augmentation": "example echoing after augmentation",
          "batch": "batch echoing"}
# PNG metadata without the matplotlib version or a date: the bytes follow the data.
METADATA = {"Software": None}


def load_runs(store: Path = STORE) -> list[dict[str, Any]]:
    """The store's run records, one per key (a later duplicate replaces an earlier one)."""
    records = (json.loads(line) for line in store.read_text().splitlines() if line.strip())
    return list({r["key"]: r for r in records if r.get("kind") == "run"}.values())


def _label(run: dict[str, Any]) -> str:
    if run["variant"] == "none":
        return "no echoing"
    if run["factor"] == "auto":
        return f"adaptive (realised e {run['realised_factor']:.1f})"
    return f"echo e = {float(run['factor']):g}"


def accuracy_vs_time(runs: list[dict[str, Any]], path: Path, *, ratio: float = 6.0,
                     seed: int = 0) -> Path:
    """Accuracy against training seconds: the demo's picture, from one grid seed."""
    mine = [r for r in runs if r["ratio"] == ratio and r["seed"] == seed
            and r["variant"] in ("none", "before_augmentation")]
    mine.sort(key=lambda r: (r["variant"] != "none", r["factor"] == "auto",
                             0.0 if r["factor"] == "auto" else float(r["factor"])))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for run in mine:
        points = run["points"]
        ax.plot([p["seconds"] for p in points], [100 * p["accuracy"] for p in points],
                marker=".", label=_label(run),
                linestyle="--" if run["factor"] == "auto" else "-")
    target = 100 * mine[0]["target"]
    ax.axhline(target, color="grey", linestyle=":", linewidth=1)
    ax.text(1, target + 0.3, f"target {target:g}%", color="grey", fontsize=8)
    measured = next(r["ratio_seen"] for r in mine if r["variant"] == "none")
    ax.set_title(f"Fashion-MNIST over a throttled link, R = {measured:.1f}, seed {seed}",
                 fontsize=10)
    ax.set_xlabel("training wall-clock seconds")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(target - 12, target + 3)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata=METADATA)
    plt.close(fig)
    return path


def speedup_vs_r(runs: list[dict[str, Any]], path: Path) -> Path:
    """Left: speedup against measured R before augmentation, one line per factor.
    Right: the three variants side by side at the largest R."""
    groups = [g for g in summary(runs) if g["variant"] != "none" and g["speedup_n"]]
    factors = sorted({g["factor"] for g in groups}, key=lambda f: (f == "auto", float(
        "inf") if f == "auto" else float(f)))
    names = {f: "adaptive (cap 4)" if f == "auto" else f"e = {float(f):g}" for f in factors}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), sharey=True,
                                      gridspec_kw={"width_ratios": [1.1, 1]})
    top = max(g["ratio_measured_mean"] for g in groups)
    for factor in factors:
        mine = sorted((g for g in groups if g["variant"] == VARIANTS[0]
                       and g["factor"] == factor), key=lambda g: g["ratio"])
        x = [g["ratio_measured_mean"] for g in mine]
        y = [g["speedup_mean"] for g in mine]
        left.errorbar(x, y, yerr=_spread(mine), marker="*" if factor == "auto" else "o",
                      capsize=3, label=names[factor],
                      linestyle="--" if factor == "auto" else "-")
    left.plot([1, top], [1, top], color="grey", linestyle=":", label="speedup = R")
    left.set_title(f"{TITLES[VARIANTS[0]]}, against R", fontsize=10)
    left.set_xlabel("R measured (loader time per batch / step time)")
    left.set_xlim(1, top + 0.5)
    left.legend(fontsize=8, loc="upper left")
    last = max(g["ratio"] for g in groups)
    width = 0.8 / len(VARIANTS)
    for k, variant in enumerate(VARIANTS):
        mine = [next((g for g in groups if g["ratio"] == last and g["variant"] == variant
                      and g["factor"] == f), None) for f in factors]
        xs = [i + (k - 1) * width for i, g in enumerate(mine) if g is not None]
        have = [g for g in mine if g is not None]
        right.bar(xs, [g["speedup_mean"] for g in have], width, yerr=_spread(have),
                  capsize=3, label=TITLES[variant].replace("example echoing ", ""))
    measured = next(g["ratio_measured_mean"] for g in groups if g["ratio"] == last)
    right.set_xticks(range(len(factors)), [names[f] for f in factors])
    right.set_title(f"the three variants at R = {measured:.1f}", fontsize=10)
    right.legend(fontsize=8, loc="upper left")
    for ax in (left, right):
        ax.axhline(1, color="grey", linewidth=0.8)
        ax.grid(alpha=0.3)
    left.set_ylabel("speedup to 88% (mean, min-max, n = 3)")
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata=METADATA)
    plt.close(fig)
    return path


def _spread(groups: list[dict[str, Any]]) -> list[list[float]]:
    """Error bars from each group's mean down to its min and up to its max."""
    return [[g["speedup_mean"] - g["speedup_min"] for g in groups],
            [g["speedup_max"] - g["speedup_mean"] for g in groups]]


def fresh_vs_factor(path: Path, store: Path = REPRODUCTION) -> Path:
    """The reproduction's Fig. 5 for Fashion-MNIST, from its committed store."""
    from dataecho.experiments.analysis import collect
    from dataecho.experiments.figures import fig5_factor
    from dataecho.experiments.report import current
    from dataecho.experiments.store import Store

    records = Store(store).index().values()
    trials, _ = current(r for r in records if r.get("kind") == "trial")
    workload = next(r["config"]["workload"] for r in trials if r["workload"] == "fmnist")
    return fig5_factor(collect(trials)["fmnist"], workload, path)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "figures",
                   help="directory for the PNGs (default: docs/figures)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = load_runs()
    for path in (accuracy_vs_time(runs, args.out / "accuracy-vs-time.png"),
                 speedup_vs_r(runs, args.out / "speedup-vs-r.png"),
                 fresh_vs_factor(args.out / "fresh-vs-factor.png")):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
