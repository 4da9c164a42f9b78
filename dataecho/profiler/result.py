"""What a profile found: each pass's times, their medians and spreads, and the advice.

:func:`~dataecho.profiler.profile` returns a :class:`Profile` built from its passes
(each a :class:`Pass`); the advice (:meth:`Profile.recommendation`) takes the spread of ``R``
over the passes into account, so it holds for every pass or is withheld. Where the
loader's two sides are known (``read_s``, ``augment_s``), the advice is the model's
(:meth:`Profile.prediction`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..adaptive import DEFAULT_MAX_FACTOR
from .advice import advised_factor, recommend
from .model import Costs, Prediction
from .prediction import advised_prediction

TIMES = ("upstream_s", "downstream_s", "stall_fraction", "ratio")  # what each pass measures


@dataclass(frozen=True)
class Pass:
    """One pass's times: the loader alone, the step alone, both in a plain loop.

    Example:
        >>> Pass(upstream_s=0.04, downstream_s=0.01, stall_fraction=0.8).ratio
        4.0
    """

    upstream_s: float  # seconds per batch reading the loader alone, after the warm-up
    downstream_s: float  # seconds per step on one cached batch
    stall_fraction: float  # share of a plain loop's time spent inside next()
    startup_s: float = 0.0  # seconds to the pass's first batch (worker start, first read)

    @property
    def ratio(self) -> float:
        """``R = t_upstream / t_downstream`` of this pass."""
        return self.upstream_s / self.downstream_s if self.downstream_s > 0 else math.inf


@dataclass(frozen=True)
class Profile:
    """Measured times of a loader and a training step, and what they imply.

    Built by :func:`profile` from its passes (:meth:`of`): the times are their medians,
    :meth:`spread` their lowest and highest. Built by hand from single numbers, it has
    no passes and no spread. ``read_s`` and ``augment_s`` are the loader's two sides per
    batch, over its workers: :func:`profile` reads them from an ``EchoDataset`` it finds
    in the loader; ``dataclasses.replace(p, read_s=..., augment_s=...)`` gives them by
    hand. With them, :meth:`costs` is the model's input and the advice its prediction.

    Example:
        >>> from dataecho.profiler import fixed_factor
        >>> p = Profile(upstream_s=0.04, downstream_s=0.01, stall_fraction=0.8, batches=50)
        >>> round(p.ratio, 2), fixed_factor(p.ratio), p.spread("ratio")
        (4.0, 4.0, (4.0, 4.0))
        >>> p = Profile(0.045, 0.01, 0.8, 50, read_s=0.04, augment_s=0.005)
        >>> p.prediction()
        Prediction(variant='before_augmentation', factor=8.0, speedup=4.5, augment_bound=False)
    """

    upstream_s: float  # seconds per batch reading the loader alone, after warm-up (median)
    downstream_s: float  # seconds per step on one cached batch (median)
    stall_fraction: float  # share of a plain loop's time spent inside next() (median)
    batches: int  # batches timed per phase of a pass
    startup_s: float = 0.0  # seconds to the first batch (worker start, first read; median)
    passes: tuple[Pass, ...] = ()  # each pass's times; empty for a hand-built profile
    warmup: int = 0  # batches read untimed before each timed phase (prefetch included)
    num_workers: int | None = None  # the loader's worker processes; None: not a DataLoader
    read_s: float | None = None  # seconds per batch reading (over the workers); None: unknown
    augment_s: float | None = None  # seconds per batch augmenting (over the workers)

    @classmethod
    def of(cls, passes: Sequence[Pass], batches: int, warmup: int = 0,
           num_workers: int | None = None, read_s: float | None = None,
           augment_s: float | None = None) -> Profile:
        """The medians of ``passes``, which it keeps for the spreads.

        Example:
            >>> p = Profile.of([Pass(0.04, 0.01, 0.8), Pass(0.05, 0.01, 0.8),
            ...                 Pass(0.03, 0.01, 0.7)], batches=50)
            >>> round(p.upstream_s, 3), [round(x, 2) for x in p.spread("ratio")]
            (0.04, [3.0, 5.0])
        """
        def median(name: str) -> float:
            return _median([getattr(p, name) for p in passes])

        return cls(median("upstream_s"), median("downstream_s"), median("stall_fraction"),
                   batches, median("startup_s"), tuple(passes), warmup, num_workers,
                   read_s, augment_s)

    @property
    def ratio(self) -> float:
        """``R = t_upstream / t_downstream``: the median of the passes' R, if any."""
        if self.passes:
            return _median([p.ratio for p in self.passes])
        return self.upstream_s / self.downstream_s if self.downstream_s > 0 else math.inf

    def spread(self, name: str) -> tuple[float, float]:
        """The lowest and highest of ``name`` (one of ``TIMES``) over the passes.

        Example:
            >>> Profile.of([Pass(0.04, 0.01, 0.8), Pass(0.02, 0.01, 0.6),
            ...             Pass(0.03, 0.01, 0.7)], 50).spread("upstream_s")
            (0.02, 0.04)
        """
        if name not in TIMES:
            raise ValueError(f"name must be one of {', '.join(TIMES)}, got {name!r}; pass "
                             "e.g. spread('ratio')")
        values = [v for v in (getattr(p, name) for p in self.passes) if not math.isnan(v)]
        if not values:
            value = self.ratio if name == "ratio" else float(getattr(self, name))
            return value, value
        return min(values), max(values)

    def costs(self) -> Costs | None:
        """The model's input: the median step and the loader's two sides, per batch.

        None where a side is unknown or the step is not a positive number of seconds.
        """
        if self.read_s is None or self.augment_s is None:
            return None
        if not (math.isfinite(self.downstream_s) and self.downstream_s > 0):
            return None
        return Costs(self.downstream_s, self.read_s, self.augment_s)

    def prediction(self, max_factor: int | None = None) -> Prediction | None:
        """The model's variant, factor and speedup (variant None: don't echo), or None
        where the sides are unknown or the passes disagree on echoing (their R, or the
        model's verdict at their lowest and highest step). See
        :func:`~dataecho.profiler.model.predict` for ``max_factor``."""
        costs = self.costs()
        if costs is None or advised_factor(self.ratio, self.spread("ratio")) is None:
            return None
        return advised_prediction(costs, max_factor, self._steps())

    def factor(self, max_factor: int | None = None) -> float | None:
        """The factor the advice names (1.0: don't echo), or None when it gives none: the
        passes disagree on echoing, or R is undefined or infinite. The model's
        (:meth:`prediction`) where the two sides are known, else
        :func:`~dataecho.profiler.advised_factor` (``max_factor`` None: 4)."""
        if self.costs() is not None:
            prediction = self.prediction(max_factor)
            return None if prediction is None else prediction.factor
        return advised_factor(self.ratio, self.spread("ratio"),
                              DEFAULT_MAX_FACTOR if max_factor is None else max_factor)

    def recommendation(self, max_factor: int | None = None) -> str:
        """Advice on whether, how and how much to echo; see :func:`recommend`."""
        return recommend(self.ratio, self.stall_fraction, max_factor=max_factor,
                         spread=self.spread("ratio") if self.passes else None,
                         passes=len(self.passes), num_workers=self.num_workers,
                         costs=self.costs(), steps=self._steps())

    def as_dict(self, max_factor: int | None = None) -> dict[str, Any]:
        """Every number plus R, the spreads and the advised factor and variant, for JSON.

        ``factor`` is None where the advice refuses (``decided`` False) or R is not a
        number; ``variant`` is None where the advice is not to echo. ``prediction`` is
        the model's (``variant``, ``factor``, ``speedup``, ``augment_bound``) where the
        two sides are known and the passes agree, else None; ``read_s`` and
        ``augment_s`` are those sides per batch (None: unknown).
        """
        factor, prediction = self.factor(max_factor), self.prediction(max_factor)
        variant = (prediction.variant if prediction is not None else
                   "before_augmentation" if factor is not None and factor > 1 else None)
        top = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "passes"}
        return {**top, "ratio": self.ratio, "max_factor": max_factor,
                "spread": {name: list(self.spread(name)) for name in TIMES},
                "passes": [{**asdict(p), "ratio": p.ratio} for p in self.passes],
                "decided": factor is not None, "factor": factor, "variant": variant,
                "prediction": None if prediction is None else asdict(prediction)}

    def _steps(self) -> tuple[float, float] | None:
        return self.spread("downstream_s") if self.passes else None

    def __str__(self) -> str:
        n = len(self.passes)

        def span(name: str, scale: float = 1e3, form: str = ".2f", unit: str = " ms") -> str:
            low, high = self.spread(name)
            return f"{scale * low:{form}}-{scale * high:{form}}{unit}" if n else "one measurement"

        workers = (f", the loader's {self.num_workers} workers' prefetch included"
                   if self.num_workers else "")
        lines = [
            f"upstream    {1e3 * self.upstream_s:8.2f} ms per batch (loader alone, "
            f"{self.batches} batches; {span('upstream_s')}; first batch after "
            f"{self.startup_s:.2f} s)",
            f"downstream  {1e3 * self.downstream_s:8.2f} ms per step (step alone; "
            f"{span('downstream_s')})",
            f"R           {self.ratio:8.2f}    t_upstream / t_downstream "
            f"({span('ratio', 1, '.2f', '')})",
            f"stall       {self.stall_fraction:8.1%}    of a plain loop's time inside next() "
            f"({span('stall_fraction', 100, '.1f', '%')})",
        ]
        if self.read_s is not None and self.augment_s is not None:
            lines += [f"read        {1e3 * self.read_s:8.2f} ms per batch reading and "
                      "decoding, over the loader's workers (what an echo saves)",
                      f"augment     {1e3 * self.augment_s:8.2f} ms per batch augmenting, over "
                      "the workers (repeated for copies echoed before it)"]
        if n:
            lines.append(f"passes      {n:8d}    medians above, lowest-highest in parentheses; "
                         f"{self.warmup} batches untimed before each{workers}")
        return "\n".join(lines)


def _median(values: Sequence[float]) -> float:
    """The median, NaN left out (a pass with no plain-loop step); NaN if none is left."""
    kept = sorted(v for v in values if not math.isnan(v))
    if not kept:
        return math.nan
    mid = len(kept) // 2
    return kept[mid] if len(kept) % 2 else (kept[mid - 1] + kept[mid]) / 2
