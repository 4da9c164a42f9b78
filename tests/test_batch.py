
import numpy as np
import pytest

from dataecho import Batch, Echo, Source, collate
from helpers.checkpoint import Flaky, assert_restores_everywhere, drain_retrying


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


@pytest.mark.parametrize("items, field, shapes", [
    ([[1, 2], [3, 4, 5]], "example", ("length 2", "length 3")),
    ([(1, 2, 3), (4, 5)], "example", ("length 3", "length 2")),
    ([{"a": 1}, {"a": 2, "b": 3}], "example", ("['a']", "['a', 'b']")),
    ([{"a": 1, "b": 2}, {"a": 3}], "example", ("['a', 'b']", "['a']")),
    ([(np.zeros(2), 0), (np.zeros(3), 1)], "example[0]", ("(2,)", "(3,)")),
    ([{"x": [1, 2]}, {"x": [1]}], "example['x']", ("length 2", "length 1")),
])
def test_collate_refuses_ragged_examples_naming_the_field_and_both_shapes(items, field, shapes):
    with pytest.raises(ValueError, match="ragged") as error:
        collate(items)
    message = str(error.value)
    assert f"{field} is ragged" in message and all(s in message for s in shapes)
    assert "collate=list" in message and "padding" in message


def test_a_ragged_batch_is_an_error_not_a_truncated_batch():
    with pytest.raises(ValueError, match=r"example 1 has a list of length 3"):
        next(Batch([[1, 2], [3, 4, 5]], 2))


def test_custom_collate_is_used():
    assert list(Batch(range(4), 2, collate=list)) == [[0, 1], [2, 3]]


def test_counts_batches_and_examples():
    stage = Batch(range(7), 3)
    list(stage)
    assert (stage.batches, stage.examples, stage.stats().batches) == (3, 7, 3)


def test_restore_at_every_step_across_epochs():
    assert_restores_everywhere(lambda: Batch(Source(range(10), seed=1, num_epochs=3), 4))


def test_upstream_error_mid_batch_keeps_the_examples_read_and_resumes_the_batch():
    stage = Batch(Flaky(10, fail_at=6), 4, collate=list)
    batches, _ = drain_retrying(stage)
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert (stage.batches, stage.examples) == (3, 10)


def test_checkpoint_after_an_upstream_error_rereads_the_interrupted_batch():
    _, state = drain_retrying(Batch(Flaky(10, fail_at=6), 4, collate=list))
    assert state["upstream"]["consumed"] == 4 and state["batches"] == 1
    restored = Batch(list(range(10)), 4, collate=list)
    restored.load_state_dict(state)
    assert list(restored) == [[4, 5, 6, 7], [8, 9]]
    assert (restored.batches, restored.examples) == (3, 10)


def test_batch_echoing_survives_an_upstream_error_and_its_checkpoint():
    stage = Echo(Batch(Flaky(10, fail_at=6), 4, collate=list), 2)
    batches, state = drain_retrying(stage)
    assert batches == [[0, 1, 2, 3]] * 2 + [[4, 5, 6, 7]] * 2 + [[8, 9]] * 2
    assert (stage.stats().fresh_examples, stage.stats().emitted_examples) == (10, 20)
    restored = Echo(Batch(list(range(10)), 4, collate=list), 2)
    restored.load_state_dict(state)
    assert list(restored) == batches[2:]
    assert restored.stats() == stage.stats()


def test_drop_last_counts_the_dropped_examples():
    stage = Batch(range(9), 4, drop_last=True)
    list(stage)
    assert (stage.batches, stage.examples, stage.dropped) == (2, 8, 1)
    next(stage, None)  # asking again after the end drops nothing more
    assert stage.dropped == 1 and stage.state_dict()["dropped"] == 1


@pytest.mark.parametrize("drop_last", [False, True])
def test_restore_at_every_step_with_a_partial_last_batch(drop_last):
    assert_restores_everywhere(
        lambda: Batch(Source(range(9), seed=1, num_epochs=2), 4, drop_last=drop_last))
    assert_restores_everywhere(
        lambda: Echo(Batch(Source(range(9), seed=1), 4, drop_last=drop_last), 1.5, seed=2))
