"""PNG figures mirroring the paper's Figs. 3, 5, 6, 7 and 8, one set per workload.

Every point is the median over seeds of the best trial's fresh examples to the target,
with min/max error bars; a search that missed the target is drawn as an open marker at
its condition's budget (which grows with the batch size). The dashed line is the ideal
"as good as fresh data": ``F(1)/e``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .analysis import ConditionResult, Spread
from .conditions import VARIANT_NAMES, Condition

Results = dict[Condition, ConditionResult]
COLORS = {"baseline": "0.4", "before_augmentation": "tab:blue",
          "after_augmentation": "tab:orange", "example": "tab:blue", "batch": "tab:green"}


def _default_buffer(cond: Condition) -> bool:
    return cond == Condition.default(cond.workload, cond.variant, cond.factor, cond.batch_size)


def _point(ax: Any, x: float, r: ConditionResult, w: dict[str, Any], color: str,
           label: str | None) -> None:
    s = r.fresh()
    if s.n == 0:
        return
    budget = r.budget or w["fresh_budget"]
    if not math.isfinite(s.median):
        ax.plot([x], [budget], "o", mfc="none", color=color, label=label)
        return
    # A missed seed draws the bar up to the budget: "more than this", never below the median.
    top = max(budget, s.median) if not math.isfinite(s.max) else s.max
    ax.errorbar([x], [s.median], yerr=[[s.median - s.min], [top - s.median]], fmt="o",
                color=color, capsize=3, label=label)


def _finish(ax: Any, title: str, xlabel: str, path: Path) -> Path:
    _empty_note(ax)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fresh examples to target")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=7)
    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=110)
    plt.close(ax.figure)
    return path


def _empty_note(ax: Any) -> None:
    if not ax.lines and not ax.collections and not ax.containers:
        ax.text(0.5, 0.5, "no condition of this figure in this run", ha="center",
                va="center", transform=ax.transAxes, color="0.4")


def _baseline(results: Results, batch_size: int) -> Spread | None:
    for cond, r in results.items():
        if cond.variant == "baseline" and cond.batch_size == batch_size:
            return r.fresh()
    return None


def fig3_variants(results: Results, w: dict[str, Any], path: Path) -> Path:
    """Fresh examples to target per variant at e = 2 (paper Fig. 3)."""
    ax = plt.figure(figsize=(6, 4)).gca()
    conds = sorted((c for c in results if c.batch_size == w["batch_size"] and c.factor in (1, 2)
                    and _default_buffer(c)), key=lambda c: list(VARIANT_NAMES).index(c.variant))
    for i, c in enumerate(conds):
        _point(ax, i, results[c], w, COLORS[c.variant], None)
    base = _baseline(results, w["batch_size"])
    if base is not None and math.isfinite(base.median):
        ax.axhline(base.median, color="0.4", lw=1, label="baseline F(1)")
        ax.axhline(base.median / 2, color="k", ls="--", lw=1, label="ideal F(1)/2")
    ax.set_xticks(range(len(conds)), [VARIANT_NAMES[c.variant].replace(", ", ",\n")
                                      for c in conds], fontsize=7)
    ax.set_ylim(bottom=0)
    return _finish(ax, f"{w['name']}: variants at e=2 (Fig. 3)", "", path)


def _sweep(results: Results, w: dict[str, Any], path: Path, title: str, xlabel: str,
           keep: Callable[[Condition], bool], x_of: Callable[[Condition], float],
           ideal: Callable[[float], float | None], xs_ideal: list[float],
           from_baseline: bool = False) -> Path:
    ax = plt.figure(figsize=(6, 4)).gca()
    base = [c for c in results if c.variant == "baseline" and keep(c)]
    for variant in dict.fromkeys(c.variant for c in results if keep(c)):
        conds = sorted((c for c in results if c.variant == variant and keep(c)), key=x_of)
        if from_baseline and base and variant != "baseline":
            conds = base[:1] + conds  # each factor sweep starts at the baseline, e = 1
        color = COLORS[variant]
        meds = [(x_of(c), results[c].fresh().median) for c in conds]
        finite = [(x, m) for x, m in meds if math.isfinite(m)]
        if len(finite) > 1:
            ax.plot(*zip(*finite, strict=True), "-", color=color, alpha=0.5)
        for c in conds:
            _point(ax, x_of(c), results[c], w, COLORS[c.variant], VARIANT_NAMES[c.variant])
    line = [(x, ideal(x)) for x in xs_ideal]
    line = [(x, y) for x, y in line if y is not None and math.isfinite(y)]
    if line:
        ax.plot(*zip(*line, strict=True), "k--", lw=1, label="ideal F(1)/e")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    return _finish(ax, title, xlabel, path)


def fig5_factor(results: Results, w: dict[str, Any], path: Path) -> Path:
    """Fresh examples to target against the echoing factor (paper Fig. 5)."""
    base = _baseline(results, w["batch_size"])
    keep = [c for c in results if c.batch_size == w["batch_size"] and _default_buffer(c)]
    top = max((c.factor for c in keep), default=1)
    return _sweep(results, w, path, f"{w['name']}: echoing factor (Fig. 5)",
                  "echoing factor e", lambda c: c in keep, lambda c: c.factor,
                  lambda e: None if base is None else base.median / e,
                  [2 ** (k / 4) for k in range(int(4 * math.log2(top)) + 1)],
                  from_baseline=True)


def fig6_batch(results: Results, w: dict[str, Any], path: Path) -> Path:
    """Fresh examples to target against the batch size at e = 2 (paper Fig. 6)."""
    def ideal(size: float) -> float | None:
        base = _baseline(results, int(size))
        return None if base is None else base.median / 2

    keep = [c for c in results if c.factor in (1, 2) and _default_buffer(c)]
    sizes = sorted({float(c.batch_size) for c in keep})
    return _sweep(results, w, path, f"{w['name']}: batch size at e=2 (Fig. 6)",
                  "batch size", lambda c: c in keep, lambda c: c.batch_size, ideal, sizes)


def fig7_shuffle(results: Results, w: dict[str, Any], path: Path) -> Path:
    """Fresh examples to target against the post-echo shuffle buffer (paper Fig. 7)."""
    return _fig7_lines(results, w, path, _baseline(results, w["batch_size"]))


def _fig7_lines(results: Results, w: dict[str, Any], path: Path, base: Spread | None) -> Path:
    ax = plt.figure(figsize=(6, 4)).gca()
    for variant in dict.fromkeys(c.variant for c in results if c.variant != "baseline"):
        conds = sorted((c for c in results if c.variant == variant and c.factor == 2
                        and c.batch_size == w["batch_size"]), key=lambda c: c.buffer_batches)
        xs = [math.log2(1 + c.buffer_batches) for c in conds]
        for x, c in zip(xs, conds, strict=True):
            _point(ax, x, results[c], w, COLORS[variant], VARIANT_NAMES[variant])
        meds = [results[c].fresh().median for c in conds]
        ax.plot([x for x, m in zip(xs, meds, strict=True) if math.isfinite(m)],
                [m for m in meds if math.isfinite(m)], "-", color=COLORS[variant], alpha=0.5)
    ticks = sorted({c.buffer_batches for c in results if c.factor == 2
                    and c.batch_size == w["batch_size"]})
    ax.set_xticks([math.log2(1 + t) for t in ticks], [f"{t:g}" if t else "none" for t in ticks])
    if base is not None and math.isfinite(base.median):
        ax.axhline(base.median, color="0.4", lw=1, label="baseline F(1)")
        ax.axhline(base.median / 2, color="k", ls="--", lw=1, label="ideal F(1)/2")
    ax.set_ylim(bottom=0)
    return _finish(ax, f"{w['name']}: shuffle buffer after echo, e=2 (Fig. 7)",
                   "post-echo shuffle buffer, in batches of examples", path)


def fig8_no_harm(results: Results, w: dict[str, Any], path: Path) -> Path:
    """Best metric within the fresh-example budget, and the curves (paper Fig. 8)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    conds = [c for c in sorted(results, key=lambda c: list(VARIANT_NAMES).index(c.variant))
             if results[c].no_harm]
    for i, c in enumerate(conds):
        s = results[c].quality()
        left.errorbar([i], [s.median], yerr=[[s.median - s.min], [s.max - s.median]], fmt="o",
                      color=COLORS[c.variant], capsize=3)
        for record in results[c].no_harm.values():
            curve = record["curve"]
            pts = [(f, m) for f, m in zip(curve["fresh"], curve["metric"], strict=True)
                   if m is not None and math.isfinite(m)]
            right.plot(*zip(*pts, strict=True), color=COLORS[c.variant], alpha=0.6, lw=1,
                       label=VARIANT_NAMES[c.variant] + (f" e={c.factor}" if c.factor > 1 else ""))
    left.set_xticks(range(len(conds)), [VARIANT_NAMES[c.variant].replace(", ", ",\n")
                                        for c in conds], fontsize=7)
    values = [v for c in conds for v in (results[c].quality().min, results[c].quality().max)
              if math.isfinite(v)]
    if values:  # at least +-0.01 accuracy (or +-0.05 nats) so noise does not look large
        pad = 0.01 if w["metric"] == "accuracy" else 0.05
        left.set_ylim(min(values) - pad, max(values) + pad)
    left.set_ylabel(f"best {w['metric']} within {w['fresh_budget']:,} fresh examples")
    left.set_title(f"{w['name']}: no harm at equal fresh budget (Fig. 8)", fontsize=10)
    left.grid(alpha=0.3)
    _empty_note(left)
    if not conds:
        _empty_note(right)
    right.axhline(w["target"], color="k", ls=":", lw=1, label="target")
    right.set_xlabel("fresh examples")
    right.set_ylabel(w["metric"])
    best = [results[c].quality() for c in conds]
    if w["metric"] == "accuracy":
        top = max([s.max for s in best if math.isfinite(s.max)], default=w["target"])
        right.set_ylim(w["target"] - 0.1, min(1.0, top + 0.01))
    else:
        low = min([s.min for s in best if math.isfinite(s.min)], default=w["target"])
        right.set_ylim(low - 0.05, w["target"] + 0.7)
    right.grid(alpha=0.3)
    handles, labels = right.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    right.legend(unique.values(), unique.keys(), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


FIGURES: dict[str, Callable[[Results, dict[str, Any], Path], Path]] = {
    "fig3_variants": fig3_variants, "fig5_factor": fig5_factor, "fig6_batch": fig6_batch,
    "fig7_shuffle": fig7_shuffle, "fig8_no_harm": fig8_no_harm,
}


def draw_all(results: Results, w: dict[str, Any], out: Path) -> dict[str, Path]:
    """Draws every figure for one workload into ``out``; returns name -> path.

    Example:
        >>> import tempfile
        >>> w = {"name": "x", "batch_size": 8, "fresh_budget": 100, "metric": "accuracy",
        ...      "target": 0.9}
        >>> sorted(draw_all({}, w, Path(tempfile.mkdtemp())))[0]
        'fig3_variants'
    """
    out.mkdir(parents=True, exist_ok=True)
    return {name: fn(results, w, out / f"{w['name']}_{name}.png") for name, fn in FIGURES.items()}

