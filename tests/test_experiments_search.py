"""Quasi-random search points."""

import numpy as np
import pytest

from dataecho.experiments.search import HParams, halton, radical_inverse, search_points


def test_halton_points_fill_the_unit_square_evenly():
    points = halton(64)
    assert points.shape == (64, 2) and ((points > 0) & (points < 1)).all()
    # Every quarter of each axis holds a quarter of the first 64 points (base 2).
    counts = np.histogram(points[:, 0], bins=4, range=(0, 1))[0]
    assert counts.tolist() == [16, 16, 16, 16]


def test_radical_inverse_of_base_3():
    assert [radical_inverse(i, 3) for i in (1, 2, 3)] == pytest.approx([1 / 3, 2 / 3, 1 / 9])


def test_search_points_are_in_range_deterministic_and_differ_between_seeds():
    a = search_points(8, 0, (0.01, 0.5), (0.03, 0.3))
    assert a == search_points(8, 0, (0.01, 0.5), (0.03, 0.3))
    assert a != search_points(8, 1, (0.01, 0.5), (0.03, 0.3))
    assert all(0.01 <= p.lr <= 0.5 and 0.03 <= p.one_minus_momentum <= 0.3 for p in a)
    assert len({p.lr for p in a}) == 8


def test_momentum_is_one_minus_the_searched_value():
    assert HParams(0.1, 0.05).momentum == 0.95
