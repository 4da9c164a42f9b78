"""One row per paper finding: the claim, what we measured, and a verdict.

Each ``f*`` function turns the per-condition results of every workload into one
:class:`Finding`; the verdict comes from :mod:`dataecho.experiments.verdict`, the
same-seed ratios from :mod:`dataecho.experiments.analysis` and the wording of numbers
from :mod:`dataecho.experiments.text`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from .analysis import ConditionResult, efficiency, paired_ratios, speedup_bound
from .conditions import Condition
from .text import fmt, metric_text, ratio_text, spread_text, times
from .verdict import MIN_SEEDS, compare, verdict
from .wallclock import Cell

Results = dict[Condition, ConditionResult]
Work = dict[str, tuple[Results, int]]  # workload -> (its results, its default batch size)


@dataclass(frozen=True)
class Finding:
    """A row of the findings table."""

    number: str
    claim: str
    measured: str
    verdict: str


def is_default(cond: Condition) -> bool:
    """Whether ``cond`` uses its variant's default post-echo shuffle buffer."""
    return cond == Condition.default(cond.workload, cond.variant, cond.factor, cond.batch_size)


def default(results: Results, variant: str, factor: int, batch: int) -> ConditionResult | None:
    """The result of the default-buffer condition, if it was run."""
    for cond, r in results.items():
        if (cond.variant, cond.factor, cond.batch_size) == (variant, factor, batch) and \
                is_default(cond):
            return r
    return None


def with_baseline(work: Work) -> Iterator[tuple[str, Results, int, ConditionResult]]:
    """Each workload with a baseline at its default batch: name, results, batch, baseline.

    Workloads without one are skipped; the others come in the order of ``work``.

    Example:
        >>> base = Condition.default("w", "baseline", 1, 8)
        >>> work = {"w": ({base: ConditionResult(base)}, 8), "v": ({}, 8)}
        >>> [(wname, b) for wname, _, b, _ in with_baseline(work)]
        [('w', 8)]
    """
    for wname, (res, b) in work.items():
        base = default(res, "baseline", 1, b)
        if base is not None:
            yield wname, res, b, base


def name(variant: str) -> str:
    """Short variant name for tables."""
    return {"before_augmentation": "before", "after_augmentation": "after"}.get(variant, variant)


def f1_fewer_fresh(work: Work) -> Finding:
    """Finding 1: at e = 2 some variant needs fewer fresh examples than the baseline."""
    lines, parts = [], []
    for wname, (res, b) in work.items():
        base = default(res, "baseline", 1, b)
        if base is None:
            if any(c.variant != "baseline" for c in res):
                parts.append((0, False))
                lines.append(f"**{wname}**: no baseline result yet")
            continue
        best: tuple[int, bool] | None = None
        items = [f"baseline {spread_text(base.fresh())}"]
        for cond in sorted(c for c in res if c.factor == 2 and c.batch_size == b
                           and is_default(c)):
            r = res[cond]
            sign, clear = compare(r.fresh(), base.fresh())
            ratio = r.fresh().median / base.fresh().median
            items.append(f"{name(cond.variant)} {spread_text(r.fresh())} ({times(ratio)})")
            if best is None or (-sign, clear) > best:
                best = (-sign, clear)
        parts.append(best or (0, False))
        lines.append(f"**{wname}**: " + "; ".join(items))
    return Finding("1", "Echoing reduces fresh examples: at e = 2 at least one variant beats "
                   "the baseline on every workload.", "<br>".join(lines) or "no data",
                   verdict(parts))


def f2_time(work: Work, ratios: dict[str, float],
            wallclock: list[Cell] | None = None, source: str = "") -> Finding:
    """Finding 2: training time, judged on the input-bound wall-clock benchmark.

    The searches run from memory (R well below 1), so they only show what echoing costs
    in steps and CPU time (:func:`search_lines`); ``wallclock`` (from
    :func:`dataecho.experiments.wallclock.load`) holds speedups measured with the input
    pipeline throttled to R, and decides the verdict (:func:`wallclock_lines`).
    """
    wall, parts = wallclock_lines(wallclock or [], source)
    return Finding("2", "Echoing reduces training time when the input pipeline is the "
                   "bottleneck (up to 3.25x for ResNet-50 with R about 6).",
                   "<br>".join(search_lines(work, ratios) + wall), verdict(parts))


