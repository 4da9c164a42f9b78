"""Is a job input-bound, and how much should it echo? Measure ``R``, then advise.

``R = t_upstream / t_downstream``: the loader's time per batch over the training
step's time. Echoing pays only when ``R > 1``, and a factor ``e`` is free only while
``e <= R`` (Choi et al., 2019): one upstream batch plus ``e`` steps take
``max(t_up, e * t_down)``. ``dataecho profile`` runs :func:`profile` from the shell;
:class:`Monitor` (from :mod:`dataecho.stall`) logs the same numbers inside a training loop.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import numbers
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from ._checks import check_iterable, check_positive_int
from .adaptive import DEFAULT_MAX_FACTOR
from .stall import LoopTiming, Monitor

__all__ = ["LoopTiming", "Monitor", "Profile", "fixed_factor", "main", "profile", "recommend"]


@dataclass(frozen=True)
class Profile:
    """Measured times of a loader and a training step, and what they imply.

    Example:
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


def fixed_factor(ratio: float, max_factor: int = DEFAULT_MAX_FACTOR) -> float:
    """The largest factor ``e <= R`` on a quarter step, capped at ``max_factor``.

    Quarter steps (1.25, 1.5, ...) from ``R = 1.25`` up; below it, where no quarter
    step above 1 fits, the largest hundredth step (``R = 1.1`` gives 1.1), so a job
    that is only slightly input-bound still gets a factor above 1 (any ``e >= 1`` is
    allowed). 1.0 (no echoing) for ``R < 1.01`` and for a ``R`` that is not a number.

    Example:
        >>> fixed_factor(2.7), fixed_factor(9.0), fixed_factor(0.5), fixed_factor(1.13)
        (2.5, 4.0, 1.0, 1.13)
    """
    max_factor = _check_max_factor(max_factor)
    if math.isnan(ratio):
        return 1.0
    if ratio >= 1.25:
        e = math.floor(min(ratio, max_factor) * 4) / 4
    else:  # + 1e-9: 1.15 * 100 is 114.999..., yet 1.15 <= R = 1.15
        e = math.floor(ratio * 100 + 1e-9) / 100
    return max(1.0, min(float(max_factor), e))


