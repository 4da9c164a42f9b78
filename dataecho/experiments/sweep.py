"""Running a plan: searches in parallel processes, resumable, with progress and an ETA.

The unit of work is one search: a (condition, seed) pair whose trials run in order in
one process, because each trial's pruning point depends on the trials before it. Units
run in a pool of ``jobs`` processes; each trial's record is appended to the store as
soon as it finishes, and a unit first reuses every trial the store already holds, so a
rerun after an interruption continues exactly where the last one stopped and writes
the records the uninterrupted run would have written.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .analysis import best_trial, prune_at
from .conditions import Condition
from .protocol import Plan
from .record import Record, trial_key
from .registry import resolve
from .search import HParams, search_points
from .store import Store
from .text import hms
from .trial import Trial, train


@dataclass(frozen=True)
class Unit:
    """One search: ``trials`` quasi-random trials of ``condition`` with ``seed``.

    ``no_harm`` adds a trial with the search's best settings that trains on to the
    fresh-example budget instead of stopping at the target.
    """

    condition: Condition
    seed: int
    trials: int
    no_harm: bool = False

    def trial_keys(self) -> list[str]:
        """The keys of the search trials (the no-harm key depends on their results)."""
        workload = resolve(self.condition.workload)
        return [trial_key(workload, Trial(self.condition, hp, self.seed, "target", i))
                for i, hp in enumerate(self.points())]

    def points(self) -> list[HParams]:
        """The search's settings, in the order they run."""
        w = resolve(self.condition.workload)
        return search_points(self.trials, self.seed, w.lr_range, w.one_minus_momentum_range)

    def cost(self, have: Mapping[str, Record] | None = None,
             per_trial: float | None = None) -> float:
        """Estimated CPU seconds of the search's trials that ``have`` lacks (all of them
        when None), at ``per_trial`` seconds each.

        ``per_trial`` is what the store's trials of this condition took on average
        (:func:`seconds_per_trial`); without one, a baseline trial times
        ``factor ** 0.8``, because echoing takes e steps per fresh example but needs fewer
        fresh examples. A no-harm trial trains to the budget and costs about three.

        Example:
            >>> unit = Unit(Condition.default("digits", "batch", 4, 32), 0, trials=8)
            >>> unit.cost(per_trial=2.0), unit.cost(have={}, per_trial=2.0)
            (16.0, 16.0)
        """
        if per_trial is None:
            w = resolve(self.condition.workload)
            per_trial = w.trial_seconds * self.condition.factor ** 0.8
        keys = self.trial_keys()
        missing = len(keys) if have is None else sum(k not in have for k in keys)
        no_harm = self.no_harm and (have is None or missing > 0 or not _complete(self, have))
        return (missing + 3 * no_harm) * per_trial


def seconds_per_trial(have: Mapping[str, Record]) -> dict[tuple[str, str, float, int], float]:
    """The mean CPU seconds of the stored search trials per (workload, variant, factor,
    batch size), the costs the ETA uses (the buffer size barely changes a trial's cost).
    """
    seconds: dict[tuple[str, str, float, int], list[float]] = {}
    for r in have.values():
        if r.get("kind") == "trial" and r.get("mode") == "target" and "cpu_seconds" in r:
            seconds.setdefault(_cost_key(r["condition"]), []).append(float(r["cpu_seconds"]))
    return {key: sum(v) / len(v) for key, v in seconds.items()}


def _cost_key(condition: Mapping[str, Any]) -> tuple[str, str, float, int]:
    return (condition["workload"], condition["variant"], float(condition["factor"]),
            int(condition["batch_size"]))


def run_unit(unit: Unit, store_path: str, limit: int | None = None,
             verbose: bool = False) -> int:
    """Runs the missing trials of one search; returns how many it ran.

    Args:
        unit: the search.
        store_path: the JSON-lines store.
        limit: run at most this many new trials (for tests that interrupt a sweep).
        verbose: print a line per evaluation.
    """
    workload = resolve(unit.condition.workload)
    store = Store(store_path)
    done = store.index()
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if verbose else None
    records: list[Record] = []
    ran = 0
    for i, hp in enumerate(unit.points()):
        trial = Trial(unit.condition, hp, unit.seed, "target", i)
        record = done.get(trial_key(workload, trial))
        if record is None:
            if limit is not None and ran >= limit:
                return ran
            result = train(workload, trial, prune_at=prune_at(records), log=log)
            record = store.append({**result, "search_trials": unit.trials})
            ran += 1
        records.append(record)
    if unit.no_harm:
        trial = no_harm_trial(unit, records)
        if trial_key(workload, trial) not in done:
            if limit is not None and ran >= limit:
                return ran
            store.append({**train(workload, trial, log=log), "search_trials": unit.trials})
            ran += 1
    return ran