def search_lines(work: Work, ratios: dict[str, float]) -> list[str]:
    """Per workload, what e = 2 costs the in-memory searches: the bound F(1)/F(2), and the
    steps and CPU time to the target, each as a same-seed ratio to the baseline.

    ``ratios`` holds each workload's R (input-pipeline time over model time per step).
    """
    lines = []
    for wname, res, b, base in with_baseline(work):
        speeds = []
        for cond in sorted(c for c in res if c.factor == 2 and c.batch_size == b
                           and is_default(c)):
            r = res[cond]
            if r.best:
                bound = speedup_bound(r, base)
                steps, cpu = (paired_ratios(r, base, key) for key in ("steps", "cpu_seconds"))
                speeds.append(f"{name(cond.variant)}: F(1)/F(2) = {spread_text(bound, ratio_text)}"
                              f"; steps to target {spread_text(steps, ratio_text)} and CPU time "
                              f"{spread_text(cpu, ratio_text)} times the baseline's")
        r_value = ratios.get(wname, math.nan)
        lines.append(f"**{wname}** searches, in memory (R = input-pipeline time / model "
                     f"time per step = {r_value:.2g}, so echoing only adds steps): " +
                     "; ".join(speeds) + " (same-seed ratios)")
    return lines


def wallclock_lines(cells: list[Cell], source: str) -> tuple[list[str], list[tuple[int, bool]]]:
    """Per R, the wall-clock speedups and one verdict part; then a note on the source.

    Per R, the best fixed-factor cell counts (adaptive echoing is not the paper's and is
    only shown): the claim holds there when its speedup exceeds 1 on every seed.
    """
    lines, parts = [], []
    for ratio in sorted({c.ratio for c in cells}, reverse=True):
        mine = [c for c in cells if c.ratio == ratio]
        fixed = _best_fixed(mine)
        adaptive = [c for c in mine if c.factor == "auto"]
        if fixed:
            top = max(fixed, key=lambda c: c.speedup.median)
            parts.append((1 if top.speedup.median > 1 else -1, top.speedup.n >= MIN_SEEDS
                          and (top.speedup.min > 1 or top.speedup.max < 1)))
        lines.append(f"**wall clock, R = {ratio:g}** (measured {mine[0].measured_ratio:.2f}), "
                     "speedup over the same seed's baseline: best fixed factor " +
                     "; ".join(_speed_text(c) for c in fixed) + "; adaptive " +
                     "; ".join(_speed_text(c) for c in adaptive))
    if cells:
        lines.append(f"(Wall-clock rows: `{source}`, Fashion-MNIST read over a link throttled "
                     "to R; the bound is min(R, e). The verdict uses fixed factors only.)")
    else:
        lines.append("No wall-clock measurement given (run `benchmarks/wallclock.py` and "
                     "pass `--wallclock`): F(1)/F(e) is the speedup an input-bound run with "
                     "R >= e would get.")
    return lines, parts


def _best_fixed(cells: list[Cell]) -> list[Cell]:
    """The fixed factor with the highest median speedup, per variant."""
    best: dict[str, Cell] = {}
    for c in cells:
        if c.factor != "auto" and (c.variant not in best or
                                   c.speedup.median > best[c.variant].speedup.median):
            best[c.variant] = c
    return list(best.values())


def _speed_text(c: Cell) -> str:
    missed = f", {c.missed} missed" if c.missed else ""
    s = c.speedup
    return f"{c.label()} {s.median:.2f}x [{s.min:.2f}, {s.max:.2f}] (n={s.n}{missed})"


