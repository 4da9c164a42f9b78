"""Target-crossing detection on hand-made curves."""

import math

import pytest

from dataecho.experiments.crossing import find_crossing


def test_first_evaluation_at_or_above_target_and_interpolation_between_its_neighbours():
    c = find_crossing([0, 100, 200, 300], [0.1, 0.5, 0.7, 0.95], 0.8, higher_is_better=True)
    assert (c.index, c.first) == (3, 300)
    assert c.interpolated == pytest.approx(200 + (0.8 - 0.7) / (0.95 - 0.7) * 100)


def test_value_exactly_at_target_counts_and_interpolates_to_that_evaluation():
    c = find_crossing([0, 100, 200], [0.5, 0.7, 0.8], 0.8, higher_is_better=True)
    assert (c.index, c.first, c.interpolated) == (2, 200, 200)


def test_loss_targets_are_reached_from_above():
    c = find_crossing([0, 10, 20], [4.0, 2.5, 1.5], 2.0, higher_is_better=False)
    assert (c.index, c.first) == (2, 20)
    assert c.interpolated == pytest.approx(15.0)


def test_no_evaluation_reaching_the_target_gives_none():
    assert find_crossing([0, 1], [0.1, 0.2], 0.9, higher_is_better=True) is None
    assert find_crossing([], [], 0.9, higher_is_better=True) is None


def test_curve_starting_at_target_crosses_at_its_first_point():
    c = find_crossing([5, 10], [0.95, 0.96], 0.9, higher_is_better=True)
    assert (c.index, c.first, c.interpolated) == (0, 5, 5)


def test_nan_never_counts_as_reaching_and_is_not_interpolated_from():
    c = find_crossing([0, 10, 20], [0.1, math.nan, 0.95], 0.9, higher_is_better=True)
    assert (c.index, c.first, c.interpolated) == (2, 20, 20)
    assert find_crossing([0, 10], [math.nan, math.nan], 1.0, higher_is_better=False) is None


def test_a_dip_after_the_crossing_does_not_move_it():
    c = find_crossing([0, 1, 2, 3], [0.5, 0.91, 0.85, 0.95], 0.9, higher_is_better=True)
    assert c.index == 1


@pytest.mark.parametrize("higher", [True, False])
def test_interpolated_crossing_lies_between_the_previous_and_the_first_evaluation(higher):
    values = [0.1, 0.3, 0.45, 0.62, 0.8, 0.9]
    if not higher:
        values = [1 - v for v in values]
    target = 0.5
    fresh = [0, 7, 19, 30, 44, 60]
    c = find_crossing(fresh, values, target, higher_is_better=higher)
    assert fresh[c.index - 1] <= c.interpolated <= c.first == fresh[c.index]


def test_mismatched_lengths_are_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match="same length"):
        find_crossing([0, 1], [0.5], 0.9, higher_is_better=True)
