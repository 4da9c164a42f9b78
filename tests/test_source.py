import collections
import json

import pytest

from dataecho import Source
from helpers.checkpoint import FlakyMap, assert_restores_everywhere


def test_each_epoch_reads_every_example_once_in_a_new_order():
    out = list(Source(range(100), seed=0, num_epochs=3))
    epochs = [out[i * 100:(i + 1) * 100] for i in range(3)]
    assert all(sorted(e) == list(range(100)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]


def test_order_is_a_function_of_seed_and_epoch():
    later = Source(range(50), seed=4, epoch=1)
    assert list(later) == list(Source(range(50), seed=4, num_epochs=2))[50:]


def test_without_shuffle_reads_in_index_order():
    assert list(Source("abc", shuffle=False)) == ["a", "b", "c"]


@pytest.mark.parametrize("num_shards", [2, 3, 4])
def test_shards_are_disjoint_and_cover_every_example_each_epoch(num_shards):
    reads = collections.Counter()
    for k in range(num_shards):
        reads.update(Source(range(101), seed=1, num_epochs=2, shard_index=k,
                            num_shards=num_shards))
    assert reads == {i: 2 for i in range(101)}


def test_drop_remainder_gives_equal_shards_and_drops_a_different_tail_each_epoch():
    shards = [list(Source(range(10), seed=3, num_epochs=2, shard_index=k, num_shards=3,
                          drop_remainder=True)) for k in range(3)]
    assert [len(s) for s in shards] == [6, 6, 6]
    first = {x for s in shards for x in s[:3]}
    second = {x for s in shards for x in s[3:]}
    assert len(first) == len(second) == 9 and first != second


def test_endless_stream_with_num_epochs_none():
    stage = Source(range(3), num_epochs=None)
    assert len([next(stage) for _ in range(100)]) == 100
    assert stage.epoch == 33


def test_restore_at_every_step_across_epoch_boundaries():
    assert_restores_everywhere(lambda: Source(range(7), seed=5, num_epochs=3, shard_index=1,
                                              num_shards=2))


def test_items_read_counts_reads():
    stage = Source(range(5), num_epochs=2)
    for _ in range(7):
        next(stage)
    assert stage.items_read == 7 and stage.stats().fresh_examples == 7


def _epochs_of_shards(num_epochs, **kw):
    """Per epoch, the examples each shard read: [epoch][shard] -> list."""
    shards = [list(Source(range(10), num_epochs=num_epochs, shard_index=k, num_shards=3,
                          drop_remainder=True, **kw)) for k in range(3)]
    return [[s[e * 3:(e + 1) * 3] for s in shards] for e in range(num_epochs)]


def test_drop_remainder_without_shuffle_drops_a_different_example_each_epoch():
    # 10 examples in 3 shards: 1 dropped per epoch, the last one first, then in turn.
    dropped = []
    for shards in _epochs_of_shards(10, shuffle=False):
        read = [x for s in shards for x in s]
        assert len(read) == len(set(read)) == 9  # disjoint, and all but the dropped one
        assert all(s == sorted(s) for s in shards)  # still in index order
        dropped.extend(set(range(10)) - set(read))
    assert dropped == [9, 0, 1, 2, 3, 4, 5, 6, 7, 8]


def test_drop_remainder_without_shuffle_restores_across_epochs():
    assert_restores_everywhere(lambda: Source(range(7), shuffle=False, num_epochs=3,
                                              shard_index=1, num_shards=3,
                                              drop_remainder=True))


def test_drop_remainder_with_shuffle_keeps_the_permutations_tail_dropped():
    # Bit for bit as before: shard k reads positions k, k + n, ... of the permutation
    # less its last len % n entries.
    from dataecho import _rng

    for epoch, shards in enumerate(_epochs_of_shards(3, seed=3)):
        order = _rng.rng(3, _rng.SOURCE, epoch).permutation(10)[:9]
        assert shards == [order[k::3].tolist() for k in range(3)]


def test_a_failed_read_is_retried_not_skipped():
    stage = Source(FlakyMap(range(4), fail_at=[1]), shuffle=False)
    out, state = [], None
    while True:
        try:
            out.append(next(stage))
        except OSError:
            state = json.loads(json.dumps(stage.state_dict()))
            assert stage.items_read == len(out)  # the failed read did not count
        except StopIteration:
            break
    assert out == [0, 1, 2, 3]
    restored = Source(FlakyMap(range(4), fail_at=[]), shuffle=False)
    restored.load_state_dict(state)
    assert list(restored) == [1, 2, 3]  # a checkpoint taken after the error keeps item 1


def test_a_mapping_is_refused_as_data_with_the_fix():
    with pytest.raises(TypeError, match=r"data must be .*got dict"):
        Source({"a": 1, "b": 2})
