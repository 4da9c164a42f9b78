import random

import numpy as np
import pytest

from dataecho import _rng
from dataecho._rng import Stream


def reference(seed: int, tag: int, position: int) -> np.random.Generator:
    bits = np.random.PCG64(np.random.SeedSequence([seed, tag]))
    bits.advance(position << 64)
    return np.random.Generator(bits)


def test_stream_tags_are_distinct():
    assert len(set(_rng.TAGS.values())) == len(_rng.TAGS)


def test_stream_tags_keep_the_values_stored_results_were_drawn_with():
    assert _rng.TAGS == {"SOURCE": 0x50, "ECHO": 0xEC, "MAP": 0x3A, "SHUFFLE": 0x5F,
                         "DERIVE": 0xDE, "ADAPTIVE_PICKS": 0xAD, "ADAPTIVE_PICK_BLOCKS": 0xAB,
                         "ADAPTIVE_COPIES": 0xA6,
                         "SHARD_ORDER": 0x5D, "DEVICE_ORDER": 0xD0}
    assert (_rng.ECHO_KEY, _rng.AUGMENT_KEY, _rng.SHUFFLE_KEY) == (1, 2, 3)
    assert (_rng.NODE_ECHO_KEY, _rng.NODE_SHUFFLE_KEY) == (1, 2)


def test_stream_positions_in_order_draw_like_a_jump_into_the_stream():
    stream = Stream(11, _rng.MAP)
    for position in range(2000):
        assert stream.at(position).random(2).tolist() == \
            reference(11, _rng.MAP, position).random(2).tolist()


@pytest.mark.parametrize("seed", [0, 5, 2**63 - 1])
def test_stream_positions_in_any_order_draw_like_a_jump_into_the_stream(seed):
    picker = random.Random(seed)
    positions = [picker.randrange(10**6) for _ in range(200)]
    positions += [2**32, 2**32 + 1, 2**64 - 1, 2**64, 2**64 + 1, 2**80, 0, 1, 1, 0]
    stream = Stream(seed, _rng.ADAPTIVE_PICKS)
    for position in positions:
        assert stream.at(position).integers(0, 2**63, size=3).tolist() == \
            reference(seed, _rng.ADAPTIVE_PICKS, position).integers(0, 2**63, size=3).tolist()


def test_stream_drops_the_half_draw_a_32_bit_draw_buffers():
    stream = Stream(2, _rng.MAP)
    stream.at(0).integers(0, 10, dtype=np.int32)  # keeps the other 32 bits for later
    assert stream.at(1).integers(0, 10, size=9, dtype=np.int32).tolist() == \
        reference(2, _rng.MAP, 1).integers(0, 10, size=9, dtype=np.int32).tolist()


def test_stream_golden_values():
    # Only update the values if you know what you're doing: stored results depend on them.
    assert Stream(0, _rng.MAP).at(0).random() == 0.5450638669572557
    stream = Stream(0, _rng.MAP)
    stream.at(0)
    assert stream.at(1).random() == 0.8739985192121702
    assert Stream(7, _rng.MAP).at(123456).random() == 0.33626914983648926
    assert Stream(3, _rng.ADAPTIVE_PICKS).at(10).integers(0, 2**32, size=3).tolist() == \
        [1120714498, 3371730910, 2019201995]


def test_a_copied_stream_draws_the_same_numbers_on_its_own_generator():
    import copy
    import pickle
    stream = Stream(4, _rng.MAP)
    stream.at(0)
    stream.at(1)
    for clone in (copy.deepcopy(stream), pickle.loads(pickle.dumps(stream))):
        assert clone.at(2).random() == reference(4, _rng.MAP, 2).random()
        assert clone.at(3).random() == reference(4, _rng.MAP, 3).random()
        assert stream.at(2).random() == reference(4, _rng.MAP, 2).random()