def f3_factor(work: Work) -> Finding:
    """Finding 3: larger factors keep helping up to a bound, with diminishing returns."""
    lines, parts = [], []
    for wname, res, b, base in with_baseline(work):
        for variant in dict.fromkeys(c.variant for c in res if c.factor > 2):
            runs = sorted(((c.factor, r) for c, r in res.items() if c.variant == variant
                           and c.batch_size == b and is_default(c) and r.best),
                          key=lambda t: t[0])
            if len(runs) < 2:
                continue
            f1 = base.fresh().median
            text = ", ".join(f"e={e}: {spread_text(r.fresh())} "
                             f"({times(f1 / r.fresh().median)} of ideal {e}x)" for e, r in runs)
            top = runs[-1][1]
            sign, clear = compare(top.fresh(), base.fresh())
            parts.append((-sign, clear))  # the largest factor still beats the baseline
            # Diminishing returns: the share of the ideal F(1)/e reached falls with e.
            low, high = (efficiency(r, base, e) for e, r in (runs[0], runs[-1]))
            sign, clear = compare(low, high)
            parts.append((sign, clear))
            # The best factor lies in 4-8: compare the best inside with the best outside.
            inside = [r for e, r in runs if 4 <= e <= 8]
            outside = [r for e, r in runs if not 4 <= e <= 8]
            if inside and outside:
                best_in = min(inside, key=lambda r: r.fresh().median)
                best_out = min(outside, key=lambda r: r.fresh().median)
                sign, clear = compare(best_in.fresh(), best_out.fresh())
                parts.append((-sign, clear))
            best = min(runs, key=lambda t: t[1].fresh().median)[0]
            lines.append(f"**{wname}, {name(variant)}**: baseline {fmt(f1)}; {text}; best "
                         f"e={best}; share of ideal (same seed) e={runs[0][0]} "
                         f"{spread_text(low, ratio_text)}, e={runs[-1][0]} "
                         f"{spread_text(high, ratio_text)}")
    measured = ("<br>".join(lines) + "<br>(Three parts per variant: the largest factor beats "
                "the baseline; the share of the ideal falls from the smallest to the largest "
                "factor; the best factor is in 4-8.)")
    return Finding("3", "Echoing stays useful up to a reasonable factor: on LM1B the best e "
                   "is 4-8 and e = 16 still beats the baseline, with diminishing returns.",
                   measured if lines else "no data", verdict(parts))


def f4_batch(work: Work) -> Finding:
    """Finding 4: batch echoing gains relative to the baseline as the batch grows."""
    lines, parts = [], []
    for wname, (res, _) in work.items():
        sizes = sorted({c.batch_size for c in res if c.variant == "baseline"})
        if len(sizes) < 2:
            continue
        for variant in dict.fromkeys(c.variant for c in res if c.variant != "baseline"):
            ratios = []
            for size in sizes:
                base, r = default(res, "baseline", 1, size), default(res, variant, 2, size)
                if base is not None and r is not None:
                    ratios.append((size, r.fresh().median / base.fresh().median))
            if len(ratios) < 2:
                continue
            small, large = (paired_ratios(default(res, variant, 2, size),
                                          default(res, "baseline", 1, size))
                            for size in (ratios[0][0], ratios[-1][0]))
            sign, clear = compare(large, small)
            lines.append(f"**{wname}, {name(variant)}** F(2)/F(1) by batch size: " +
                         ", ".join(f"B={s}: " + (f"{q:.2f}" if math.isfinite(q) else "n/a")
                                   for s, q in ratios) +
                         f"; same seed: B={ratios[0][0]} {spread_text(small, ratio_text)}, "
                         f"B={ratios[-1][0]} {spread_text(large, ratio_text)}" +
                         ("" if variant == "batch" else " (" + _trend(sign, clear) + ")"))
            if variant == "batch":
                parts.append((-sign, clear))
    measured = ("<br>".join(lines) + "<br>(Ratios of medians, then same-seed ratios at the "
                "smallest and largest batch. The verdict judges the first half, batch "
                "echoing, on the same-seed ratios; the second half says example echoing "
                "*can* get worse, which no measurement refutes, so its rows are shown and "
                "not judged.)")
    return Finding("4", "Larger batches make batch echoing relatively better; example "
                   "echoing can get worse at large batches unless shuffling keeps copies "
                   "apart.", measured if lines else "no data", verdict(parts))


def _trend(sign: int, clear: bool) -> str:
    """How example echoing's F(2)/F(1) moved from the smallest to the largest batch."""
    if sign == 0:
        return "no change at the largest batch"
    way = "worse" if sign > 0 else "better"
    return f"{way} at the largest batch, " + ("disjoint ranges" if clear else
                                              "overlapping ranges")