def no_harm_trial(unit: Unit, records: Sequence[Record]) -> Trial:
    """The search's best settings, trained to the budget (the no-harm check).

    The best trial is the one with the fewest fresh examples to the target; when no
    trial reached it, the one with the best metric.
    """
    def quality(record: Record) -> float:
        value = record.get("best_metric")
        if value is None:
            return -math.inf
        return float(value) if resolve(unit.condition.workload).higher_is_better else -value

    best = best_trial(records) or max(records, key=quality)
    return Trial(unit.condition, HParams(**best["hparams"]), unit.seed, "budget", 0)


def units_of(plans: Sequence[Plan]) -> list[Unit]:
    """The plan's searches in run order: conditions by priority, then seeds."""
    return [Unit(cond, seed, plan.trials, cond in plan.no_harm)
            for plan in plans for cond in plan.conditions for seed in plan.seeds]


def run(plans: Sequence[Plan], store_path: str | Path, *, jobs: int = 1,
        limit: int | None = None, verbose: bool = False,
        echo: Callable[[str], None] = print) -> int:
    """Runs every unit of ``plans`` not yet in the store; returns the trials it ran.

    Args:
        plans: what to run.
        store_path: the JSON-lines store (resumed if it exists).
        jobs: parallel processes; 1 runs in this process.
        limit: stop after this many new trials (tests use it to simulate a crash);
            only with ``jobs=1``.
        verbose: print every evaluation.
        echo: where progress lines go.
    """
    if limit is not None and jobs > 1:
        raise ValueError(f"limit={limit} needs jobs=1 (parallel processes cannot stop after "
                         f"an exact number of trials), got jobs={jobs}; pass jobs=1 or no limit")
    store_path = str(store_path)
    units = units_of(plans)
    have = Store(store_path).index()
    for p in plans:
        record = plan_record(p)
        if record["key"] not in have:
            Store(store_path).append(record)
    todo = [u for u in units if not _complete(u, have)]
    measured = seconds_per_trial(have)
    costs = [u.cost(have, measured.get(_cost_key(u.condition.as_dict()))) for u in todo]
    total_cost = sum(costs) or 1.0
    known = sum(_cost_key(u.condition.as_dict()) in measured for u in todo)
    echo(f"[sweep] {len(units)} searches, {len(units) - len(todo)} already complete in "
         f"{store_path}; running {len(todo)} with {jobs} process(es); about "
         f"{hms(total_cost / max(jobs, 1))} of work left at the store's measured trial "
         f"times ({known} of {len(todo)} searches measured" +
         (")" if known == len(todo) else ", the others modelled)"))
    start, done_cost, ran = time.monotonic(), 0.0, 0

    def progress(i: int, n: int) -> None:
        # The ETA scales the elapsed time by the cost still to run; the costs are the
        # store's measured trial times, so it holds from the first finished search on.
        nonlocal done_cost, ran
        unit = todo[i]
        done_cost += costs[i]
        ran += n
        elapsed = time.monotonic() - start
        eta = elapsed * (total_cost - done_cost) / max(done_cost, 1e-9)
        echo(f"[sweep] {unit.condition.workload} {unit.condition.label()} seed {unit.seed}: "
             f"{n} new trial(s); {done_cost / total_cost:.0%} done, {hms(elapsed)} elapsed, "
             f"ETA {hms(eta)}")

    if jobs <= 1:
        for i, unit in enumerate(todo):
            left = None if limit is None else limit - ran
            if left is not None and left <= 0:
                break
            progress(i, run_unit(unit, store_path, left, verbose))
        return ran
    context = multiprocessing.get_context("spawn")  # no fork: torch's thread pools
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context,
                             initializer=_exit_with_parent, initargs=(os.getpid(),)) as pool:
        pending: dict[Future[int], int] = {
            pool.submit(run_unit, u, store_path, None, verbose): i for i, u in enumerate(todo)}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                progress(pending.pop(future), future.result())
    return ran


def plan_record(p: Plan) -> Record:
    """The store's record of a plan (what the report lists as this budget's reductions)."""
    body = {"kind": "plan", "workload": p.workload, "budget": p.budget, "seeds": list(p.seeds),
            "trials": p.trials, "conditions": [c.label() for c in p.conditions],
            "no_harm": [c.label() for c in p.no_harm], "reduced": list(p.reduced)}
    blob = json.dumps(body, sort_keys=True)
    return {**body, "key": "plan-" + hashlib.sha256(blob.encode()).hexdigest()[:16]}


def _complete(unit: Unit, have: Mapping[str, Record]) -> bool:
    keys = unit.trial_keys()
    if not all(k in have for k in keys):
        return False
    if not unit.no_harm:
        return True
    workload = resolve(unit.condition.workload)
    return trial_key(workload, no_harm_trial(unit, [have[k] for k in keys])) in have


def _exit_with_parent(parent: int) -> None:
    """Worker initialiser: exit when the sweep process dies, so that a killed sweep does
    not leave workers appending to the store while a resumed sweep runs the same trials.
    """
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(2.0)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
