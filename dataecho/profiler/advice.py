"""Advice from ``R``, or from the model where the loader's two sides are known.

Echoing pays only when ``R > 1``, and a factor ``e`` is free only while ``e <= R``
(Choi et al., 2019): one upstream batch plus ``e`` steps take ``max(t_up, e * t_down)``.
Given the spread of ``R`` over several passes, the advice holds for every pass: the
factor is the one free on the slowest, and passes that disagree on whether to echo at
all get no advice, but the way to a decision. Given the loader's read and augmentation
per batch (:class:`~.model.Costs`), the variant, factor and predicted speedup are the
model's (:mod:`.prediction`), which counts the augmentation of every copy.
"""

from __future__ import annotations

import math
import numbers
import sys

from .._checks import check_positive_int
from ..factor import AUGMENTED_MAX_FACTOR, DEFAULT_MAX_FACTOR
from .model import Costs, on_step
from .prediction import advised_prediction, explain


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
    max_factor = check_positive_int(max_factor, "max_factor")
    return on_step(min(ratio, max_factor))


def advised_factor(ratio: float, spread: tuple[float, float] | None = None,
                   max_factor: int = DEFAULT_MAX_FACTOR) -> float | None:
    """The factor :func:`recommend` advises (1.0: don't echo), or None where it advises none.

    None where ``spread`` (the lowest and highest R over the passes) straddles the
    boundary between echoing and not, and where ``R`` is NaN or infinite (measure
    again). Otherwise :func:`fixed_factor` of the lowest R: the factor free on every
    pass, not only on the median one.

    Example:
        >>> advised_factor(3.0, (2.6, 3.9)), advised_factor(1.1, (0.9, 3.8))
        (2.5, None)
    """
    max_factor = check_positive_int(max_factor, "max_factor")
    if math.isnan(ratio) or math.isinf(ratio):
        return None
    low, high = (ratio, ratio) if spread is None else spread
    if _echoes(low) != _echoes(high):
        return None
    return fixed_factor(min(low, ratio), max_factor)


def _echoes(ratio: float) -> bool:
    # The boundary recommend() draws: some factor above 1 fits under R (R >= 1.01).
    return fixed_factor(ratio, sys.maxsize) > 1