def f5_shuffle(work: Work) -> Finding:
    """Finding 5: a larger post-echo shuffle buffer helps both echoing kinds."""
    lines, parts = [], []
    for wname, (res, b) in work.items():
        for variant in dict.fromkeys(c.variant for c in res if c.variant != "baseline"):
            runs = sorted(((c.buffer_batches, r) for c, r in res.items()
                           if c.variant == variant and c.factor == 2 and c.batch_size == b),
                          key=lambda t: t[0])
            if len(runs) < 2:
                continue
            # The window's items are read before they are trained on and count as fresh
            # when read: up to window / e examples (batches, for batch echoing) more.
            last = max(c for c in res if c.variant == variant and c.factor == 2
                       and c.batch_size == b and c.buffer_batches == runs[-1][0])
            ahead = last.buffer_size * (b if variant == "batch" else 1) / last.factor
            lines.append(f"**{wname}, {name(variant)}**: " + ", ".join(
                f"buffer {k:g}: {spread_text(r.fresh())}" for k, r in runs) +
                f" (read-ahead of the largest window, counted as fresh: up to {fmt(ahead)})")
            sign, clear = compare(runs[-1][1].fresh(), runs[0][1].fresh())
            parts.append((-sign, clear))
        kinds = {"batch" if c.variant == "batch" else "example"
                 for c in res if c.variant != "baseline"}
        swept = {"batch" if v == "batch" else "example" for v in dict.fromkeys(
            c.variant for c in res if c.variant != "baseline")
            if len({c.buffer_batches for c in res if c.variant == v and c.factor == 2
                    and c.batch_size == b}) >= 2}
        for kind in sorted(kinds - swept):  # the claim is about both kinds
            parts.append((0, False))
            lines.append(f"**{wname}, {kind} echoing**: no buffer sweep yet")
    return Finding("5", "More shuffling after the echo stage helps both batch and example "
                   "echoing.", "<br>".join(lines) or "no data", verdict(parts))


def f6_no_harm(work: Work, higher: dict[str, bool]) -> Finding:
    """Finding 6: at an equal fresh budget, echoing does not lower the final quality."""
    lines, parts = [], []
    for wname, res, _, base in with_baseline(work):
        if not base.no_harm:
            continue
        items = [f"baseline {spread_text(base.quality(), metric_text)}"]
        for cond, r in sorted(res.items()):
            if r.no_harm and cond.variant != "baseline":
                q, bq = r.quality(), base.quality()
                items.append(f"{name(cond.variant)} e={cond.factor} {spread_text(q, metric_text)}")
                worse = q.median < bq.median if higher[wname] else q.median > bq.median
                enough = min(q.n, bq.n) >= MIN_SEEDS
                clearly = enough and ((q.max < bq.min) if higher[wname] else (q.min > bq.max))
                parts.append((-1, True) if clearly else (1, enough and not worse))
        lines.append(f"**{wname}** best metric within the budget: " + "; ".join(items))
    return Finding("6", "Echoing does not harm the best validation performance reached "
                   "within a fixed fresh-example budget.", "<br>".join(lines) or "no data",
                   verdict(parts))


def f7_ranking(work: Work) -> Finding:
    """Ranking: before >= after >= batch (fewer fresh examples is better)."""
    lines, parts = [], []
    for wname, (res, b) in work.items():
        order = [default(res, v, 2, b) for v in ("before_augmentation", "after_augmentation",
                                                 "batch")]
        if any(r is None for r in order):
            continue
        lines.append(f"**{wname}**: " + ", ".join(
            f"{label} {spread_text(r.fresh())}" for label, r in
            zip(("before", "after", "batch"), order, strict=True) if r is not None))
        for x, y in ((order[0], order[1]), (order[1], order[2])):
            assert x is not None and y is not None
            sign, clear = compare(x.fresh(), y.fresh())
            parts.append((-sign, clear))  # a tie, or both missed, decides nothing
    return Finding("7", "Ranking, roughly: example echoing before augmentation >= after "
                   "augmentation >= batch echoing.", "<br>".join(lines) or
                   "no data (needs a workload with augmentation)", verdict(parts))
