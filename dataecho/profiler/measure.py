"""Measuring ``R``: the loader alone, the step alone, then both in a plain loop, per pass.

``R = t_upstream / t_downstream``: the loader's time per batch over the training
step's time. :func:`profile` times at least three passes and returns a
:class:`Profile` of their medians and spreads, whose ``recommendation()`` is
:func:`~dataecho.profiler.recommend`'s advice, or its refusal when the passes disagree.
A loader that reads an ``EchoDataset`` also gives the two sides of the echo point
(its ``sides()``), per batch, and the advice is then the model's prediction.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._checks import check_positive_int, check_reiterable
from ..timing import Sides
from .result import Pass, Profile
from .sync import Sync, resolve

MIN_PASSES = 3  # the fewest passes that give a median and a spread


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
            batches: int = 50, warmup: int = 3, steps: int = 20, passes: int = MIN_PASSES,
            sync: Sync = "auto", clock: Callable[[], float] = time.perf_counter) -> Profile:
    """Times the loader alone, the step alone, then both in a plain loop; ``passes`` times.

    One pass on a busy machine can land anywhere (six single passes of one 2-worker
    DataLoader job gave R from 0.92 to 3.78), so each of ``passes`` passes repeats all
    three timings, and the :class:`Profile` holds their medians and spreads. Each pass
    starts the loader afresh and discards its first batches: ``warmup`` of them plus
    what a DataLoader (or a wrapper holding one as ``.loader``) prefetches,
    ``num_workers * prefetch_factor``, as those come from a queue filled before the
    clock started and would make the loader look faster than it is.

    The step's time ends when the accelerator has finished it, not when its kernels
    are queued: ``sync`` is called before the clock starts and after the last timed
    step (and after each step of the plain loop). Without it a CUDA step is timed at
    its launch cost, and ``R`` comes out too high.

    Where the loader reads an ``EchoDataset`` (``loader.dataset``, or through wrappers
    that keep it as ``.loader`` or ``.dataset``), its ``sides()`` after the passes give
    the Profile's ``read_s`` and ``augment_s``: seconds per example times the loader's
    ``batch_size``, over its ``num_workers`` (0: one reader, this process). They are per
    fresh read and per augmentation call, so they hold whatever factor the dataset echoes
    at; the advice then predicts each variant's gain from them.

    Args:
        loader: any re-iterable of batches (a DataLoader, a list), iterated twice per
            pass (alone, then with the step); a one-shot iterator or generator is refused.
        step: the training step ``step(batch)``, or its duration in seconds.
        batches: batches timed in each loader phase of a pass.
        warmup: batches (and steps) run untimed first, beyond the loader's prefetch.
        steps: step calls timed on one cached batch per pass.
        passes: passes to time, at least 3 (a median and a spread).
        sync: waits for the accelerator: ``"auto"`` (default) uses the device in use
            (``torch.cuda.synchronize`` once CUDA is initialised, MPS's or XLA's; see
            :func:`~dataecho.profiler.sync.device_sync`), a callable is called as is,
            ``None`` never waits (a CPU step).
        clock: seconds counter; default ``time.perf_counter`` (tests pass a fake one).

    Example:
        >>> p = profile(range(100), step=0.001, batches=5, warmup=1, steps=5)
        >>> p.ratio < 1, p.batches, len(p.passes)
        (True, 5, 3)
    """
    check_reiterable(loader, "loader", "profile iterates it twice per pass: alone, then "
                     "with the step", "second pass would time another part of the stream "
                     "or none")
    batches = check_positive_int(batches, "batches")
    warmup = check_positive_int(warmup, "warmup", minimum=0)
    steps = check_positive_int(steps, "steps")
    passes = check_positive_int(passes, "passes", minimum=MIN_PASSES)
    wait = resolve(sync)
    run = step if callable(step) else _sleep(_check_step(step))
    workers, ahead = _prefetch(loader)
    timed = [_pass(loader, run, wait, clock, batches, warmup, ahead, steps)
             for _ in range(passes)]
    return Profile.of([p for p, _ in timed], min(n for _, n in timed), warmup + ahead,
                      workers, *sides_per_batch(loader))


def _pass(loader: Iterable[Any], run: Callable[[Any], object], wait: Callable[[], object],
          clock: Callable[[], float], batches: int, warmup: int, ahead: int,
          steps: int) -> tuple[Pass, int]:
    """One pass; returns it and the batches it timed."""
    batch, upstream, startup, n = _read(loader, clock, batches, warmup, ahead)
    for _ in range(warmup):
        run(batch)
    wait()  # the warm-up's queued work is not the timed steps'
    start = clock()
    for _ in range(steps):
        run(batch)
    wait()  # back-to-back steps overlap launch and work, as in training; then the rest
    downstream = (clock() - start) / steps
    stall = _stall(iter(loader), run, wait, clock, n, warmup + ahead)
    return Pass(upstream, downstream, stall, startup), n


def _read(loader: Iterable[Any], clock: Callable[[], float], batches: int, warmup: int,
          ahead: int) -> tuple[Any, float, float, int]:
    """The loader alone: (last batch, seconds per batch, seconds to the first, count).

    Its own function so the iterator is gone when it returns: a DataLoader's workers
    then stop before the plain loop starts its own, instead of competing with them.
    """
    it = iter(loader)
    start = clock()
    try:
        batch = next(it)
    except StopIteration:
        raise _too_short(0, warmup, ahead) from None
    startup = clock() - start
    read = 1
    for item in _take(it, warmup + ahead):
        batch, read = item, read + 1
    start, n = clock(), 0
    for item in _take(it, batches):
        batch, n = item, n + 1
    if n == 0:
        raise _too_short(read, warmup, ahead)
    return batch, (clock() - start) / n, startup, n


def _prefetch(loader: object) -> tuple[int | None, int]:
    """The loader's workers (None: no ``num_workers``) and the batches they hold ready.

    Wrappers that keep the DataLoader as ``.loader`` (EchoBatches, Monitor) are looked
    through. A DataLoader's workers each queue ``prefetch_factor`` batches (default 2).
    """
    for _ in range(4):
        workers = getattr(loader, "num_workers", None)
        if isinstance(workers, int) and not isinstance(workers, bool) and workers >= 0:
            factor = getattr(loader, "prefetch_factor", None)
            per = factor if isinstance(factor, int) and factor > 0 else 2
            return workers, workers * per
        loader = getattr(loader, "loader", None)
        if loader is None:
            break
    return None, 0


def sides_per_batch(loader: object) -> tuple[float | None, float | None]:
    """(read_s, augment_s) of one batch, in seconds over the loader's workers.

    From the ``EchoDataset`` the loader reads (``sides()``: per example, per reader),
    found through ``.dataset`` and ``.loader`` wrappers (``EchoBatches``), times the
    batch size over the workers, which read in parallel; (None, None) where it reads
    none, nothing was timed, or the batch size is not known.

    Example:
        >>> sides_per_batch([[1, 2], [3, 4]])
        (None, None)
    """
    workers, _ = _prefetch(loader)
    found = _echo_dataset(loader)
    if found is None:
        return None, None
    sides = found.sides()
    batch = 1 if found is loader else _batch_size(loader)
    if not isinstance(sides, Sides) or sides.read_s is None or batch is None:
        return None, None
    per = batch / max(1, workers or 0)  # workers read in parallel; 0 or None: this process
    return sides.read_s * per, (sides.augment_s or 0.0) * per


def _echo_dataset(loader: object) -> Any:
    """The first object with a ``sides()`` (an EchoDataset) at most 4 wrappers deep,
    looking through ``.dataset`` and ``.loader``; None where there is none."""
    level = [loader]
    for _ in range(4):
        for obj in level:
            if callable(getattr(obj, "sides", None)):
                return obj
        level = [inner for obj in level for inner in (getattr(obj, "dataset", None),
                                                      getattr(obj, "loader", None))
                 if inner is not None]
    return None


def _batch_size(loader: object) -> int | None:
    """Examples per batch: the first ``batch_size`` through ``.loader`` wrappers (a
    DataLoader's None, which yields single examples, counts 1); None where none says."""
    for _ in range(4):
        if hasattr(loader, "batch_size"):
            size = loader.batch_size
            if size is None:
                return 1
            return size if isinstance(size, int) and size > 0 else None
        loader = getattr(loader, "loader", None)
        if loader is None:
            break
    return None


def _too_short(read: int, warmup: int, ahead: int) -> ValueError:
    need = warmup + ahead + 2
    left = read - 2 - ahead  # the largest warmup this loader allows
    fix = (f"pass warmup={left} or less (--warmup {left}), or a longer loader" if left >= 0
           else "pass a longer loader: even warmup=0 needs "
                f"{ahead + 2} batches")
    if ahead == 0:
        counted = f"at least warmup + 2 = {need} batches (the first, {warmup} warm-up"
    else:
        counted = (f"at least warmup + prefetch + 2 = {need} batches (the first, {warmup} "
                   f"warm-up, {ahead} its workers prefetch")
    return ValueError(f"loader must yield {counted}, 1 or more timed), but it yielded "
                      f"{read or 'none'}; {fix}")


def _stall(it: Iterator[Any], run: Callable[[Any], object], wait: Callable[[], object],
           clock: Callable[[], float], n: int, warmup: int) -> float:
    for batch in _take(it, warmup):
        run(batch)
    wait()
    blocked, start, count = 0.0, clock(), 0
    while count < n:
        t = clock()
        try:
            batch = next(it)
        except StopIteration:
            break
        blocked += clock() - t
        run(batch)
        wait()  # a plain loop waits for each step (a loss.item() does on a GPU)
        count += 1
    wall = clock() - start
    return blocked / wall if count and wall > 0 else math.nan


def _take(it: Iterator[Any], n: int) -> Iterator[Any]:
    for _ in range(n):
        try:
            yield next(it)
        except StopIteration:
            return


def _sleep(seconds: float) -> Callable[[Any], object]:
    return lambda _: time.sleep(seconds)
