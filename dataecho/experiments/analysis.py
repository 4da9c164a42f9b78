"""From trial records to per-condition numbers: best trial per search, then seed spread,
and the same-seed ratios between an echoing condition and its baseline.

For each (condition, seed) search the best trial is the one with the fewest fresh
examples to the target (interpolated crossing; ties go to the earlier trial). A search
whose trials all missed the target gives ``inf`` ("not reached within the budget"):
it is never replaced by an estimate, and a median over seeds that includes it is
``inf`` whenever half or more of the searches missed. A search still running (fewer
trial records than its ``search_trials``) is left out of every number until it is
complete: its best so far is not its best.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .conditions import Condition
from .record import Record


@dataclass(frozen=True)
class Spread:
    """Median, minimum and maximum of per-seed values, and how many there were.

    Example:
        >>> s = Spread.of([3.0, 1.0, math.inf])
        >>> s.median, s.min, s.max, s.n, s.finite
        (3.0, 1.0, inf, 3, 2)
    """

    median: float
    min: float
    max: float
    n: int
    finite: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        """The spread of ``values`` (``inf`` marks a search that missed the target)."""
        if not values:
            return cls(math.nan, math.nan, math.nan, 0, 0)
        ordered = sorted(values)
        return cls(_median(ordered), ordered[0], ordered[-1], len(ordered),
                   sum(math.isfinite(v) for v in ordered))


@dataclass
class ConditionResult:
    """Everything the report needs about one condition."""

    condition: Condition
    trials: int = 0  # search trials run (all seeds)
    statuses: dict[str, int] = field(default_factory=dict)  # status -> count
    best: dict[int, Record | None] = field(default_factory=dict)  # seed -> best trial
    running: dict[int, tuple[int, int]] = field(default_factory=dict)  # seed -> (run, of)
    budget: int = 0  # fresh-example budget of this condition's trials (grows with B)
    no_harm: dict[int, Record] = field(default_factory=dict)  # seed -> budget-mode trial

    def fresh(self, measure: str = "interpolated") -> Spread:
        """Fresh examples to the target over seeds (``inf`` where a search missed)."""
        return self.value(measure)

    def value(self, key: str) -> Spread:
        """A crossing field (``steps``, ``seconds``, ``cpu_seconds``) of the best trials
        over seeds; ``cpu_seconds`` falls back to wall seconds in older records."""
        return Spread.of(list(self.per_seed(key).values()))

    def per_seed(self, key: str = "interpolated") -> dict[int, float]:
        """A crossing field of the best trial by seed (``inf`` where the search missed);
        the default is fresh examples to the target."""
        def get(r: Record) -> float:
            crossing = r["crossing"]
            if key == "cpu_seconds" and key not in crossing:
                return float(crossing["seconds"])  # records older than the CPU clock
            return float(crossing[key])

        return {seed: get(r) if r else math.inf for seed, r in sorted(self.best.items())}

    def quality(self) -> Spread:
        """Best metric within the fresh-example budget (no-harm trials) over seeds."""
        return Spread.of([float(r["best_metric"]) for r in self.no_harm.values()
                          if r.get("best_metric") is not None])


def best_trial(records: Iterable[Record]) -> Record | None:
    """The trial with the fewest fresh examples to the target, or None if none reached.

    Example:
        >>> rs = [{"index": 0, "crossing": {"interpolated": 90.0}},
        ...       {"index": 1, "crossing": None}, {"index": 2, "crossing": {"interpolated": 80.0}}]
        >>> best_trial(rs)["index"]
        2
    """
    reached = [r for r in records if r.get("crossing")]
    if not reached:
        return None
    return min(reached, key=lambda r: (float(r["crossing"]["interpolated"]), r["index"]))


def prune_at(records: Iterable[Record]) -> float | None:
    """The crossing a later trial of the search must beat (None before any crossing)."""
    best = best_trial(records)
    return None if best is None else float(best["crossing"]["interpolated"])


def collect(records: Iterable[Record]) -> dict[str, dict[Condition, ConditionResult]]:
    """Groups trial records by workload and condition, keeping the best per seed.

    Only complete searches count; incomplete ones are listed in ``running``.

    Example:
        >>> rec = {"kind": "trial", "mode": "search", "seed": 0, "status": "reached",
        ...        "search_trials": 2, "index": 0, "crossing": {"interpolated": 5.0},
        ...        "condition": {"workload": "w", "variant": "baseline", "factor": 1,
        ...                      "batch_size": 8, "buffer_size": 1}}
        >>> r = next(iter(collect([rec])["w"].values()))
        >>> r.best, r.running
        ({}, {0: (1, 2)})
        >>> r = next(iter(collect([rec, {**rec, "index": 1}])["w"].values()))
        >>> r.best[0]["index"], r.running
        (0, {})
    """
    searches: dict[tuple[Condition, int], list[Record]] = defaultdict(list)
    out: dict[str, dict[Condition, ConditionResult]] = defaultdict(dict)
    for record in records:
        if record.get("kind") != "trial":
            continue
        cond = Condition(**record["condition"])
        result = out[cond.workload].setdefault(cond, ConditionResult(cond))
        result.budget = int(record.get("config", {}).get("fresh_budget", result.budget))
        if record["mode"] == "budget":
            result.no_harm[int(record["seed"])] = record
            continue
        searches[cond, int(record["seed"])].append(record)
        result.trials += 1
        result.statuses[record["status"]] = result.statuses.get(record["status"], 0) + 1
    for (cond, seed), trials in searches.items():
        want = max(int(r.get("search_trials", 0)) for r in trials)
        if len(trials) < want:
            out[cond.workload][cond].running[seed] = (len(trials), want)
        else:
            out[cond.workload][cond].best[seed] = best_trial(trials)
    return dict(out)



def paired_ratios(r: ConditionResult | None, base: ConditionResult | None,
                  key: str = "interpolated") -> Spread:
    """``echo / baseline`` of the same seed for a crossing field (default: fresh examples),
    over the seeds both have.

    A missed echo search gives ``inf``; a seed whose baseline missed is left out (no ratio).

    Example:
        >>> a, b = (ConditionResult(Condition.default("w", "baseline", 1, 8)) for _ in "ab")
        >>> a.best = {0: {"crossing": {"interpolated": 50.0}}, 1: None}
        >>> b.best = {0: {"crossing": {"interpolated": 100.0}}, 1: {"crossing":
        ...           {"interpolated": 80.0}}}
        >>> s = paired_ratios(a, b)
        >>> s.min, s.max, s.n
        (0.5, inf, 2)
    """
    return Spread.of(_same_seed(r, base, key))


def speedup_bound(r: ConditionResult, base: ConditionResult) -> Spread:
    """``F(1) / F(e)`` of the same seed, the inverse of :func:`paired_ratios`: the
    training-time speedup an input-bound run (R >= e) could get; 0 where the echo
    search missed.

    Example:
        >>> echo = ConditionResult(Condition.default("w", "batch", 2, 8))
        >>> base = ConditionResult(Condition.default("w", "baseline", 1, 8))
        >>> echo.best, base.best = {0: None}, {0: {"crossing": {"interpolated": 9.0}}}
        >>> speedup_bound(echo, base).max
        0.0
    """
    return Spread.of([1 / x for x in _same_seed(r, base, "interpolated")])


def efficiency(r: ConditionResult, base: ConditionResult, factor: int) -> Spread:
    """Share of the ideal reached, ``F(1) / (e * F(e))``, same seed (0 where e missed).

    Example:
        >>> echo = ConditionResult(Condition.default("w", "batch", 2, 8))
        >>> base = ConditionResult(Condition.default("w", "baseline", 1, 8))
        >>> echo.best = {0: {"crossing": {"interpolated": 60.0}}}
        >>> base.best = {0: {"crossing": {"interpolated": 90.0}}}
        >>> efficiency(echo, base, 2).median
        0.75
    """
    mine, theirs = r.per_seed(), base.per_seed()
    return Spread.of([theirs[s] / (factor * mine[s]) for s in mine
                      if s in theirs and math.isfinite(theirs[s])])


def _same_seed(r: ConditionResult | None, base: ConditionResult | None,
               key: str) -> list[float]:
    if r is None or base is None:
        return []
    mine, theirs = r.per_seed(key), base.per_seed(key)
    return [mine[seed] / theirs[seed] for seed in mine
            if seed in theirs and math.isfinite(theirs[seed])]


def _median(ordered: Sequence[float]) -> float:
    if all(math.isfinite(v) for v in ordered):
        return float(statistics.median(ordered))
    n = len(ordered)  # with infinities, take the middle order statistic(s) directly
    mid = ordered[(n - 1) // 2], ordered[n // 2]
    return math.inf if math.inf in mid else (mid[0] + mid[1]) / 2
