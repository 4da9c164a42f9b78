"""A resumable grid of demo runs: what to run, where results go, what is left.

``benchmarks/wallclock.py`` runs every (R, factor, variant, seed). A run takes minutes
and the grid hours, so each finished run is appended at once to a JSON-lines store,
keyed by :meth:`Spec.key`; the same command run again skips what the store holds and
continues. Speedups are computed from the store, never at run time, so a baseline
measured in an earlier invocation serves the runs of a later one. The store is the
reproduction's (:class:`dataecho.experiments.store.Store`); its records here are runs
(``kind`` ``"run"``) and step-time calibrations (``"calibration"``).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ..experiments.store import Store
from ..experiments.text import hms
from .config import ARMS

Factor = float | str  # a fixed echo factor >= 1, or "auto" (adaptive echoing)
BASELINE = "none"  # the variant of the baseline runs: no echo, the same for every variant


@dataclass(frozen=True)
class Spec:
    """One run of the grid; its fields are the store's key."""

    ratio: float  # R set: seconds to fetch a batch over seconds per training step
    factor: Factor  # 1.0 (baseline), a fixed factor, or "auto"
    variant: str  # where the echo stands (dataecho.VARIANTS), or "none" for the baseline
    seed: int
    preset: str  # the DemoConfig preset: default, quick or smoke
    budget: float | None  # --budget asked for, seconds; None: the preset's rule

    def key(self) -> str:
        """The store key: the fields as one JSON list.

        Example:
            >>> Spec(6.0, "auto", "batch", 0, "quick", None).key()
            '[6.0, "auto", "batch", 0, "quick", null]'
        """
        return json.dumps([self.ratio, self.factor, self.variant, self.seed, self.preset,
                           self.budget])

    @property
    def name(self) -> str:
        """The run's label: ``baseline``, ``batch e=4``, ``after_augmentation auto``."""
        if self.variant == BASELINE:
            return "baseline"
        return f"{self.variant} {'auto' if self.factor == 'auto' else f'e={self.factor:g}'}"


def factor_of(name: str, ratio: float) -> Factor:
    """``"R"`` -> R rounded half up, ``"auto"`` -> ``"auto"``, else the number.

    Example:
        >>> factor_of("R", 5.6), factor_of("R", 4.5), factor_of("auto", 2.0), factor_of("2", 6.0)
        (6.0, 5.0, 'auto', 2.0)
    """
    if name == "auto":
        return "auto"
    if name == "R":
        return float(max(1, math.floor(ratio + 0.5)))
    try:
        factor = float(name)
    except ValueError:
        factor = math.nan
    if not (math.isfinite(factor) and factor >= 1):
        raise ValueError(f"factors must be finite numbers >= 1 (1 is the baseline, which "
                         f"always runs), 'R' or 'auto', got {name!r}; pass e.g. "
                         "2 4 R auto")
    return factor


def plan(ratios: Iterable[float], factors: Iterable[str], variants: Iterable[str],
         seeds: Iterable[int], *, preset: str, budget: float | None) -> list[Spec]:
    """Every run, in order: per seed and R, one baseline, then each variant's factors.

    Seeds come outermost, so a grid stopped part-way has every condition at least once.

    The baseline (no echo) is the same pipeline for all three variants, so it runs once
    per (R, seed). A factor that resolves to another one (``R`` = 4 next to ``4``) or
    to 1 runs once or not at all.

    Example:
        >>> [s.name for s in plan([2], ["2", "R", "auto"], ["batch"], [0], preset="quick",
        ...                       budget=None)]
        ['baseline', 'batch e=2', 'batch auto']
    """
    variants = list(variants)
    for variant in variants:
        if variant not in ARMS:
            raise ValueError(f"variants must be among {', '.join(ARMS)}, got {variant!r}")
    specs = []
    factors = list(factors)
    for seed in seeds:
        for ratio in ratios:
            wanted = [f for f in dict.fromkeys(factor_of(n, ratio) for n in factors)
                      if f != 1.0]
            specs.append(Spec(float(ratio), 1.0, BASELINE, seed, preset, budget))
            specs += [Spec(float(ratio), factor, variant, seed, preset, budget)
                      for variant in variants for factor in wanted]
    return specs


def run_records(store: Store) -> list[dict[str, Any]]:
    """The run records of ``store``, one per key (a later duplicate replaces an earlier one).

    Example:
        >>> import pathlib, tempfile
        >>> store = Store(pathlib.Path(tempfile.mkdtemp()) / "grid.jsonl")
        >>> _ = store.append({"kind": "run", "key": "k", "time_to_target": 3.0})
        >>> _ = store.append({"kind": "calibration", "key": "c", "t_down_s": 0.04})
        >>> [r["key"] for r in run_records(store)], finished(store)
        (['k'], {'k'})
    """
    return list({r["key"]: r for r in store if r.get("kind") == "run"}.values())


def finished(store: Store) -> set[str]:
    """Keys of the finished runs in ``store``."""
    return {r["key"] for r in run_records(store)}


def calibration(store: Store, key: str) -> dict[str, Any] | None:
    """The latest calibration record with ``key`` in ``store``, if any.

    Example:
        >>> import pathlib, tempfile
        >>> store = Store(pathlib.Path(tempfile.mkdtemp()) / "grid.jsonl")
        >>> for t_down in (0.04, 0.05):
        ...     _ = store.append({"kind": "calibration", "key": "c", "t_down_s": t_down})
        >>> calibration(store, "c")["t_down_s"], calibration(store, "d")
        (0.05, None)
    """
    found = [r for r in store if r.get("kind") == "calibration" and r["key"] == key]
    return found[-1] if found else None


def run_grid(specs: list[Spec], store: Store, run: Callable[[Spec], dict[str, Any]], *,
             after: Callable[[], None] = lambda: None, log: Callable[[str], None] = print,
             clock: Callable[[], float] = time.perf_counter) -> int:
    """Runs the specs the store lacks, appending each result; returns how many ran.

    ``run(spec)`` returns the run's numbers; the store gets them with the spec's
    fields, its key and ``run_wall_s``; ``after()`` is called after each append (to
    rewrite the report). An exception (Ctrl-C included) leaves every finished run in
    the store. The ETA assumes the remaining runs take the mean time of the runs
    already stored for the same preset.
    """
    stored = finished(store)
    todo = [s for s in specs if s.key() not in stored]
    total, skipped = len(specs), len(specs) - len(todo)
    log(f"{skipped} of {total} runs already in {store.path}; {len(todo)} to run")
    for k, spec in enumerate(todo):
        walls = [r["run_wall_s"] for r in run_records(store)
                 if r.get("preset") == spec.preset and r.get("run_wall_s")]
        eta = (f"ETA {hms(statistics.mean(walls) * (len(todo) - k))}" if walls
               else "ETA after the first run")
        log(f"\n[{skipped + k + 1}/{total}] R={spec.ratio:g} seed={spec.seed} {spec.name} "
            f"({spec.preset} preset; {len(todo) - k} to go, {eta})")
        began = clock()
        numbers = run(spec)
        store.append({**numbers, **asdict(spec), "kind": "run", "key": spec.key(),
                      "run_wall_s": clock() - began})
        after()
    return len(todo)

