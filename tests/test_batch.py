import numpy as np

from checkpoint import assert_restores_everywhere
from dataecho import Batch, Source, collate


def test_batches_are_collated_field_by_field():
    data = [(np.full(2, i), i) for i in range(5)]
    x, y = next(Batch(data, 3))
    assert x.shape == (3, 2) and y.tolist() == [0, 1, 2]


def test_partial_last_batch_is_kept_or_dropped():
    assert [len(b) for b in Batch(range(7), 3)] == [3, 3, 1]
    assert [len(b) for b in Batch(range(7), 3, drop_last=True)] == [3, 3]


def test_collate_handles_dicts_lists_and_other_objects():
    assert collate([{"a": 1}, {"a": 2}])["a"].tolist() == [1, 2]
    assert [f.tolist() for f in collate([[1, 2], [3, 4]])] == [[1, 3], [2, 4]]
    assert collate(["x", "y"]) == ["x", "y"]


def test_custom_collate_is_used():
    assert list(Batch(range(4), 2, collate=list)) == [[0, 1], [2, 3]]


def test_counts_batches_and_examples():
    stage = Batch(range(7), 3)
    list(stage)
    assert (stage.batches, stage.examples, stage.stats().batches) == (3, 7, 3)


def test_restore_at_every_step_across_epochs():
    assert_restores_everywhere(lambda: Batch(Source(range(10), seed=1, num_epochs=3), 4))
