"""Measuring ``R``: the loader alone, the step alone, then both in a plain loop.

``R = t_upstream / t_downstream``: the loader's time per batch over the training
step's time. :func:`profile` returns a :class:`Profile` of the three timings, whose
``recommendation()`` is :func:`~dataecho.profiler.recommend`'s advice.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from .._checks import check_positive_int, check_reiterable
from ..adaptive import DEFAULT_MAX_FACTOR
from .advice import recommend
from .sync import Sync, resolve


@dataclass(frozen=True)
class Profile:
    """Measured times of a loader and a training step, and what they imply.

    Example:
        >>> from dataecho.profiler import fixed_factor
        >>> p = Profile(upstream_s=0.04, downstream_s=0.01, stall_fraction=0.8, batches=50)
        >>> round(p.ratio, 2), fixed_factor(p.ratio)
        (4.0, 4.0)
    """

    upstream_s: float  # seconds per batch reading the loader alone, after warm-up
    downstream_s: float  # seconds per step on one cached batch
    stall_fraction: float  # share of a plain loop's time spent inside next()
    batches: int  # batches timed per phase
    startup_s: float = 0.0  # seconds to the first batch (worker start, first read)

    @property
    def ratio(self) -> float:
        """``R = t_upstream / t_downstream``."""
        return self.upstream_s / self.downstream_s if self.downstream_s > 0 else math.inf

    def recommendation(self, max_factor: int = DEFAULT_MAX_FACTOR) -> str:
        """Advice on whether, how and how much to echo; see :func:`recommend`."""
        return recommend(self.ratio, self.stall_fraction, max_factor=max_factor)

    def as_dict(self) -> dict[str, Any]:
        """Every number plus R, for logs and JSON."""
        return {**asdict(self), "ratio": self.ratio}

    def __str__(self) -> str:
        return "\n".join([
            f"upstream    {1e3 * self.upstream_s:8.2f} ms per batch (loader alone, "
            f"{self.batches} batches; first batch after {self.startup_s:.2f} s)",
            f"downstream  {1e3 * self.downstream_s:8.2f} ms per step (step alone)",
            f"R           {self.ratio:8.2f}    t_upstream / t_downstream",
            f"stall       {self.stall_fraction:8.1%}    of a plain loop's time inside next()",
        ])


def _check_step(step: object) -> float:
    """``step`` given as a duration: a finite real >= 0 in seconds."""
    if isinstance(step, bool) or not isinstance(step, numbers.Real):
        raise TypeError(
            f"step must be the training step, callable as step(batch), or its duration in "
            f"seconds >= 0, got {step!r} of type {type(step).__name__}; pass the step "
            "function or a duration such as step=0.01")
    seconds = float(step)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(
            f"step must be a finite duration in seconds >= 0 (or the step function), got "
            f"{seconds!r}; pass the step's measured duration, e.g. step=0.01 for 10 ms")
    return seconds


def profile(loader: Iterable[Any], step: Callable[[Any], object] | float, *,
            batches: int = 50, warmup: int = 3, steps: int = 20,
            sync: Sync = "auto") -> Profile:
    """Times the loader alone, the step alone, then both in a plain loop.

    The step's time ends when the accelerator has finished it, not when its kernels
    are queued: ``sync`` is called before the clock starts and after the last timed
    step (and after each step of the plain loop). Without it a CUDA step is timed at
    its launch cost, and ``R`` comes out too high.

    Args:
        loader: any re-iterable of batches (a DataLoader, a list), iterated twice (once
            for each timed pass); a one-shot iterator or generator is refused.
        step: the training step ``step(batch)``, or its duration in seconds.
        batches: batches timed in each loader pass.
        warmup: batches (and steps) run untimed first.
        steps: step calls timed on one cached batch.
        sync: waits for the accelerator: ``"auto"`` (default) uses the device in use
            (``torch.cuda.synchronize`` once CUDA is initialised, MPS's or XLA's; see
            :func:`~dataecho.profiler.sync.device_sync`), a callable is called as is,
            ``None`` never waits (a CPU step).

    Example:
        >>> p = profile(range(100), step=0.001, batches=5, warmup=1, steps=5)
        >>> p.ratio < 1, p.batches
        (True, 5)
    """
    check_reiterable(loader, "loader", "profile iterates it twice: alone, then with the step",
                     "second pass would time another part of the stream or none")
    batches = check_positive_int(batches, "batches")
    warmup = check_positive_int(warmup, "warmup", minimum=0)
    steps = check_positive_int(steps, "steps")
    wait = resolve(sync)
    run = step if callable(step) else _sleep(_check_step(step))
    it = iter(loader)
    start = time.perf_counter()
    try:
        batch = next(it)
    except StopIteration:
        raise _too_short(0, warmup) from None
    startup = time.perf_counter() - start
    read = 1
    for item in _take(it, warmup):
        batch, read = item, read + 1
    start, n = time.perf_counter(), 0
    for item in _take(it, batches):
        batch, n = item, n + 1
    if n == 0:
        raise _too_short(read, warmup)
    upstream = (time.perf_counter() - start) / n
    for _ in range(warmup):
        run(batch)
    wait()  # the warm-up's queued work is not the timed steps'
    start = time.perf_counter()
    for _ in range(steps):
        run(batch)
    wait()  # back-to-back steps overlap launch and work, as in training; then the rest
    downstream = (time.perf_counter() - start) / steps
    return Profile(upstream, downstream, _stall(iter(loader), run, wait, n, warmup), n,
                   startup)


def _too_short(read: int, warmup: int) -> ValueError:
    fix = (f"pass warmup={read - 2} or less, or a longer loader" if read >= 2 else
           "pass a longer loader: even warmup=0 needs 2 batches")
    return ValueError(
        f"loader must yield at least warmup + 2 = {warmup + 2} batches (the first, {warmup} "
        f"warm-up, 1 or more timed), but it yielded {read or 'none'}; {fix}")


def _stall(it: Iterator[Any], run: Callable[[Any], object], wait: Callable[[], object],
           n: int, warmup: int) -> float:
    for batch in _take(it, warmup):
        run(batch)
    wait()
    blocked, start, count = 0.0, time.perf_counter(), 0
    while count < n:
        t = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        blocked += time.perf_counter() - t
        run(batch)
        wait()  # a plain loop waits for each step (a loss.item() does on a GPU)
        count += 1
    wall = time.perf_counter() - start
    return blocked / wall if count and wall > 0 else math.nan


def _take(it: Iterator[Any], n: int) -> Iterator[Any]:
    for _ in range(n):
        try:
            yield next(it)
        except StopIteration:
            return


def _sleep(seconds: float) -> Callable[[Any], object]:
    return lambda _: time.sleep(seconds)