def recommend(ratio: float, stall_fraction: float = math.nan, *,
              max_factor: int | None = None, spread: tuple[float, float] | None = None,
              passes: int = 0, num_workers: int | None = None, costs: Costs | None = None,
              steps: tuple[float, float] | None = None) -> str:
    """Plain-text advice: input-bound or not, which variant and factor, the gain.

    Without ``costs``, ``R > 1`` is input-bound; the factor is :func:`fixed_factor`, of
    the lowest R when a ``spread`` is given (see :func:`advised_factor`), and the advice
    says that a prediction needs the loader's two sides. With ``costs``, the variant,
    factor and predicted speedup are :func:`~dataecho.profiler.model.predict`'s, and the
    advice says when the augmentation alone takes the step. Passes that disagree on
    echoing (their R, or with ``costs`` their step) get no advice but the way to a
    decision. An infinite ``R`` (a step measured at 0 s) or a NaN one gets advice to
    measure again, not a factor. A loop that stalls longer than overlapped reading
    would is told to overlap it first, unless ``num_workers`` says the loader already
    has workers.

    Args:
        ratio: ``R = t_upstream / t_downstream`` (the median over passes).
        stall_fraction: the share of a plain loop's time inside ``next()``, or NaN.
        max_factor: the largest factor to advise, an int >= 1; None: 4 from R alone,
            and ``Auto``'s caps from the model (8 uses before augmentation, 4 after).
        spread: the lowest and highest R over the passes, or None (one measurement).
        passes: how many passes ``spread`` comes from, for the text.
        num_workers: the loader's worker processes, None where it has no such setting.
        costs: the step and the loader's read and augmentation, seconds per batch
            (over its workers), or None where they are not known.
        steps: the lowest and highest step over the passes, or None (one measurement).

    Example:
        >>> print(recommend(0.5).splitlines()[0])
        Not input-bound: R = 0.50, the loader keeps up with the step.
        >>> print(recommend(1.2).splitlines()[1])  # doctest: +ELLIPSIS
        Fixed factor: e = 1.2. Echoed steps are free while e <= R: ...
        >>> print(recommend(1.1, spread=(0.9, 3.8), passes=3).splitlines()[0])
        Undecided: R = 1.10, but its 3 passes range from 0.90 to 3.80, on both sides of 1.
        >>> costs = Costs(step_s=0.010, read_s=0.030, augment_s=0.006)
        >>> print(recommend(3.6, costs=costs).splitlines()[2])  # doctest: +ELLIPSIS
        Prediction: 3.60x steps/s at e = 7.5 before augmentation; to a target, ...
    """
    chosen = None if max_factor is None else check_positive_int(max_factor, "max_factor")
    max_factor = DEFAULT_MAX_FACTOR if chosen is None else chosen
    ratio = _check_real(ratio, "ratio", "R = t_upstream / t_downstream, e.g. ratio=2.5")
    stall_fraction = _check_real(stall_fraction, "stall_fraction",
                                 "a share in [0, 1], or leave it out")
    if spread is not None:
        spread = (_check_real(spread[0], "spread", "(lowest R, highest R)"),
                  _check_real(spread[1], "spread", "(lowest R, highest R)"))
    if math.isnan(ratio):
        return ("R is undefined (NaN): no valid loader and step times, so no advice.\n"
                "Profile again with the real loader and step (or --step-ms), timing enough "
                "batches.")
    if ratio < 0:
        raise ValueError(f"ratio must be >= 0 (R = t_upstream / t_downstream, a ratio of "
                         f"two durations), got {ratio!r}; pass the measured R, e.g. "
                         "Profile.ratio")
    if math.isinf(ratio):
        return ("R is infinite: the training step measured 0 s per call, so R cannot pick "
                "a factor.\n"
                "Time the real step (--step MODULE:NAME, or --step-ms above 0) and profile "
                "again.")
    e = advised_factor(ratio, spread, max_factor)
    if e is None:  # what is left to refuse: passes on both sides of the boundary
        return _undecided(ratio, spread or (ratio, ratio), passes)
    if costs is not None:
        return _predicted(ratio, stall_fraction, costs, chosen, spread, passes, num_workers,
                          steps)
    if ratio <= 1.0:
        return (f"Not input-bound: R = {ratio:.2f}{_over(spread, passes)}, the loader keeps "
                "up with the step.\n"
                "Echoing would only repeat data (no step is free unless e <= R); speed up "
                "the step.")
    if max_factor == 1:
        return (f"{_idle(ratio, '.0%')}.\n"
                f"max_factor=1 rules out echoing; pass a larger one (e <= R allows up to "
                f"e = {fixed_factor(ratio, sys.maxsize):g}).")
    if e <= 1.0:  # 1 < R < 1.01
        return (f"Barely input-bound{_idle(ratio, '.2%', '.4f')[11:]}.\n"
                "Echoing could gain under 1% (the largest hundredth step e <= R is 1): "
                "leave it off, or speed up the loader.")
    low = ratio if spread is None else min(ratio, spread[0])
    lines = [_idle(ratio, ".0%", over=_over(spread, passes)) + _stalls(stall_fraction),
             *_overlap(ratio, stall_fraction, num_workers)]
    cap = (f" (capped at max_factor={max_factor}: ~4 repeats are nearly as good as fresh "
           f"data, gains flatten past 4-8; try up to {fixed_factor(low, sys.maxsize):g} "
           "if validation holds)") if low > max_factor else ""
    slowest = (f" (free on the slowest pass too, R = {low:.2f})"
               if fixed_factor(low, max_factor) < fixed_factor(ratio, max_factor) else "")
    return "\n".join([
        *lines,
        f"Fixed factor: e = {e:g}{slowest}{cap}. Echoed steps are free while e <= R: a "
        "batch plus e steps take max(t_up, e * t_down).",
        f"Speedup: at most min(R, e) = {min(ratio, e):.2f}x steps/s; less to a target, as "
        "echoed data is worth less.",
        "Prediction: needs the loader's two sides per batch, its read and its augmentation: "
        "wrap your dataset in EchoDataset(data, augment=..., factor=1) and profile that "
        "loader, or pass them (--read-ms MS --augment-ms MS).",
        f"Variant: dataecho.pipeline(data, augment=..., echo='before_augmentation', "
        f"factor={e:g}), the paper's best; given only batches, batch echoing: "
        f"EchoBatches(loader, factor={e:g}).",
        _adaptive(max_factor),
    ])


