import math

import pytest

import dataecho
from dataecho import Batch, Echo, EchoStats, Source
from helpers.checkpoint import assert_restores_everywhere


def test_example_echoing_with_drop_last_counts_dropped_examples_as_fresh_not_emitted():
    stage = dataecho.pipeline(range(9), echo="before_augmentation", factor=2, batch_size=4,
                              drop_last=True, buffer_size=1)
    emitted = sum(len(b) for b in stage)
    s = stage.stats()
    assert (emitted, s.emitted_examples, s.fresh_examples) == (16, 16, 9)
    assert (s.emitted_items, s.fresh_items) == (16, 9)
    assert s.realised_factor == pytest.approx(16 / 9)
    assert s.batches == 4


def test_no_echo_with_drop_last_counts_dropped_examples_as_fresh_not_emitted():
    stage = dataecho.pipeline(range(9), echo=None, batch_size=4, drop_last=True)
    list(stage)
    s = stage.stats()
    assert (s.fresh_examples, s.emitted_examples, s.batches) == (9, 8, 2)
    assert s.realised_factor == pytest.approx(8 / 9)


def test_batch_echoing_with_drop_last_counts_only_examples_in_fresh_batches():
    stage = Echo(Batch(range(9), 4, drop_last=True), 2)
    list(stage)
    s = stage.stats()
    assert (s.fresh_examples, s.emitted_examples, s.batches) == (8, 16, 4)


def test_stats_with_drop_last_survive_a_restore_at_every_step():
    assert_restores_everywhere(
        lambda: Batch(Echo(Source(range(9), seed=1), 2), 4, drop_last=True))


def test_realised_factor_is_nan_before_anything_was_read():
    stats = Echo(range(3), 2).stats()
    assert stats == EchoStats(0, 0, 0, 0, None)
    assert math.isnan(stats.realised_factor)


def test_two_echo_stages_count_the_repeated_batch_again_once_it_is_re_read():
    def pipeline():
        return Echo(Batch(Echo(Source(range(40)), 2), 4, collate=list), 2)

    run = pipeline()
    first = next(run)
    state = run.state_dict()  # between the two copies of the first batch
    assert run.stats().fresh_examples == 2  # 4 examples: 2 fresh, each echoed once
    restored = pipeline()
    restored.load_state_dict(state)
    # Restoring reads no data: the batch still owed a copy is not counted yet ...
    assert restored.stats().fresh_examples == 0
    # ... and is counted again, once, when the next step re-reads it.
    assert next(restored) == first == next(run) and restored.stats() == run.stats()
    assert restored.stats().fresh_examples == 2
    assert list(restored) == list(run)
    assert restored.stats() == run.stats()


class _Pairs(dataecho.Stage):
    """A batcher written outside dataecho: counted through the Batching protocol alone."""

    def __init__(self, upstream):
        self.upstream = dataecho.as_stage(upstream)
        self.counts, self.last_size = (0, 0, 0), 0

    def __next__(self):
        batches, examples, dropped = self.counts
        first = next(self.upstream)
        try:
            pair = [first, next(self.upstream)]
        except StopIteration:
            self.counts = (batches, examples, dropped + 1)
            raise
        self.counts, self.last_size = (batches + 1, examples + 2, dropped), 2
        return pair

    def batch_counts(self):
        return self.counts

    def _config(self):
        return {}

    def _snapshot(self):
        return {"upstream": self.upstream.state_dict(), "counts": list(self.counts)}

    def _set_state(self, state):
        self.upstream.load_state_dict(state["upstream"])
        self.counts = tuple(state["counts"])


def test_a_batcher_of_ones_own_counts_through_the_batching_protocol():
    stage = _Pairs(Echo(Source(range(5)), 1))
    list(stage)
    assert isinstance(stage, dataecho.stats.Batching)
    s = stage.stats()  # the pair it dropped was read, never emitted
    assert (s.fresh_examples, s.emitted_examples, s.batches) == (5, 4, 2)
    echoed = Echo(_Pairs(Source(range(5))), 2)  # batch echoing: sized by last_size
    list(echoed)
    s = echoed.stats()
    assert (s.fresh_examples, s.emitted_examples, s.batches) == (4, 8, 4)


def test_without_an_echo_stage_the_source_counts_what_was_read():
    stage = Source(range(7))
    list(stage)
    assert isinstance(stage, dataecho.stats.Reading)
    assert stage.stats() == EchoStats.of_examples(7, 7)