def recommend(ratio: float, stall_fraction: float = math.nan, *,
              max_factor: int = DEFAULT_MAX_FACTOR) -> str:
    """Plain-text advice: input-bound or not, which variant and factor, the bound.

    ``R > 1`` is input-bound; the factor is :func:`fixed_factor`. An infinite ``R``
    (a step measured at 0 s) or a NaN one gets advice to measure again, not a factor.

    Example:
        >>> print(recommend(0.5).splitlines()[0])
        Not input-bound: R = 0.50, the loader keeps up with the step.
        >>> print(recommend(1.2).splitlines()[1])  # doctest: +ELLIPSIS
        Fixed factor: e = 1.2. Rule e <= R: ...
    """
    max_factor = _check_max_factor(max_factor)
    ratio = _check_real(ratio, "ratio", "R = t_upstream / t_downstream, e.g. ratio=2.5")
    stall_fraction = _check_real(stall_fraction, "stall_fraction",
                                 "a share in [0, 1], or leave it out")
    if math.isnan(ratio):
        return ("R is undefined (NaN, not a number): there are no valid loader and step "
                "times to compare, so there is no basis for advice.\n"
                "Profile again with the real loader and training step (or --step-ms with "
                "the step's duration) and enough batches to time.")
    if ratio < 0:
        raise ValueError(f"ratio must be >= 0 (R = t_upstream / t_downstream, a ratio of "
                         f"two durations), got {ratio!r}; pass the measured R, e.g. "
                         "Profile.ratio")
    if math.isinf(ratio):
        return ("R is infinite: the training step measured 0 s per call (t_downstream = "
                "0), so R = t_upstream / t_downstream cannot pick a factor.\n"
                "Time the real step: pass the training step function (--step MODULE:NAME), "
                "or its duration (--step-ms, greater than 0), and profile again.")
    if ratio <= 1.0:
        return (f"Not input-bound: R = {ratio:.2f}, the loader keeps up with the step.\n"
                "Echoing cannot make this job faster (echoed steps are free only while "
                "e <= R) and would only repeat data: speed up the step instead.")
    e = fixed_factor(ratio, max_factor)
    if max_factor == 1:
        return (f"Input-bound: R = {ratio:.2f}; with reading overlapped the accelerator "
                f"idles {1 - 1 / ratio:.0%} of the time.\n"
                f"max_factor=1 rules out echoing; pass a larger max_factor (e <= R allows "
                f"up to e = {fixed_factor(ratio, sys.maxsize):g}) for a recommended factor.")
    if e <= 1.0:  # 1 < R < 1.01
        return (f"Barely input-bound: R = {ratio:.4f}; with reading overlapped the "
                f"accelerator idles {1 - 1 / ratio:.2%} of the time.\n"
                "Echoing could gain under 1% (the largest hundredth-step factor e <= R is "
                "1, no echoing): leave it off, or speed up the loader.")
    stall = "" if math.isnan(stall_fraction) else (
        f"; a plain loop measured {stall_fraction:.0%} stall")
    if stall_fraction > 1 - 1 / ratio + 0.03:  # above the overlapped bound
        stall += (", so the loader reads inside the loop: overlapping it (DataLoader "
                  "workers, or AdaptiveEcho's prefetch thread) comes first")
    cap = (f" (capped at max_factor={max_factor}: the paper's gains flatten beyond "
           "4-8 and about 4 repeats are nearly as good as fresh data; try up to "
           f"{fixed_factor(ratio, sys.maxsize):g} if validation quality holds)"
           ) if ratio > max_factor else ""
    return "\n".join([
        f"Input-bound: R = {ratio:.2f}; with reading overlapped the accelerator idles "
        f"{1 - 1 / ratio:.0%} of the time{stall}.",
        f"Fixed factor: e = {e:g}{cap}. Rule e <= R: one upstream batch plus e steps take "
        "max(t_up, e * t_down), so echoed steps are free only while e <= R.",
        f"Expected speedup: at most min(R, e) = {min(ratio, e):.2f}x steps per second; "
        "since echoed data is worth less than fresh, time to a target gains less.",
        "Variant: example echoing before augmentation, the paper's best: "
        f"dataecho.pipeline(data, augment=..., echo='before_augmentation', factor={e:g}); "
        f"holding only a loader of batches, batch echoing: EchoBatches(loader, factor={e:g}).",
        f"Fixed or adaptive: factor='auto' (max_factor={max_factor}) echoes only while the "
        "next fresh batch is late and follows R as it drifts, but is not bit-reproducible; "
        "a fixed factor is.",
    ])


def _check_max_factor(max_factor: object) -> int:
    if isinstance(max_factor, bool) or not isinstance(max_factor, numbers.Integral):
        raise TypeError(
            f"max_factor must be an int >= 1 (the largest echo factor to recommend), got "
            f"{max_factor!r} of type {type(max_factor).__name__}; pass e.g. "
            f"max_factor={DEFAULT_MAX_FACTOR} (the default)")
    if int(max_factor) < 1:
        raise ValueError(
            f"max_factor must be an int >= 1 (the largest echo factor to recommend; 1 never "
            f"echoes), got {int(max_factor)}; pass e.g. max_factor={DEFAULT_MAX_FACTOR} "
            "(the default)")
    return int(max_factor)


