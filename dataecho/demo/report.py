"""The demo's results: the side-by-side table, the figure and the JSON with every number."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._json import finite
from ..profiler.model import Costs, Variant

if TYPE_CHECKING:  # the report itself needs no torch: benchmarks/wallclock.py --replot
    from .train import RunResult


PREDICTED_NOTE = (
    "predicted: the model (dataecho.profiler.model) from the baseline's read and "
    "augmentation times and the run's\nown step at its realised e, times the steps to "
    "target of the baseline over the run's; efficiency: speedup / predicted.")


def measured_ratio(baseline: RunResult) -> float:
    """``R`` as the baseline run saw it: seconds per step over compute seconds per step.

    Example:
        >>> from dataecho.demo.train import RunResult
        >>> measured_ratio(RunResult("b", 1.0, "", train_s=10.0, wait_s=8.0))
        5.0
    """
    busy = baseline.train_s - baseline.wait_s
    return baseline.train_s / busy if busy > 0 else math.inf


def summarize(runs: list[RunResult], ratio: float) -> list[dict[str, Any]]:
    """One row per run; speedups only where both the run and the baseline were measured.

    ``predicted_speedup`` is the model's (:func:`predicted_speedup`: what the profiler
    predicts from the baseline's times) and ``efficiency`` the measured speedup over it.
    """
    base = runs[0]
    rows = []
    for run in runs:
        e = run.realised_factor if run.factor == "auto" else float(run.factor)
        measured = run.reached and base.reached and bool(run.time_to_target)
        speedup = (base.time_to_target / run.time_to_target  # type: ignore[operator]
                   if measured else None)
        predicted = predicted_speedup(run.as_dict(), base.as_dict()) if measured else None
        rows.append({
            "run": run.name, "factor": run.factor, "reached": run.reached,
            "time_to_target_s": run.time_to_target, "fresh_to_target": run.fresh_to_target,
            "steps_to_target": run.steps_to_target, "realised_factor": run.realised_factor,
            "stall_fraction": run.stall_fraction, "final_accuracy": run.final_accuracy,
            "best_accuracy": run.best_accuracy,
            "train_s": run.train_s,
            "speedup": speedup,
            # The speedup if an echoed step were worth a fresh one: it bounds steps per
            # second, not time to target, and one seed can land above it.
            "ideal_speedup": min(ratio, e),
            "predicted_speedup": predicted,
            "efficiency": (speedup / predicted if speedup is not None and predicted else None),
            "fresh_ratio": (run.fresh_to_target / base.fresh_to_target  # type: ignore[operator]
                            if measured else None),
        })
    return rows


def predicted_speedup(run: Mapping[str, Any], base: Mapping[str, Any]) -> float | None:
    """The model's speedup (:mod:`dataecho.profiler.model`) for a run's record.

    The model with the loader's read and augmentation times per batch measured in the
    baseline (``read_s``, ``augment_s`` of :meth:`RunResult.as_dict`: the loader's cost
    when no echo hides it), the run's own step (``step_s``: the step as it ran, a
    ``"device"`` run's augmentation included; the baseline's where the run has none),
    at the run's realised factor, times the steps to target of the baseline over the
    run's; None where one of them was not measured. Copies of a ``"device"`` run, like
    batches and identical copies, skip the loader's augmentation.

    Example:
        >>> base = {"step_s": 0.1, "read_s": 0.3, "augment_s": 0.05, "steps_to_target": 100}
        >>> run = {"steps_to_target": 120, "realised_factor": 4.0, "step_s": 0.1,
        ...        "variant": "before_augmentation"}
        >>> round(predicted_speedup(run, base), 2)
        2.33
    """
    needed = ("step_s", "read_s", "augment_s", "steps_to_target")
    if any(base.get(k) is None for k in needed) or not run.get("steps_to_target"):
        return None
    factor = run.get("realised_factor")
    if not (base["step_s"] > 0 and factor is not None and math.isfinite(factor)):
        return None
    step = run.get("step_s")
    step = step if isinstance(step, float) and math.isfinite(step) and step > 0 else base["step_s"]
    loader = Costs(step_s=base["step_s"], read_s=base["read_s"], augment_s=base["augment_s"])
    costs = Costs(step_s=step, read_s=base["read_s"], augment_s=base["augment_s"])
    # Batches, like identical copies, skip the augmentation.
    variant: Variant = ("before_augmentation" if run.get("variant") == "before_augmentation"
                        else "after_augmentation")
    steps_ratio = float(base["steps_to_target"]) / float(run["steps_to_target"])
    return loader.batch_s(None, 1) / costs.batch_s(variant, max(factor, 1.0)) * steps_ratio


def table(rows: list[dict[str, Any]], target: float) -> str:
    """The final table, as text: a missed target says so and shows no speedup.

    ``predicted`` is the model's speedup from the run's own measured times and steps, and
    ``efficiency`` the measured speedup over it; a note under the table says so.
    """
    head = (f"{'run':<11}{'time to target':>15}{'fresh to target':>17}{'steps':>8}"
            f"{'realised e':>12}{'stall':>7}{'speedup':>9}{'predicted':>11}"
            f"{'efficiency':>12}{'fresh ratio':>13}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if r["reached"]:
            reach = (f"{r['time_to_target_s']:>13.1f} s{r['fresh_to_target']:>17,}"
                     f"{r['steps_to_target']:>8,}")
        else:
            reach = f"{'MISSED: best ' + format(r['best_accuracy'], '.2%'):>32}{'-':>8}"
        speed = f"{r['speedup']:.2f}x" if r["speedup"] is not None else "n/a"
        predicted = (f"{r['predicted_speedup']:.2f}x" if r["predicted_speedup"] is not None
                     else "n/a")
        efficiency = f"{r['efficiency']:.0%}" if r["efficiency"] is not None else "n/a"
        fresh = f"{r['fresh_ratio']:.2f}" if r["fresh_ratio"] is not None else "n/a"
        lines.append(f"{r['run']:<11}{reach}{r['realised_factor']:>12.2f}"
                     f"{r['stall_fraction']:>7.0%}{speed:>9}{predicted:>11}{efficiency:>12}"
                     f"{fresh:>13}")
    lines.append(PREDICTED_NOTE)
    missed = [r["run"] for r in rows if not r["reached"]]
    if missed:
        lines.append(f"{', '.join(missed)} did not reach {target:.0%} within the budget: no "
                     "speedup is reported for them (or for any run, if the baseline missed).")
    return "\n".join(lines)


def peak_rss_mb(runs: list[RunResult]) -> dict[str, float | None]:
    """Peak resident memory of this process and of the largest worker of ``runs``, in MB.

    The trainer's peak comes from ``getrusage`` (None on Windows, which lacks the
    ``resource`` module); workers report their own ``VmHWM`` (None where /proc is not
    readable). One worker runs at a time, so the sum bounds the demo's peak.
    """
    own = _own_peak_mb()
    workers = [r.worker_rss_mb for r in runs if r.worker_rss_mb is not None]
    worker = max(workers, default=None)
    return {"main_mb": own, "largest_worker_mb": worker,
            "sum_mb": own + worker if own is not None and worker is not None else None}


def _own_peak_mb() -> float | None:
    try:
        import resource  # POSIX only: imported here so the report loads on Windows
    except ImportError:
        return None
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 2**20  # KB on Linux, bytes on macOS
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def versions() -> dict[str, str]:
    """Versions of everything that decides the numbers."""
    import numpy
    import PIL
    import torch

    from .. import __version__

    return {"dataecho": __version__, "python": platform.python_version(),
            "torch": torch.__version__, "numpy": numpy.__version__, "pillow": PIL.__version__,
            "platform": platform.platform(), "cpus": str(os.cpu_count())}


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Writes ``payload`` with NaN and infinity as null, so any JSON reader accepts it."""
    path.write_text(json.dumps(finite(payload), indent=1) + "\n")


def plot(runs: list[RunResult], target: float, path: Path, title: str) -> None:
    """Writes a two-panel PNG, one line per run, the target as a dashed line.

    The left panel is the paper's second finding (time), the right its first (fresh
    examples): echoing should move a run left in both.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must precede pyplot
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for run in runs:
        seconds = [p["seconds"] for p in run.points]
        fresh = [p["fresh"] for p in run.points]
        accuracy = [100 * p["accuracy"] for p in run.points]
        label = f"{run.name} ({'reached' if run.reached else 'missed'})"
        for ax, xs in zip(axes, (seconds, fresh), strict=True):
            ax.plot(xs, accuracy, marker=".", label=label)
    for ax, xlabel in zip(axes, ("training wall-clock seconds", "fresh examples"), strict=True):
        ax.axhline(100 * target, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out test accuracy (%)")
    low = min((100 * p["accuracy"] for r in runs for p in r.points), default=0.0)
    axes[0].set_ylim(max(low - 2, 100 * target - 15), 100 * target + 4)
    axes[1].legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