def _predicted(ratio: float, stall_fraction: float, costs: Costs, max_factor: int | None,
               spread: tuple[float, float] | None, passes: int, num_workers: int | None,
               steps: tuple[float, float] | None) -> str:
    prediction = advised_prediction(costs, max_factor, steps)
    if prediction is None:
        return _undecided_steps(costs, steps or (costs.step_s, costs.step_s), passes)
    lines = explain(costs, prediction, max_factor)
    lines.insert(1, f"Measured: R = {ratio:.2f}{_over(spread, passes)}{_stalls(stall_fraction)}")
    upstream, sides = ratio * costs.step_s, costs.read_s + costs.augment_s
    if upstream > 1.25 * sides:
        # Collation and the hand-over between processes run for every batch, copies
        # included: the model cannot save them, so it would overstate the gain.
        lines.insert(2, f"Beyond the sides: the loader alone takes {1e3 * upstream:.2f} ms "
                        f"per batch, {1e3 * (upstream - sides):.2f} ms more than its read and "
                        "augmentation; that work (collation, batches passed between "
                        "processes) runs for every batch, echoed or not, and the prediction "
                        "leaves it out.")
    if costs.input_bound:
        lines[2:2] = _overlap(ratio, stall_fraction, num_workers)
    if prediction.variant is not None:
        lines.append(_adaptive(DEFAULT_MAX_FACTOR if max_factor is None else max_factor))
    return "\n".join(lines)


def _stalls(stall_fraction: float) -> str:
    return "." if math.isnan(stall_fraction) else f"; a plain loop stalls {stall_fraction:.0%}."


def _overlap(ratio: float, stall_fraction: float, num_workers: int | None) -> list[str]:
    # Above the overlapped bound, reading happens inside the loop; but a loader with
    # workers already overlaps it (its stall then comes from workers short of CPU), so
    # it is never told to add them.
    if stall_fraction > 1 - 1 / ratio + 0.03 and not num_workers:
        return ["The loader reads inside the loop: overlap it first (DataLoader workers, "
                "AdaptiveEcho's prefetch thread)."]
    return []


def _adaptive(max_factor: int) -> str:
    # Auto()'s own caps, unless the caller chose one: they differ by variant.
    if max_factor != DEFAULT_MAX_FACTOR:
        auto = f"Auto(max_factor={max_factor}) echoes only while a batch is late, at most "
        return (f"Adaptive: factor={auto}{max_factor} uses of an example, tracking R; not "
                "bit-reproducible.")
    return ("Adaptive: factor=Auto() echoes only while a batch is late, tracking R: at most "
            f"{AUGMENTED_MAX_FACTOR} uses of an example before augmentation, "
            f"{DEFAULT_MAX_FACTOR} of identical copies (after it, batches); not "
            "bit-reproducible.")


def _idle(ratio: float, share: str, r: str = ".2f", over: str = "") -> str:
    return (f"Input-bound: R = {ratio:{r}}{over}: the accelerator idles "
            f"{1 - 1 / ratio:{share}} with reading overlapped")


def _over(spread: tuple[float, float] | None, passes: int) -> str:
    if spread is None:
        return ""
    where = f" over {passes} passes" if passes else ""
    return f" ({spread[0]:.2f}-{spread[1]:.2f}{where})"


def _undecided(ratio: float, spread: tuple[float, float], passes: int) -> str:
    counted = f"its {passes} passes" if passes else "its passes"
    return "\n".join([
        f"Undecided: R = {ratio:.2f}, but {counted} range from {spread[0]:.2f} to "
        f"{spread[1]:.2f}, on both sides of 1.",
        "Some passes say the loader keeps up with the step, others that the accelerator "
        "waits for it, so no advice: it would hang on which pass came out on top.",
        _DECIDE,
    ])


_DECIDE = ("To get a decision: time more batches per pass and more passes (dataecho profile "
           "--batches 200 --passes 5; profile(batches=200, passes=5)), on a quieter machine "
           "(no other jobs on the loader's cores). The spread is what to watch shrink.")


def _undecided_steps(costs: Costs, steps: tuple[float, float], passes: int) -> str:
    counted = f"its {passes} passes" if passes else "its passes"
    sides = 1e3 * (costs.read_s + costs.augment_s)
    return "\n".join([
        f"Undecided: the loader's read and augment take {sides:.2f} ms per batch, but the "
        f"step over {counted} ranges from {1e3 * steps[0]:.2f} to {1e3 * steps[1]:.2f} ms: "
        "some passes make a factor free, others none.",
        _DECIDE,
    ])


def _check_real(value: object, name: str, hint: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} of type "
                        f"{type(value).__name__}; pass {hint}")
    return float(value)
