import numpy as np
import pytest

from dataecho import Echo, Map, Source
from helpers.checkpoint import assert_restores_everywhere


def flip(x, rng):
    return x if rng.random() < 0.5 else x[::-1]


def noise(x, rng):
    return x + rng.normal(size=x.shape)


def test_copies_echoed_before_augmentation_get_different_augmentations():
    out = list(Map(Echo([np.zeros(8)], 3), noise, seed=0))
    assert not np.array_equal(out[0], out[1]) and not np.array_equal(out[1], out[2])


def test_copies_echoed_after_augmentation_are_equal():
    out = list(Echo(Map([np.zeros(8)], noise, seed=0), 3))
    assert all(np.array_equal(out[0], o) for o in out)


def test_augmentation_is_a_function_of_seed_and_position():
    a = list(Map([np.zeros(4)] * 3, noise, seed=1))
    b = list(Map([np.zeros(4)] * 3, noise, seed=1))
    c = list(Map([np.zeros(4)] * 3, noise, seed=2))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])


def test_one_argument_functions_get_no_generator():
    assert list(Map([1, 2], lambda x: x * 10)) == [10, 20]
    assert list(Map(["a"], str.upper)) == ["A"]


def test_random_flag_overrides_signature_detection():
    assert list(Map([1], lambda x, rng=None: rng is not None)) == [False]
    assert list(Map([1], lambda x, rng=None: rng is not None, random=True)) == [True]


def test_restore_at_every_step_reproduces_the_augmentations():
    assert_restores_everywhere(
        lambda: Map(Echo(Source([np.arange(3.0)] * 6, seed=1), 2), noise, seed=5))


def test_repr_names_the_function():
    assert repr(Map([1], flip, seed=3)) == "Map(<list>, fn=flip, seed=3, random=True)"


def test_a_position_beyond_the_generators_substreams_is_refused_naming_the_rule():
    stage = Map(Echo([1, 2], 2), noise, seed=5)
    state = {**stage.state_dict(), "position": 2**64}
    with pytest.raises(ValueError, match=r"state of Map has position=18446744073709551616, but "
                                         r"it must be below 2\*\*64 \(the per-item generators "
                                         r"are the 2\*\*64 substreams of one stream\)"):
        Map(Echo([1, 2], 2), noise, seed=5).load_state_dict(state)
