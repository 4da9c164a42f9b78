"""The grid's results: speedups against the shared baselines, summary, table, figure.

Everything is computed from the store's run records (see :mod:`dataecho.demo.grid`),
so ``benchmarks/wallclock.py --replot`` rebuilds the report without running anything.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from ..experiments.crossing import find_crossing
from ..experiments.text import md_table
from .config import ARMS
from .grid import BASELINE
from .report import predicted_speedup

ORDER: dict[str, int] = {BASELINE: 0, **{v: k + 1 for k, v in enumerate(ARMS)}}


def interpolated_time(run: dict[str, Any]) -> float | None:
    """Training seconds where the accuracy curve crosses the target, interpolated.

    ``time_to_target`` is the clock at the first evaluation at or above the target, so
    it overstates the crossing by up to one evaluation interval (100 steps: 5-10% of a
    run); the straight line between that evaluation and the one before removes that
    bias, as the reproduction's report does (:mod:`dataecho.experiments.crossing`).

    Example:
        >>> interpolated_time({"target": 0.9, "points": [
        ...     {"seconds": 10.0, "accuracy": 0.8}, {"seconds": 20.0, "accuracy": 1.0}]})
        15.0
    """
    points = run.get("points") or []
    crossing = find_crossing([p["seconds"] for p in points], [p["accuracy"] for p in points],
                             run["target"], higher_is_better=True)
    return None if crossing is None else float(crossing.interpolated)


def best_accuracy(run: dict[str, Any]) -> float:
    """The highest accuracy over the run's evaluations: what a run that missed reached.

    ``final_accuracy`` is the last evaluation's, lower when the curve fell back at the
    end; records written before ``best_accuracy`` was stored get it from their points.

    Example:
        >>> best_accuracy({"final_accuracy": 0.87, "points": [
        ...     {"accuracy": 0.88}, {"accuracy": 0.87}]})
        0.88
    """
    if run.get("best_accuracy") is not None:
        return float(run["best_accuracy"])
    points = run.get("points") or []
    return max((float(p["accuracy"]) for p in points), default=float(run["final_accuracy"]))


def with_speedups(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each run with its baseline's measured R, speedups, fresh ratio (None if unmeasured)
    and best accuracy (:func:`best_accuracy`).

    Speedup is the same (R, seed) baseline's time to target over the run's, only where
    both reached the target: ``speedup`` from the first evaluations at the target,
    ``speedup_interpolated`` from the interpolated crossings.
    """
    base = {(r["preset"], r["budget"], r["ratio"], r["seed"]): r for r in runs
            if r["variant"] == BASELINE}
    out = []
    for r in runs:
        b = base.get((r["preset"], r["budget"], r["ratio"], r["seed"]))
        speedup = fresh = interpolated = predicted = None
        if b is not None and b["reached"] and r["reached"] and r["time_to_target"]:
            speedup = b["time_to_target"] / r["time_to_target"]
            predicted = predicted_speedup(r, b)
            fresh = r["fresh_to_target"] / b["fresh_to_target"]
            mine, theirs = interpolated_time(r), interpolated_time(b)
            if mine and theirs:
                interpolated = theirs / mine
        out.append({**r, "ratio_measured": b["ratio_seen"] if b else None,
                    "speedup": speedup, "speedup_interpolated": interpolated,
                    "predicted_speedup": predicted,
                    "efficiency": speedup / predicted if speedup and predicted else None,
                    "fresh_ratio": fresh, "best_accuracy": best_accuracy(r)})
    return sorted(out, key=_order)


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (preset, budget, R, variant, factor): n, reached, means and min-max over seeds."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in with_speedups(runs):
        key = (r["preset"], r["budget"], r["ratio"], r["variant"], str(r["factor"]))
        groups.setdefault(key, []).append(r)
    out = []
    for (preset, budget, ratio, variant, factor), group in groups.items():
        row: dict[str, Any] = {"preset": preset, "budget": budget, "ratio": ratio,
                               "variant": variant, "factor": factor, "trials": len(group),
                               "seeds": [r["seed"] for r in group],
                               "reached": sum(bool(r["reached"]) for r in group)}
        for name in ("ratio_measured", "realised_factor", "speedup", "speedup_interpolated",
                     "predicted_speedup", "efficiency", "fresh_ratio", "time_to_target"):
            values = [r[name] for r in group if r[name] is not None]
            row[f"{name}_n"] = len(values)
            row[f"{name}_mean"] = statistics.mean(values) if values else None
            row[f"{name}_min"] = min(values, default=None)
            row[f"{name}_max"] = max(values, default=None)
        out.append(row)
    return out


