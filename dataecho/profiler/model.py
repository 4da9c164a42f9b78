"""The gain a factor and a variant predict, from the step and the loader's two sides.

A reader that echoes before augmentation still augments every copy: per batch it spends
``t_read / e + t_augment``, not ``(t_read + t_augment) / e``. With the step ``t_step``
(the accelerator's time per batch) and both sides per batch (over the workers), one
batch takes ``max(t_step, t_read + t_augment)`` without echoing and

- before augmentation: ``max(t_step, t_read / e + t_augment)``;
- after augmentation, or batch echoing: ``max(t_step, (t_read + t_augment) / e)``;

and the time to a target scales by ``steps(1) / steps(e)`` (echoed data is worth less
than fresh: measure it on your workload with ``dataecho reproduce``; 1.0 is the upper
bound). When ``t_augment >= t_step`` no factor before augmentation frees the step: only
copies that skip the augmentation (after it, or batches) can.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from .._checks import check_positive_int
from ..factor import Auto

Variant = Literal["before_augmentation", "after_augmentation", "batch"]


@dataclass(frozen=True)
class Costs:
    """Seconds per batch: the step, and the loader's read and augmentation (over its workers).

    Raises:
        ValueError: a cost is negative, not finite, or the step is 0.

    Example:
        >>> Costs(step_s=0.01, read_s=0.04, augment_s=0.005).input_bound
        True
    """

    step_s: float
    read_s: float
    augment_s: float

    def __post_init__(self) -> None:
        for name in ("step_s", "read_s", "augment_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"Costs.{name} must be a finite number of seconds >= 0, got "
                                 f"{value!r}; pass the measured time per batch")
        if self.step_s == 0:
            raise ValueError("Costs.step_s must be > 0 seconds (the step per batch), got 0; "
                             "time the real training step")

    @property
    def input_bound(self) -> bool:
        """Whether the loader is slower than the step (the accelerator waits)."""
        return self.read_s + self.augment_s > self.step_s

    def batch_s(self, variant: Variant | None, factor: float) -> float:
        """Seconds per step at ``factor`` with ``variant`` (None: no echoing)."""
        if variant is None or factor == 1:
            return max(self.step_s, self.read_s + self.augment_s)
        if variant == "before_augmentation":
            return max(self.step_s, self.read_s / factor + self.augment_s)
        return max(self.step_s, (self.read_s + self.augment_s) / factor)

    def speedup(self, variant: Variant, factor: float, steps_ratio: float = 1.0) -> float:
        """The predicted speedup to a target: steps per second gained, times ``steps_ratio``.

        ``steps_ratio`` is ``steps(1) / steps(factor)`` on the workload (1.0: echoed data
        worth as much as fresh, the upper bound).

        Example:
            >>> costs = Costs(step_s=0.01, read_s=0.04, augment_s=0.005)
            >>> round(costs.speedup("before_augmentation", 4), 2)
            3.0
            >>> round(costs.speedup("after_augmentation", 4), 2)
            4.0
        """
        return self.batch_s(None, 1) / self.batch_s(variant, factor) * steps_ratio

    def free_factor(self, variant: Variant) -> float:
        """The largest factor whose echoed steps are all free (the loader still keeps up).

        Before augmentation ``t_read / (t_step - t_augment)``, infinite when the
        augmentation alone takes the step or more (no factor frees the step); after it
        and for batches ``(t_read + t_augment) / t_step``. At least 1.

        Example:
            >>> Costs(step_s=0.01, read_s=0.04, augment_s=0.005).free_factor(
            ...     "before_augmentation")
            8.0
        """
        if variant == "before_augmentation":
            spare = self.step_s - self.augment_s
            return math.inf if spare <= 0 else max(1.0, self.read_s / spare)
        return max(1.0, (self.read_s + self.augment_s) / self.step_s)


@dataclass(frozen=True)
class Prediction:
    """A recommended variant and factor and the speedup the model predicts for them.

    Attributes:
        variant: where to echo (``"before_augmentation"``, or ``"after_augmentation"``,
            which batch echoing matches), None for no echoing.
        factor: the factor (1.0 with no echoing).
        speedup: steps per second at ``factor`` over none, times ``steps_ratio``.
        augment_bound: the augmentation alone takes the step or more, so no factor
            before augmentation frees it.

    Example:
        >>> predict(Costs(step_s=0.01, read_s=0.03, augment_s=0.012)).augment_bound
        True
    """

    variant: Variant | None
    factor: float
    speedup: float
    augment_bound: bool  # the augmentation alone takes the step or more


def predict(costs: Costs, max_factor: int | None = None,
            steps_ratio: float = 1.0) -> Prediction:
    """The variant and factor with the largest predicted gain (None: don't echo).

    The factor is the largest free one on the advice's steps (:func:`on_step`), capped
    at ``max_factor`` (default: 8 uses of an example for copies augmented anew, 4 for
    identical ones, as ``dataecho.Auto``); past it steps are no faster, only less fresh.
    Echoing before augmentation (copies augmented anew, the paper's best: it needs the
    fewest fresh examples) is chosen unless identical copies would gain over 5% more, as
    they do when the augmentation alone takes most of the step.

    Example:
        >>> predict(Costs(step_s=0.01, read_s=0.04, augment_s=0.005))
        Prediction(variant='before_augmentation', factor=8.0, speedup=4.5, augment_bound=False)
        >>> predict(Costs(step_s=0.01, read_s=0.04, augment_s=0.02)).variant
        'after_augmentation'
    """
    if max_factor is not None:
        max_factor = check_positive_int(max_factor, "max_factor")
    augment_bound = costs.augment_s >= costs.step_s
    options = []
    variants: tuple[Variant, ...] = ("before_augmentation", "after_augmentation")
    for variant in variants:
        most = cap(variant, max_factor)
        factor = on_step(min(costs.free_factor(variant), most))
        options.append(Prediction(variant, factor, costs.speedup(variant, factor, steps_ratio),
                                  augment_bound))
    before, after = options
    best = before if before.speedup >= 0.95 * after.speedup else after
    if not costs.input_bound or best.factor == 1.0:
        return Prediction(None, 1.0, 1.0, augment_bound)
    return best


def on_step(factor: float) -> float:
    """The largest factor the profiler advises at most ``factor``: quarter steps (1.25,
    1.5, ...) from 1.25 up; below it the largest hundredth step, so a job only slightly
    input-bound still gets a factor above 1; at least 1.0 (and 1.0 for NaN).

    Example:
        >>> on_step(2.7), on_step(1.13), on_step(0.5), on_step(4.0)
        (2.5, 1.13, 1.0, 4.0)
    """
    if math.isnan(factor):
        return 1.0
    # + 1e-9: a ratio of two sums of times (0.4 s / 0.1 s is 3.9999...) or 1.15 * 100
    # (114.999...) lands a hair under the step it is equal to.
    if factor >= 1.25:
        return math.floor(factor * 4 + 1e-9) / 4
    return max(1.0, math.floor(factor * 100 + 1e-9) / 100)


def cap(variant: Variant, max_factor: int | None = None) -> int:
    """The most uses of one example :func:`predict` advises for ``variant``.

    ``max_factor`` if given, else ``dataecho.Auto``'s own cap: 8 for copies augmented
    anew (before augmentation), 4 for identical ones.

    Example:
        >>> cap("before_augmentation"), cap("after_augmentation"), cap("batch", 3)
        (8, 4, 3)
    """
    return Auto(max_factor=max_factor).cap(augmented=variant == "before_augmentation")
