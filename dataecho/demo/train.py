"""One training run to a target accuracy, timed the way the paper's headline is.

The clock starts at the first batch (worker start-up, the same for every run, is
reported apart) and pauses during evaluations. Time spent inside ``next(loader)`` is
stall: the trainer waiting for its input pipeline. The loader is iterated epoch after
epoch until the target; fresh examples are counted from the uid of every example
trained on, ``epoch * num_samples + index`` (the same image in another epoch is another
fresh example, as in the paper's count), so they are exact, not read-ahead estimates.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from multiprocessing import active_children
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from ..profiler.measure import sides_per_batch
from .augment import normalize


class Step:
    """One Adam step on an ``(images, labels, ...)`` batch; the ``t_down`` of ``R``.

    It also updates ``average``, an exponential moving average of the weights (and of
    the BatchNorm statistics), which is what gets evaluated: with a constant learning
    rate the raw weights jitter by a point or more of accuracy from step to step, and a
    run would cross the target by luck. The average removes most of that jitter, for
    every run alike.
    """

    def __init__(self, model: nn.Module, lr: float, device: torch.device,
                 decay: float = 0.99) -> None:
        self.model, self.device = model.to(device), device
        self.opt = torch.optim.Adam(self.model.parameters(), lr=lr)
        ema = get_ema_multi_avg_fn(decay)  # type: ignore[no-untyped-call]
        self.average = AveragedModel(self.model, multi_avg_fn=ema,
                                     use_buffers=True)

    def __call__(self, batch: Any) -> float:
        x = normalize(batch[0].to(self.device, non_blocking=True))
        loss = nn.functional.cross_entropy(self.model(x), batch[1].to(self.device))
        self.opt.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)
        self.opt.step()
        self.average.update_parameters(self.model)
        if self.device.type == "cuda":
            torch.cuda.synchronize()  # else the step's time would land in the next wait
        return float(loss.detach())


class Evaluator:
    """Accuracy on a fixed held-out set of uint8 images, evaluated in chunks."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, device: torch.device) -> None:
        self.x = normalize(torch.from_numpy(images)).to(device)
        self.y = torch.from_numpy(labels).to(device)

    def __call__(self, model: nn.Module) -> float:
        model.eval()
        right = 0
        with torch.no_grad():
            for start in range(0, len(self.y), 1000):
                x, y = self.x[start : start + 1000], self.y[start : start + 1000]
                right += int((model(x).argmax(1) == y).sum())
        model.train()
        return right / len(self.y)


@dataclass
class RunResult:
    """Every number of one run; ``*_to_target`` are None when it missed the target."""

    name: str
    factor: float | str  # configured: 1 (baseline), a fixed factor, or "auto"
    pipeline: str
    variant: str = "before_augmentation"  # where the echo stands (dataecho.VARIANTS)
    reached: bool = False
    time_to_target: float | None = None
    fresh_to_target: int | None = None
    steps_to_target: int | None = None
    steps: int = 0
    fresh: int = 0  # distinct (uid) examples trained on: the paper's fresh examples
    emitted: int = 0  # examples trained on, copies included
    train_s: float = 0.0  # the clock: first batch to the end, evaluations excluded
    wait_s: float = 0.0  # of which inside next(loader): the stall
    eval_s: float = 0.0
    startup_s: float = 0.0  # iter(loader) to the first batch: worker spawn, first shards
    epochs: int = 0  # epochs of the loader begun
    worker_rss_mb: float | None = None  # peak resident memory of the largest worker (Linux)
    # The echo stage's own counts, where it runs in the trainer's process (batch
    # echoing): (fresh, emitted) examples, a cross-check of the uid counts above.
    echo_counts: tuple[int, int] | None = None
    # The loader's two sides per batch, over its workers (EchoDataset.sides()): the read
    # and decode an echo saves, and the augmentation echoing before it repeats.
    read_s: float | None = None
    augment_s: float | None = None
    final_accuracy: float = 0.0  # at the last evaluation
    best_accuracy: float = 0.0  # the highest over the evaluations: what a missed run reached
    points: list[dict[str, float]] = field(default_factory=list)

    @property
    def realised_factor(self) -> float:
        return self.emitted / self.fresh if self.fresh else float("nan")

    @property
    def stall_fraction(self) -> float:
        return self.wait_s / self.train_s if self.train_s else float("nan")

    @property
    def step_s(self) -> float:
        """Seconds of one step's own work: the clock less the stall, per step."""
        return (self.train_s - self.wait_s) / self.steps if self.steps else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "realised_factor": self.realised_factor,
                "stall_fraction": self.stall_fraction, "step_s": self.step_s,
                "steps_per_s": self.steps / self.train_s if self.train_s else None}


