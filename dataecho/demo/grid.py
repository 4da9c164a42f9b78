"""A resumable grid of demo runs: what to run, where results go, what is left.

``benchmarks/wallclock.py`` runs every (R, factor, variant, seed). A run takes minutes
and the grid hours, so each finished run is appended at once to a JSON-lines store,
keyed by :meth:`Spec.key`; the same command run again skips what the store holds and
continues. Speedups are computed from the store, never at run time, so a baseline
measured in an earlier invocation serves the runs of a later one.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .._json import finite
from ..pipeline import VARIANTS

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
        if variant not in VARIANTS:
            raise ValueError(f"variants must be among {', '.join(VARIANTS)}, got {variant!r}")
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


class Store:
    """A JSON-lines file: one record per finished run, plus calibration records.

    Records are dicts with ``kind`` (``"run"`` or ``"calibration"``) and ``key``. Each
    is appended as one line and flushed to disk; a line cut short by a crash is
    skipped when reading, so that run simply runs again.

    Example:
        >>> import tempfile
        >>> store = Store(Path(tempfile.mkdtemp()) / "grid.jsonl")
        >>> store.append({"kind": "run", "key": "k", "time_to_target": 3.0})
        >>> store.done(), len(store.runs())
        ({'k'}, 1)
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def records(self) -> list[dict[str, Any]]:
        """Every readable record, in the order written."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # cut short by a crash
            if isinstance(record, dict) and "key" in record:
                out.append(record)
        return out

    def runs(self) -> list[dict[str, Any]]:
        """The run records, one per key (a later duplicate replaces an earlier one)."""
        return list({r["key"]: r for r in self.records() if r.get("kind") == "run"}.values())

    def done(self) -> set[str]:
        """Keys of the finished runs."""
        return {r["key"] for r in self.runs()}

    def calibration(self, key: str) -> dict[str, Any] | None:
        """The latest calibration record with ``key``, if any."""
        found = [r for r in self.records() if r.get("kind") == "calibration" and r["key"] == key]
        return found[-1] if found else None

    def append(self, record: dict[str, Any]) -> None:
        """Writes ``record`` as one line (NaN and infinity as null) and syncs it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(finite(record)) + "\n"
        with self.path.open("a+b") as handle:
            if handle.tell() and _last_byte(handle) != b"\n":
                line = "\n" + line  # after a cut line, start a new one
            handle.write(line.encode())
            handle.flush()
            os.fsync(handle.fileno())


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
    done = store.done()
    todo = [s for s in specs if s.key() not in done]
    total, skipped = len(specs), len(specs) - len(todo)
    log(f"{skipped} of {total} runs already in {store.path}; {len(todo)} to run")
    for k, spec in enumerate(todo):
        walls = [r["run_wall_s"] for r in store.runs()
                 if r.get("preset") == spec.preset and r.get("run_wall_s")]
        eta = (f"ETA {_hours(statistics.mean(walls) * (len(todo) - k))}" if walls
               else "ETA after the first run")
        log(f"\n[{skipped + k + 1}/{total}] R={spec.ratio:g} seed={spec.seed} {spec.name} "
            f"({spec.preset} preset; {len(todo) - k} to go, {eta})")
        began = clock()
        numbers = run(spec)
        store.append({**numbers, **asdict(spec), "kind": "run", "key": spec.key(),
                      "run_wall_s": clock() - began})
        after()
    return len(todo)


def _hours(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def _last_byte(handle: Any) -> bytes:
    handle.seek(-1, os.SEEK_END)
    last: bytes = handle.read(1)
    return last
