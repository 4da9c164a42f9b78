"""Advice from the model: the variant and factor :func:`~.model.predict` picks, in words.

Given the loader's two sides per batch (read and augmentation, over its workers) and the
step, :func:`advised_prediction` is the model's recommendation, or None where the passes
disagree on whether to echo; :func:`explain` says it: whether the loader is slower than
the step, whether the augmentation alone takes the step (then copies augmented anew
cannot help), the predicted speedup, and how to set the variant and factor.
"""

from __future__ import annotations

import math

from .._checks import check_positive_int
from .model import Costs, Prediction, cap, predict

# Where the last factor of the prediction, steps(1) / steps(e), comes from.
TO_A_TARGET = ("to a target, times steps(1)/steps(e) of your workload, measured with "
               "dataecho reproduce")


def advised_prediction(costs: Costs, max_factor: int | None = None,
                       steps: tuple[float, float] | None = None) -> Prediction | None:
    """The model's recommendation, or None where the step's passes disagree on echoing.

    ``steps`` is the lowest and highest step over the passes (None: one measurement).
    The verdict (echo or not) can only flip once as the step grows, so where the two
    ends agree every pass between them does too.

    Example:
        >>> costs = Costs(step_s=0.010, read_s=0.011, augment_s=0.0)
        >>> advised_prediction(costs).factor, advised_prediction(costs, steps=(0.006, 0.012))
        (1.1, None)
        >>> advised_prediction(Costs(0.010, 0.040, 0.005), steps=(0.009, 0.011)).factor
        8.0
    """
    if max_factor is not None:
        max_factor = check_positive_int(max_factor, "max_factor")
    if steps is not None:
        verdicts = {predict(Costs(step, costs.read_s, costs.augment_s), max_factor).variant
                    is None for step in steps if math.isfinite(step) and step > 0}
        if len(verdicts) > 1:
            return None
    return predict(costs, max_factor)


def explain(costs: Costs, prediction: Prediction, max_factor: int | None = None) -> list[str]:
    """The model's advice, one line per point: the verdict first, then what to do.

    Example:
        >>> costs = Costs(step_s=0.010, read_s=0.030, augment_s=0.012)
        >>> print(explain(costs, predict(costs))[1])  # doctest: +ELLIPSIS
        Augmentation-bound: the augmentation alone, 12.00 ms per batch, takes the 10.00 ms ...
    """
    read, augment, step = 1e3 * costs.read_s, 1e3 * costs.augment_s, 1e3 * costs.step_s
    sides = f"the loader's read {read:.2f} + augment {augment:.2f} = {read + augment:.2f} ms"
    if not costs.input_bound:
        return [f"Not input-bound: {sides} per batch (over its workers) is within the "
                f"{step:.2f} ms step.",
                "Echoing would only repeat data (no step is free); speed up the step."]
    lines = [f"Input-bound: {sides} per batch (over its workers) exceeds the {step:.2f} ms "
             f"step: the accelerator idles {1 - step / (read + augment):.0%}."]
    if prediction.augment_bound:
        best = costs.speedup("before_augmentation", cap("before_augmentation", max_factor))
        lines.append(
            f"Augmentation-bound: the augmentation alone, {augment:.2f} ms per batch, takes "
            f"the {step:.2f} ms step or more: echoing before augmentation repeats it for every "
            f"copy and gains at most {best:.2f}x; only echo after augmentation or batch echo "
            "can help.")
    if prediction.variant is None:
        if max_factor == 1:
            lines.append("max_factor=1 rules out echoing; pass a larger one.")
        else:  # not augmentation-bound, so both free factors are finite
            free = max(costs.free_factor(v) for v in ("before_augmentation",
                                                       "after_augmentation"))
            lines.append(f"Barely input-bound: the largest free factor, {free:.2f}, is under "
                         "the first quarter step (1.25): leave echoing off, or speed up the "
                         "loader.")
        return lines
    e, variant = prediction.factor, prediction.variant
    where = "before augmentation" if variant == "before_augmentation" else "after augmentation"
    free = costs.free_factor(variant)
    capped = (f" (capped at {cap(variant, max_factor)} uses of an example; free up to "
           f"{'any factor' if math.isinf(free) else f'e = {free:.2f}'})"
           if free >= e + 0.25 else "")
    lines.append(f"Prediction: {prediction.speedup:.2f}x steps/s at e = {e:g} {where}{capped}; "
                 f"{TO_A_TARGET}.")
    if variant == "before_augmentation":
        lines.append(f"Variant: EchoDataset(data, augment=..., factor={e:g}) or "
                     f"dataecho.pipeline(data, augment=..., echo='before_augmentation', "
                     f"factor={e:g}): copies augmented anew, the paper's best.")
    else:
        lines.append(f"Variant: EchoDataset(data, augment=..., echo='after_augmentation', "
                     f"factor={e:g}) (identical copies of each augmented example), or batch "
                     f"echoing: EchoBatches(loader, factor={e:g}).")
    return lines