class EpochBatches:
    """The batches of ``loader`` epoch after epoch, each with its examples' uids.

    Each iteration of ``loader`` is the next epoch (``EchoDataset`` and ``EchoBatches``
    advance by themselves); a uid is ``epoch * num_samples + index``, the index being
    what the decode gives (a batch's third field).
    """

    def __init__(self, loader: Iterable[Any], num_samples: int) -> None:
        self.loader, self.num_samples = loader, num_samples
        self.epoch, self.it = 0, iter(loader)

    def __iter__(self) -> EpochBatches:
        return self

    def __next__(self) -> tuple[Any, list[int]]:
        for _ in range(2):
            batch = next(self.it, None)
            if batch is not None:
                offset = self.epoch * self.num_samples
                return batch, [offset + index for index in batch[2].tolist()]
            self.close()
            self.epoch += 1
            self.it = iter(self.loader)
        raise RuntimeError(f"the loader yielded no batch in epoch {self.epoch - 1}: there "
                           "are fewer examples per worker than one batch; use smaller "
                           "batches or fewer workers")

    def close(self) -> None:
        close = getattr(self.it, "close", None)  # EchoBatches: stops its reader thread
        if callable(close):
            close()


def train_run(result: RunResult, loader: Iterable[Any], step: Step, evaluate: Evaluator, *,
              target: float, budget_s: float, eval_every: int, num_samples: int = 0,
              log: Callable[[str], None] = print) -> RunResult:
    """Trains until ``evaluate`` reaches ``target`` or ``budget_s`` training seconds pass.

    ``loader`` is iterated epoch after epoch; ``num_samples`` (samples per epoch) makes
    the uids of later epochs new fresh examples (0: one uid space for all epochs).
    """
    seen: set[int] = set()
    live = sys.stdout.isatty()
    began = time.perf_counter()
    epochs = EpochBatches(loader, num_samples)
    try:
        batch, uids = next(epochs)
        start = time.perf_counter()
        result.startup_s = start - began
        while True:
            step(batch)
            result.steps += 1
            result.emitted += len(uids)
            seen.update(uids)
            result.fresh = len(seen)
            clock = result.train_s = time.perf_counter() - start - result.eval_s
            over = clock >= budget_s
            if result.steps % eval_every == 0 or over:
                _evaluate(result, step, evaluate, clock, log)
                if result.final_accuracy >= target:
                    result.reached, result.time_to_target = True, clock
                    result.fresh_to_target, result.steps_to_target = result.fresh, result.steps
                    break
                if over:
                    break
            elif live and result.steps % 10 == 0:
                print("\r" + _line(result, clock, None), end="", flush=True)
            waited = time.perf_counter()
            batch, uids = next(epochs)
            result.wait_s += time.perf_counter() - waited
    finally:
        result.worker_rss_mb = worker_peak_mb(epochs.it)
        epochs.close()
    result.epochs = epochs.epoch + 1
    result.read_s, result.augment_s = sides_per_batch(loader)
    stats = getattr(loader, "stats", None)  # EchoBatches: counted where it echoes
    if callable(stats):
        counts = stats()
        result.echo_counts = (counts.fresh_examples, counts.emitted_examples)
    return result


def worker_peak_mb(it: object) -> float | None:
    """Peak RSS (``VmHWM``) of the largest DataLoader worker of ``it``, in MB, if readable.

    ``getrusage(RUSAGE_CHILDREN)`` cannot tell: a spawned child is charged the parent's
    pages between its fork and its exec, so it reports about the trainer's size. When
    ``it`` hides its DataLoader iterator (``EchoBatches``), every live worker process
    this process started is read instead: ``multiprocessing.active_children()``, which
    holds fork-server workers too (they are the fork server's children, not this one's).
    """
    workers = getattr(it, "_workers", None)
    pids = [w.pid for w in (workers if workers is not None else active_children())]
    peaks = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        peaks += [int(line.split()[1]) / 1024 for line in status.splitlines()
                  if line.startswith("VmHWM:")]
    return max(peaks, default=None)


def _evaluate(result: RunResult, step: Step, evaluate: Evaluator, clock: float,
              log: Callable[[str], None]) -> None:
    began = time.perf_counter()
    result.final_accuracy = evaluate(step.average)
    result.best_accuracy = max(result.best_accuracy, result.final_accuracy)
    result.eval_s += time.perf_counter() - began
    result.points.append({"step": result.steps, "fresh": result.fresh, "emitted": result.emitted,
                          "seconds": clock, "accuracy": result.final_accuracy,
                          "stall_fraction": result.wait_s / clock if clock else 0.0})
    log("\r" + _line(result, clock, result.final_accuracy))


def _line(r: RunResult, clock: float, accuracy: float | None) -> str:
    acc = f"{accuracy:6.2%}" if accuracy is not None else "   -  "
    stall = r.wait_s / clock if clock else 0.0
    return (f"  {r.name:<9} step {r.steps:5d}  fresh {r.fresh:7,d}  acc {acc}  "
            f"factor {r.realised_factor:4.2f}  stall {stall:5.1%}  {clock:6.1f} s")
