"""The gain model: both sides of the echo point, the variant and the factor it recommends."""

import math

import pytest

from dataecho.profiler.model import Costs, predict


def test_augmentation_over_the_step_recommends_no_echo_before_augmentation():
    costs = Costs(step_s=0.010, read_s=0.030, augment_s=0.012)
    prediction = predict(costs)
    assert prediction.augment_bound and prediction.variant == "after_augmentation"
    assert costs.free_factor("before_augmentation") == math.inf
    # Before augmentation, no factor gets the loader under the step: 42 / 12 ms at best.
    assert costs.speedup("before_augmentation", 1000) < 42 / 12 + 1e-9


@pytest.mark.parametrize(("read", "augment"), [(0.040, 0.002), (0.060, 0.005), (0.025, 0.0)])
def test_dominant_reads_recommend_the_factor_that_frees_the_step_before_augmentation(
        read, augment):
    costs = Costs(step_s=0.010, read_s=read, augment_s=augment)
    prediction = predict(costs)
    free = read / (0.010 - augment)  # t_before / (t_down - t_after)
    assert prediction.variant == "before_augmentation"
    assert min(free, 8) - 0.25 < prediction.factor <= min(free, 8)  # capped at 8 uses
    # At that factor the step is (nearly) free: the speedup is the loader's time over it.
    assert prediction.speedup == pytest.approx(
        (read + augment) / max(0.010, read / prediction.factor + augment))


def test_the_model_counts_the_augmentation_of_every_copy_before_augmentation_only():
    costs = Costs(step_s=0.010, read_s=0.040, augment_s=0.005)
    assert costs.batch_s("before_augmentation", 4) == pytest.approx(0.015)  # 40/4 + 5
    assert costs.batch_s("after_augmentation", 4) == pytest.approx(0.01125)  # 45/4
    assert costs.speedup("before_augmentation", 4, steps_ratio=0.8) == pytest.approx(2.4)


def test_a_loader_that_keeps_up_gets_no_echo_and_bad_costs_are_refused_by_name():
    assert predict(Costs(step_s=0.010, read_s=0.006, augment_s=0.003)).variant is None
    assert predict(Costs(step_s=0.010, read_s=0.050, augment_s=0.0), max_factor=1).variant is None
    with pytest.raises(ValueError, match=r"Costs.read_s must be a finite number of seconds >= 0, "
                                         r"got -1"):
        Costs(step_s=0.01, read_s=-1, augment_s=0)
    with pytest.raises(ValueError, match=r"Costs.step_s must be > 0"):
        Costs(step_s=0, read_s=1, augment_s=0)
