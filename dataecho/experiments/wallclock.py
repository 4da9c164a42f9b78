"""Finding 2's evidence: wall-clock speedups from the input-bound benchmark.

The reproduction's searches keep their data in memory, so they are never input-bound
and cannot show the paper's training-time claim. ``benchmarks/wallclock.py`` can: it
trains on Fashion-MNIST read over a link throttled to a chosen ``R`` and stores, per
(R, variant, factor, seed), the time to the target next to the same seed's baseline.
This module reads that benchmark's JSON summary file so the report can judge finding 2
on measured speedups, with the same spread and verdict rules as the other findings.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .analysis import Spread

#: Where ``benchmarks/wallclock.py --tag full`` writes its summary, from the repo root.
DEFAULT = Path("benchmarks") / "results" / "wallclock-full.json"


@dataclass(frozen=True)
class Cell:
    """Speedups of one (R, variant, factor) of the wall-clock grid over its seeds.

    Attributes:
        ratio: the R the link was throttled to.
        measured_ratio: median R measured from the baselines' stalls.
        variant: the echoing variant (``before_augmentation``, ...).
        factor: ``"2"``, ``"4"``, ... or ``"auto"``.
        speedup: baseline time to target over this run's, per seed (interpolated
            crossings); a run that missed the target counts as 0.
        missed: how many seeds missed the target within the time budget.
    """

    ratio: float
    measured_ratio: float
    variant: str
    factor: str
    speedup: Spread
    missed: int

    def label(self) -> str:
        """Short name for tables, e.g. ``before e=4``."""
        short = {"before_augmentation": "before", "after_augmentation": "after"}
        return f"{short.get(self.variant, self.variant)} e={self.factor}"


def load(path: str | Path) -> list[Cell]:
    """The echoing cells of a wall-clock benchmark summary file, in the grid's order.

    Args:
        path: a ``wallclock-<tag>.json`` written by ``benchmarks/wallclock.py``.

    Raises:
        ValueError: the file is not such a summary (no ``runs`` list).

    Example:
        >>> import json, tempfile
        >>> runs = [{"ratio": 6.0, "seed": 0, "variant": v, "factor": f, "reached": True,
        ...          "ratio_measured": 5.9, "speedup_interpolated": s}
        ...         for v, f, s in (("none", 1.0, 1.0), ("batch", 4.0, 1.5))]
        >>> path = Path(tempfile.mkdtemp()) / "w.json"
        >>> _ = path.write_text(json.dumps({"runs": runs}))
        >>> [(c.label(), c.speedup.median) for c in load(path)]
        [('batch e=4', 1.5)]
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list):
        raise ValueError(f"wallclock file {path} has no 'runs' list: pass the .json summary "
                         "that benchmarks/wallclock.py writes (e.g. "
                         f"{DEFAULT}), not its .jsonl store")
    groups: dict[tuple[float, str, str], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        if run.get("variant") in (None, "none"):
            continue  # the baselines are the denominators, already in every speedup
        groups[float(run["ratio"]), run["variant"], _factor(run["factor"])].append(run)
    cells = []
    for (ratio, variant, factor), rs in groups.items():
        measured = [float(r["ratio_measured"]) for r in rs if r.get("ratio_measured")]
        speedups = [_speedup(r) for r in rs]
        cells.append(Cell(ratio, statistics.median(measured) if measured else math.nan,
                          variant, factor, Spread.of(speedups),
                          sum(not r["reached"] for r in rs)))
    return cells


def _factor(value: Any) -> str:
    if isinstance(value, str):
        return value
    return f"{float(value):g}"


def _speedup(run: dict[str, Any]) -> float:
    value = run.get("speedup_interpolated") or run.get("speedup")
    # A run that never reached the target within its time budget gained nothing we can
    # measure: counting it as 0 keeps it in n and can only lower the spread.
    return float(value) if value and run.get("reached") else 0.0
