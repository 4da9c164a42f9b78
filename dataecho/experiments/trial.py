"""One training trial: a condition, its optimizer settings and a seed in; a record out.

The loop follows airbench's shape: build the data pipeline, train with SGD and Nesterov
momentum, evaluate on the fixed held-out set every ``budget / evals`` fresh examples,
and stop at the first of: the target (``mode="target"``), the fresh-example budget,
divergence, or a ``prune_at`` count the sweep passes once another trial of the same
search has crossed there (a trial still short of the target then cannot become the
best, so running it on would only cost time).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import dataecho

from .conditions import Condition
from .crossing import find_crossing
from .record import Record, code_version, trial_key
from .search import HParams
from .workloads import Workload

#: A trial diverged when its training loss is not finite or exceeds this multiple of
#: the first step's loss (chance level), which no trial recovers from in our pilots.
BLOWUP = 3.0


@dataclass(frozen=True)
class Trial:
    """What to run: a condition, optimizer settings, a seed and when to stop.

    Attributes:
        condition: the protocol cell.
        hparams: learning rate and momentum.
        seed: seeds the model initialisation, data order, augmentation and echo draws.
        mode: ``"target"`` stops at the target; ``"budget"`` trains on to the budget
            (the no-harm check).
        index: position of this trial in its search (0 for no-harm trials).
    """

    condition: Condition
    hparams: HParams
    seed: int
    mode: str = "target"
    index: int = 0


class Counted(Sequence[Any]):
    """A map-style data set that counts reads, to check the pipeline's fresh count.

    Example:
        >>> data = Counted([10, 20])
        >>> data[1], data.reads
        (20, 1)
    """

    def __init__(self, data: Sequence[Any]) -> None:
        self.data = data
        self.reads = 0

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: Any) -> Any:
        self.reads += 1
        return self.data[index]


def build_pipeline(workload: Workload, condition: Condition, seed: int,
                   data: Sequence[Any]) -> dataecho.Stage[Any]:
    """The endless training stream of ``condition`` over ``data``.

    Example:
        >>> from dataecho.experiments.workloads import WORKLOADS
        >>> w = WORKLOADS["digits"]
        >>> stage = build_pipeline(w, Condition.default("digits", "batch", 2, 32), 0,
        ...                        w.data().train)
        >>> _ = next(stage); stage.stats().fresh_examples
        32
    """
    return dataecho.pipeline(dataecho.Source(data, seed=seed, num_epochs=None),
                             augment=workload.augment(), seed=seed, **condition.pipeline_kwargs())


def train(workload: Workload, trial: Trial, *, prune_at: float | None = None,
          log: Callable[[str], None] | None = None) -> Record:
    """Runs one trial and returns its record (see :mod:`dataecho.experiments.record`).

    Args:
        workload: the workload named by ``trial.condition.workload``.
        trial: what to run.
        prune_at: stop once an evaluation below the target has read at least this many
            fresh examples (the best crossing of the search so far).
        log: called with a progress line at every evaluation.

    Example:
        >>> from dataecho.experiments.workloads import WORKLOADS
        >>> w = WORKLOADS["digits"]
        >>> t = Trial(Condition.default("digits", "baseline", 1, 32), HParams(0.1, 0.1), 0)
        >>> record = train(w, t)
        >>> record["status"] in ("reached", "budget"), record["reads"] == record["fresh"]
        (True, True)
    """
    torch.set_num_threads(1)  # one core per trial; parallelism is across trials
    cond, hp = trial.condition, trial.hparams
    data = workload.data()
    counted = Counted(data.train)
    stage = build_pipeline(workload, cond, trial.seed, counted)
    # The initialisation is a function of the seed alone, and the caller's global torch
    # RNG is left as it was (training itself draws nothing from it).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(trial.seed)
        model = workload.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=hp.lr, momentum=hp.momentum,
                                nesterov=True)
    budget = workload.budget(cond.batch_size)
    total_steps = budget * cond.factor / cond.batch_size
    grid = budget / workload.evals
    curve: dict[str, list[float]] = {k: [] for k in ("fresh", "emitted", "steps", "seconds",
                                                     "cpu_seconds", "metric", "loss")}
    clock = {"data": 0.0, "step": 0.0, "eval": 0.0}
    start, cpu_start = time.perf_counter(), time.process_time()

    def evaluate(step: int, loss: float) -> float:
        t0 = time.perf_counter()
        model.eval()
        # Rounded as the curve stores it, so stopping here and the crossing found later
        # in the stored curve agree even for a value within 1e-6 of the target.
        value = round(float(workload.evaluate(model, data)), 6)
        model.train()
        clock["eval"] += time.perf_counter() - t0
        stats = stage.stats()
        if stats.fresh_examples != counted.reads:
            raise RuntimeError(
                f"fresh-example count {stats.fresh_examples} differs from the "
                f"{counted.reads} reads of the source: the echo accounting is broken"
            )
        for k, v in (("fresh", stats.fresh_examples), ("emitted", stats.emitted_examples),
                     ("steps", step), ("seconds", time.perf_counter() - start),
                     ("cpu_seconds", time.process_time() - cpu_start),
                     ("metric", value), ("loss", loss)):
            curve[k].append(round(v, 6) if isinstance(v, float) else v)
        if log is not None:
            log(f"{cond.label()} lr={hp.lr:.4g} m={hp.momentum:.4g} seed={trial.seed} "
                f"step {step} fresh {stats.fresh_examples} {workload.metric} {value:.4f}")
        return value

    status, step, first_loss, loss_value = "budget", 0, math.nan, math.nan
    evaluate(0, math.nan)
    next_eval = grid  # evaluations at the first step past each multiple of grid
    batches: Iterator[Any] = iter(stage)
    while True:
        t0 = time.perf_counter()
        batch = next(batches)
        t1 = time.perf_counter()
        if workload.schedule == "linear":
            for group in optimizer.param_groups:
                group["lr"] = hp.lr * max(0.0, 1.0 - step / total_steps)
        loss = workload.loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        if workload.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), workload.clip_norm)
        optimizer.step()
        step += 1
        loss_value = loss.item()
        clock["data"] += t1 - t0
        clock["step"] += time.perf_counter() - t1
        first_loss = loss_value if step == 1 else first_loss
        if not math.isfinite(loss_value) or loss_value > BLOWUP * first_loss:
            status = "diverged"
            break
        # The source's read count equals the echo stage's fresh count at every step
        # (checked at each evaluation) and costs nothing, unlike walking the pipeline.
        fresh = counted.reads
        if fresh < next_eval and fresh < budget:
            continue
        next_eval = grid * (math.floor(fresh / grid) + 1)  # a read-ahead may skip points
        value = evaluate(step, loss_value)
        if not math.isfinite(value):
            status = "diverged"
            break
        if workload.reached(value) and trial.mode == "target":
            status = "reached"
            break
        if fresh >= budget:
            break
        if prune_at is not None and fresh >= prune_at:
            status = "pruned"
            break
    stats = stage.stats()
    stage.close()
    clock["cpu"] = time.process_time() - cpu_start
    return _record(workload, trial, status, curve, clock, stats, counted.reads, repr(stage),
                   time.perf_counter() - start, prune_at, budget, step)


def _record(workload: Workload, trial: Trial, status: str, curve: dict[str, list[float]],
            clock: dict[str, float], stats: dataecho.EchoStats, reads: int, pipeline: str,
            seconds: float, prune_at: float | None, budget: int, steps: int) -> Record:
    crossing = find_crossing(curve["fresh"], curve["metric"], workload.target,
                             higher_is_better=workload.higher_is_better)
    if crossing is not None and status == "budget":
        status = "reached"  # no-harm trials run on past the target
    metrics = [m for m in curve["metric"] if math.isfinite(m)]
    best = (max if workload.higher_is_better else min)(metrics) if metrics else math.nan
    cross = None
    if crossing is not None:
        i = crossing.index
        cross = {"first": crossing.first, "interpolated": round(crossing.interpolated, 3),
                 "steps": curve["steps"][i], "seconds": curve["seconds"][i],
                 "cpu_seconds": curve["cpu_seconds"][i], "index": i}
    return {
        "kind": "trial", "key": trial_key(workload, trial),
        "workload": trial.condition.workload,  # its name, or the import string of one of yours
        "condition": trial.condition.as_dict(), "hparams": trial.hparams.as_dict(),
        "seed": trial.seed, "mode": trial.mode, "index": trial.index, "status": status,
        "crossing": cross, "best_metric": best,
        "final_metric": curve["metric"][-1], "fresh": stats.fresh_examples, "reads": reads,
        "emitted": stats.emitted_examples, "steps": steps, "prune_at": prune_at,
        "seconds": round(seconds, 3), "cpu_seconds": round(clock["cpu"], 3),
        "data_seconds": round(clock["data"], 3),
        "step_seconds": round(clock["step"], 3), "eval_seconds": round(clock["eval"], 3),
        "steps_per_second": round(steps / max(clock["data"] + clock["step"], 1e-9), 3),
        "curve": curve, "pipeline": pipeline,
        "config": {"workload": workload.config(), "fresh_budget": budget,
                   "momentum": trial.hparams.momentum,
                   "optimizer": "SGD(nesterov=True)", "blowup": BLOWUP,
                   "torch_threads": torch.get_num_threads(), "torch": torch.__version__},
        "version": code_version(),
    }