def targets(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (preset, budget, R, variant): the best fixed factor against adaptive echoing.

    ``auto_share`` is adaptive's mean speedup over the best fixed factor's (the
    issue's target: at least 0.9); ``over_bound`` counts fixed factors whose mean
    speedup exceeds ``min(R measured, e)`` (none should); ``fresh_above`` counts
    echoed groups whose mean fresh ratio exceeds 1 (the paper's first finding says
    none).

    Example:
        >>> g = {"preset": "p", "budget": None, "ratio": 6.0, "variant": "batch",
        ...      "ratio_measured_mean": 6.0, "fresh_ratio_mean": 0.5, "speedup_n": 3}
        >>> rows = targets([{**g, "factor": "4.0", "speedup_mean": 3.0,
        ...                  "realised_factor_mean": 4.0},
        ...                 {**g, "factor": "auto", "speedup_mean": 2.7,
        ...                  "realised_factor_mean": 3.5}])
        >>> rows[0]["best_factor"], round(rows[0]["auto_share"], 2)
        ('4.0', 0.9)
    """
    out = []
    keys = dict.fromkeys((g["preset"], g["budget"], g["ratio"], g["variant"]) for g in groups
                         if g["variant"] != BASELINE)
    for key in keys:
        mine = [g for g in groups if (g["preset"], g["budget"], g["ratio"], g["variant"]) == key
                and g["speedup_mean"] is not None]
        fixed = [g for g in mine if g["factor"] != "auto"]
        auto = next((g for g in mine if g["factor"] == "auto"), None)
        best = max(fixed, key=lambda g: g["speedup_mean"], default=None)
        over = [g for g in fixed if g["ratio_measured_mean"] is not None
                and g["speedup_mean"] > min(g["ratio_measured_mean"],
                                            g["realised_factor_mean"])]
        out.append({
            "preset": key[0], "budget": key[1], "ratio": key[2], "variant": key[3],
            "best_factor": best["factor"] if best else None,
            "best_speedup": best["speedup_mean"] if best else None,
            "best_n": best["speedup_n"] if best else 0,
            "auto_speedup": auto["speedup_mean"] if auto else None,
            "auto_n": auto["speedup_n"] if auto else 0,
            "auto_share": (auto["speedup_mean"] / best["speedup_mean"]
                           if auto and best else None),
            "over_bound": len(over),
            "fresh_above": sum(1 for g in mine if (g["fresh_ratio_mean"] or 0) > 1.0)})
    return out


def _order(r: dict[str, Any]) -> tuple[Any, ...]:
    f = r["factor"]
    return (r["preset"], r["budget"] or 0.0, r["ratio"], ORDER.get(r["variant"], 9),
            f == "auto", 0.0 if f == "auto" else float(f), r.get("seed", 0))


def _factor(f: Any) -> str:
    return "auto" if f == "auto" else format(float(f), "g")


def markdown(runs: list[dict[str, Any]], calibrations: list[dict[str, Any]], title: str) -> str:
    """The report: per (preset, budget) section, a summary over seeds, then every run."""
    def num(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    def spread(g: dict[str, Any], name: str, unit: str = "") -> str:
        if g[f"{name}_mean"] is None:
            return "not measured"
        return (f"{g[f'{name}_mean']:.2f}{unit} ({g[f'{name}_min']:.2f}-"
                f"{g[f'{name}_max']:.2f}, n={g[f'{name}_n']})")

    lines = [f"# Wall-clock benchmark ({title})", ""]
    rows, groups = with_speedups(runs), summary(runs)
    for section in dict.fromkeys((r["preset"], r["budget"]) for r in rows):
        mine = [r for r in rows if (r["preset"], r["budget"]) == section]
        first = mine[0]
        t_down = [c["t_down_s"] for c in calibrations if json.loads(c["key"])[0] == section[0]]
        walls = [r["run_wall_s"] for r in mine if r.get("run_wall_s")]
        budget = (f"--budget {section[1]:g} s" if section[1] is not None
                  else "the preset's budget rule")
        lines += [f"## {section[0]} preset, {budget}", "",
                  f"Target {first['target']:.0%}; {first['device_note']}; t_down "
                  f"{num(t_down[-1] * 1000 if t_down else None, '.1f')} ms; "
                  f"{first['versions']['platform']}, torch {first['versions']['torch']}; "
                  f"{len(mine)} runs; "
                  + (f"{sum(walls) / 60:.1f} min of run time recorded." if walls
                     else "run times not recorded (converted from the one-file format)."),
                  ""]
        table: list[list[str]] = []
        for g in (g for g in groups if (g["preset"], g["budget"]) == section):
            e, r_seen = g["realised_factor_mean"], g["ratio_measured_mean"]
            bound = min(r_seen, e) if r_seen is not None and e is not None else None
            table.append([f"{g['ratio']:g}", num(r_seen, ".2f"), g["variant"],
                         _factor(g["factor"]), num(e, ".2f"), f"{g['reached']}/{g['trials']}",
                         spread(g, "speedup", "x"), spread(g, "speedup_interpolated", "x"),
                         f"{num(bound, '.2f')}x", spread(g, "predicted_speedup", "x"),
                         spread(g, "efficiency"), spread(g, "fresh_ratio")])
        lines += md_table(["R set", "R measured", "variant", "factor", "realised e", "reached",
                           "speedup mean (min-max, n)", "interpolated", "bound min(R,e)",
                           "predicted", "efficiency", "fresh ratio mean (min-max, n)"], table,
                          "lrllrrrrrrrr")
        lines += ["", "Targets (means over seeds): best fixed factor, adaptive against it "
                  "(target: at least 90%), fixed factors whose speedup beats the bound "
                  "min(R, e), echoed conditions needing more fresh examples than the "
                  "baseline:", ""]
        table = []
        for t in (t for t in targets(groups) if (t["preset"], t["budget"]) == section):
            best = (f"{t['best_speedup']:.2f}x ({t['best_n']})"
                    if t["best_speedup"] is not None else "-")
            auto = (f"{t['auto_speedup']:.2f}x ({t['auto_n']})"
                    if t["auto_speedup"] is not None else "-")
            table.append([f"{t['ratio']:g}", t["variant"],
                         _factor(t["best_factor"]) if t["best_factor"] else "-", best, auto,
                         num(t["auto_share"], ".0%"), str(t["over_bound"]),
                         str(t["fresh_above"])])
        lines += md_table(["R set", "variant", "best fixed e", "its speedup (n)", "adaptive (n)",
                           "adaptive / best", "over the bound", "fresh ratio > 1"], table,
                          "lllrrrrr")
        lines += ["", "Every run:", ""]
        table = []
        for r in mine:
            reach = "yes" if r["reached"] else f"no (best {r['best_accuracy']:.2%})"
            table.append([f"{r['ratio']:g}", str(r["seed"]), r["variant"], _factor(r["factor"]),
                         reach, num(r["time_to_target"], ".1f"), f"{r['steps']:,}",
                         num(r["fresh_to_target"], ","), num(r["realised_factor"], ".2f"),
                         num(r["stall_fraction"], ".0%"), num(r["speedup"], ".2f"),
                         num(r["fresh_ratio"], ".2f")])
        lines += md_table(["R set", "seed", "variant", "factor", "reached",
                           "time to target (s)", "steps", "fresh to target", "realised e",
                           "stall", "speedup", "fresh ratio"], table, "lrllrrrrrrrr")
        lines.append("")
    lines += ["Speedup: the same (R, seed) baseline's time to target over the run's, only "
              "where both reached it; mean and min-max over the n such seeds. Time to target "
              "is the training clock at the first evaluation at or above the target; "
              "'interpolated' uses the straight-line crossing between that evaluation and "
              "the one before, which removes the evaluation grid's bias (up to 100 steps). "
              "Bound: "
              "min(measured R, realised factor). Predicted: the model's speedup "
              "(dataecho.profiler.model) from the baseline's read and augmentation times "
              "per batch, the run's own step and realised factor, and the baseline's steps "
              "to target over the run's; efficiency: speedup over predicted. Fresh ratio: "
              "fresh examples to target over the baseline's."]
    return "\n".join(lines) + "\n"


def plot(groups: list[dict[str, Any]], path: Path) -> None:
    """Speedup against realised factor: one panel per variant, one line per R."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    variants: list[str] = [v for v in ARMS if any(g["variant"] == v for g in groups)]
    variants = variants or [BASELINE]
    fig, axes = plt.subplots(1, len(variants), figsize=(5 * len(variants), 4), sharey=True,
                             squeeze=False)
    for ax, variant in zip(axes[0], variants, strict=True):
        for ratio in sorted({g["ratio"] for g in groups}):
            mine = [g for g in groups if g["ratio"] == ratio and g["speedup_mean"] is not None
                    and g["variant"] in (variant, BASELINE)]
            fixed = sorted((g["realised_factor_mean"], g["speedup_mean"], g["speedup_min"],
                            g["speedup_max"]) for g in mine if g["factor"] != "auto")
            if not fixed:
                continue
            x, y, lo, hi = zip(*fixed, strict=True)
            line = ax.errorbar(x, y, yerr=[[a - b for a, b in zip(y, lo, strict=True)],
                                           [b - a for a, b in zip(y, hi, strict=True)]],
                               marker="o", capsize=3, label=f"R = {ratio:g}, fixed e")
            for g in mine:
                if g["factor"] == "auto":
                    ax.plot(g["realised_factor_mean"], g["speedup_mean"], marker="*",
                            markersize=14, linestyle="", color=line.lines[0].get_color(),
                            label=f"R = {ratio:g}, auto")
        ax.plot([1, 6], [1, 6], color="grey", linestyle=":", label="speedup = e")
        ax.set_title(variant)
        ax.set_xlabel("realised echo factor")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("wall-clock speedup to target (mean, min-max)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
