import collections

import pytest

from checkpoint import assert_restores_everywhere
from dataecho import Source


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