def _check_real(value: object, name: str, hint: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} of type "
                        f"{type(value).__name__}; pass {hint}")
    return float(value)


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
            batches: int = 50, warmup: int = 3, steps: int = 20) -> Profile:
    """Times the loader alone, the step alone, then both in a plain loop.

    Args:
        loader: any iterable of batches; iterated twice (once for each timed pass).
        step: the training step ``step(batch)``, or its duration in seconds.
        batches: batches timed in each loader pass.
        warmup: batches (and steps) run untimed first.
        steps: step calls timed on one cached batch.

    Example:
        >>> p = profile(range(100), step=0.001, batches=5, warmup=1, steps=5)
        >>> p.ratio < 1, p.batches
        (True, 5)
    """
    check_iterable(loader, "loader")
    batches = check_positive_int(batches, "batches")
    warmup = check_positive_int(warmup, "warmup", minimum=0)
    steps = check_positive_int(steps, "steps")
    run = step if callable(step) else _sleep(_check_step(step))
    it = iter(loader)
    start = time.perf_counter()
    try:
        batch = next(it)
    except StopIteration:
        raise ValueError(
            f"loader must yield at least warmup + 2 = {warmup + 2} batches (the first, "
            f"{warmup} warm-up, 1 or more timed), but it yielded none; pass a loader over a "
            "non-empty data set (and not an iterator that was already used up)") from None
    startup = time.perf_counter() - start
    for item in _take(it, warmup):
        batch = item
    start, n = time.perf_counter(), 0
    for item in _take(it, batches):
        batch, n = item, n + 1
    if n == 0:
        raise ValueError(f"loader ran out after {warmup + 1} batches; pass a smaller "
                         "warmup or a longer loader")
    upstream = (time.perf_counter() - start) / n
    for _ in range(warmup):
        run(batch)
    start = time.perf_counter()
    for _ in range(steps):
        run(batch)
    downstream = (time.perf_counter() - start) / steps
    return Profile(upstream, downstream, _stall(iter(loader), run, n, warmup), n, startup)


def _stall(it: Iterator[Any], run: Callable[[Any], object], n: int, warmup: int) -> float:
    for batch in _take(it, warmup):
        run(batch)
    blocked, start, count = 0.0, time.perf_counter(), 0
    while count < n:
        t = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        blocked += time.perf_counter() - t
        run(batch)
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


def _synthetic(seconds: float) -> Iterator[list[int]]:
    while True:  # an upstream that takes `seconds` per batch, read in the loop
        time.sleep(seconds)
        yield [0] * 32


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    if "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: modules in the working directory
    obj: Any = importlib.import_module(module)
    for part in filter(None, name.split(".")):
        obj = getattr(obj, part)
    return obj


def _check_ms(ms: float, flag: str, example: str) -> float:
    if not (math.isfinite(ms) and ms >= 0):
        raise ValueError(f"{flag} must be a finite duration in milliseconds >= 0, got {ms:g}; "
                         f"pass the measured duration, e.g. {flag} {example}")
    return ms / 1e3


def main(argv: list[str] | None = None) -> int:
    """``dataecho profile``: measure R and the stall fraction, print advice.

    Example:
        >>> main(["--synthetic-upstream-ms", "2", "--step-ms", "1", "--batches", "3",
        ...       "--json"])  # doctest: +ELLIPSIS
        {"upstream_s": ...}
        0
    """
    parser = argparse.ArgumentParser(
        prog="dataecho profile", description=__doc__.splitlines()[0] if __doc__ else None)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--synthetic-upstream-ms", type=float, metavar="MS",
                        help="a stand-in loader taking MS milliseconds per batch")
    source.add_argument("--module", metavar="MODULE:NAME",
                        help="a loader, or a function returning one (called without "
                             "arguments), e.g. mypkg.data:make_loader")
    work = parser.add_mutually_exclusive_group(required=True)
    work.add_argument("--step-ms", type=float, metavar="MS",
                      help="a stand-in training step taking MS milliseconds")
    work.add_argument("--step", metavar="MODULE:NAME", help="the step, called as fn(batch)")
    parser.add_argument("--batches", type=int, default=50, help="batches timed per pass")
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches first")
    parser.add_argument("--max-factor", type=int, default=DEFAULT_MAX_FACTOR,
                        help="cap on the recommended factor")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    try:
        loader = (_synthetic(_check_ms(args.synthetic_upstream_ms, "--synthetic-upstream-ms",
                                       "40")) if args.module is None
                  else _load(args.module))
        if callable(loader) and not isinstance(loader, Iterable):
            loader = loader()
        step = (_check_ms(args.step_ms, "--step-ms", "25") if args.step is None
                else _load(args.step))
        _check_max_factor(args.max_factor)
        result = profile(loader, step, batches=args.batches, warmup=args.warmup,
                         steps=min(args.batches, 20))
    except (ImportError, AttributeError, TypeError, ValueError) as err:
        print(f"dataecho profile: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        print(f"{result}\n\n{result.recommendation(args.max_factor)}")
    return 0
