"""AdaptiveExamples: fresh examples plus re-augmented echoes, and the factor="auto" hook."""

import collections
import itertools
import json
import threading

import numpy as np
import pytest

from dataecho import Auto, Echo, Source, pipeline
from dataecho.adaptive import AdaptiveEcho, AdaptiveExamples, SimClock, SimulatedFeed
from helpers import sim
from helpers.threads import wait_until

pytestmark = pytest.mark.usefixtures("no_thread_leak")


def tag(example, rng):
    """An augmentation that shows which random stream each copy got."""
    return (example, int(rng.integers(1 << 30)))


def simulated(n, batch, ratio, **kwargs):
    """``ratio`` consumer steps per fresh batch, the feed two batches deep."""
    return sim.simulate(AdaptiveExamples, range(n), batch, period=ratio / batch,
                        depth=2 * batch, collate=list, **kwargs)


def test_ready_upstream_gives_all_fresh_batches_in_order():
    with AdaptiveExamples(range(100), 4, collate=list, prefetch=8, min_fresh=1) as stage:
        assert next(stage) == [0, 1, 2, 3]
        wait_until(lambda: stage.queued() == 8)
        assert [next(stage), next(stage)] == [[4, 5, 6, 7], [8, 9, 10, 11]]
    assert stage.stats().realised_factor == 1.0 and stage.stats().batches == 3


def test_late_examples_are_replaced_by_echoes_each_augmented_anew():
    gate = threading.Semaphore(4)  # only the first batch's examples can be read

    def upstream():
        for k in range(8):
            gate.acquire()
            yield k

    with AdaptiveExamples(upstream(), 4, augment=tag, collate=list, min_fresh=4) as stage:
        first, second = next(stage), next(stage)
        gate.release(4)
    assert [x for x, _ in first] == [0, 1, 2, 3]  # warm-up: min_fresh examples first
    assert sorted(x for x, _ in second) == [0, 1, 2, 3]  # nothing ready: all echoes
    assert not {r for _, r in first} & {r for _, r in second}  # new augmentation draws


def test_copies_of_an_example_land_in_different_batches_spread_apart():
    _, batches = simulated(800, 16, ratio=4)
    where = collections.defaultdict(list)
    for i, b in enumerate(batches):
        assert len(set(b)) == len(b)  # never two copies in one batch
        for x in b:
            where[x].append(i)
    gaps = [b - a for ids in where.values() for a, b in itertools.pairwise(ids)]
    assert np.mean(gaps) > 3  # not in consecutive batches: scattered over the buffer


@pytest.mark.parametrize("burst", [1, 500])
def test_bursty_upstream_still_spends_the_echo_budget(burst):
    # A shard of 500 examples arriving at once pushes examples through the buffer; the
    # default buffer (8 batches) keeps them until their budget is spent. A 4-batch
    # buffer realised 3.78 here (benchmarks/results/bursts.md).
    batch, ratio = 128, 6.0
    clock = SimClock()

    def period(k):  # the same mean rate as a smooth upstream, in bursts
        return ratio / batch * burst if k % burst == 0 else 0.0

    stage = AdaptiveExamples(
        range(batch * 300), batch, collate=len, clock=clock,
        feed=lambda p: SimulatedFeed(p, period=period, clock=clock, depth=2 * batch))
    for _ in stage:
        clock.advance(1.0)
    assert stage.stats().realised_factor > 3.9  # the cap is 4 (max_factor)


def test_decisions_and_augmentations_replay_exactly_for_the_same_seed():
    _, a = simulated(200, 8, ratio=3, augment=tag, seed=5)
    _, b = simulated(200, 8, ratio=3, augment=tag, seed=5)
    _, c = simulated(200, 8, ratio=3, augment=tag, seed=6)
    assert a == b and a != c


def test_echo_picks_and_augmentations_draw_from_independent_streams():
    # A subclass attribute once replaced the pick stream with the augmentation stream,
    # so the pick of step k reused the random numbers that augment example copy k.
    stage, _ = simulated(64, 8, ratio=3, augment=tag, seed=5)
    picks = [stage._picks.at(k).random() for k in range(32)]
    augment = [stage._stream.at(k).random() for k in range(32)]
    assert not set(picks) & set(augment)
    assert picks == [AdaptiveEcho([], seed=5)._picks.at(k).random() for k in range(32)]


def test_one_argument_augment_is_applied_without_a_generator():
    _, batches = simulated(16, 4, ratio=1, augment=lambda x: -x)
    assert batches[0] == [0, -1, -2, -3]


def test_last_partial_batch_is_kept_or_dropped():
    _, kept = simulated(10, 4, ratio=0.5)
    _, dropped = simulated(10, 4, ratio=0.5, drop_last=True)
    assert [len(b) for b in kept] == [4, 4, 2] and [len(b) for b in dropped] == [4, 4]


def test_restore_rereads_prefetched_examples_so_none_is_lost_or_repeated():
    data = Source(list(range(64)), shuffle=False)
    with AdaptiveExamples(data, 8, collate=list) as stage:
        first = [next(stage) for _ in range(3)]
        state = json.loads(json.dumps(stage.state_dict()))
    fresh_before = {x for b in first for x in b}
    with AdaptiveExamples(Source(list(range(64)), shuffle=False), 8, collate=list) as restored:
        restored.load_state_dict(state)
        rest = {x for b in restored for x in b}
    assert rest == set(range(max(fresh_before) + 1, 64))
    assert restored.stats().fresh_examples == 64


def test_counts_feed_the_core_statistics_and_a_later_batch_echo():
    with Echo(AdaptiveExamples(range(12), 4, max_factor=1), 2) as stage:
        batches = list(stage)
    s = stage.stats()
    assert len(batches) == 6 and s.batches == 6
    assert (s.fresh_examples, s.emitted_examples) == (12, 24)


def test_repr_shows_the_parameters():
    stage = AdaptiveExamples(range(4), 2, augment=tag)
    assert repr(stage) == ("AdaptiveExamples(<range>, batch_size=2, max_factor=4, min_fresh=8, "
                           "prefetch=4, buffer_size=16, seed=0, augment='tag')")


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"batch_size": 0}, ValueError, r"batch_size must be an int >= 1, got 0"),
    ({"batch_size": 2, "augment": 3}, TypeError, r"augment must be callable"),
    ({"batch_size": 2, "collate": "stack"}, TypeError, r"collate must be callable"),
    # buffer_size is checked as itself, not as the min_fresh derived from it.
    ({"batch_size": 2, "buffer_size": 0}, ValueError, r"buffer_size must be an int >= 1, got 0"),
    ({"batch_size": 2, "buffer_size": "8"}, TypeError, r"buffer_size must be an int >= 1"),
    ({"batch_size": 2, "prefetch": -1}, ValueError, r"prefetch must be an int >= 1, got -1"),
])
def test_arguments_are_checked_with_a_message_naming_the_fix(kwargs, error, message):
    with pytest.raises(error, match=message):
        AdaptiveExamples(range(3), **kwargs)


@pytest.mark.parametrize(("echo", "kind"), [("before_augmentation", AdaptiveExamples),
                                            ("after_augmentation", AdaptiveExamples),
                                            ("batch", AdaptiveEcho)])
def test_pipeline_with_auto_builds_each_variant(echo, kind):
    with pipeline(range(12), echo=echo, factor=Auto(), batch_size=4,
                  augment=lambda x: x + 100) as stage:
        assert isinstance(stage, kind)
        out = sorted({int(x) for b in stage for x in b})
    assert out == list(range(100, 112))


@pytest.mark.parametrize("echo", ["before_augmentation", "batch"])
def test_pipeline_takes_an_auto_value_and_its_agreement_reaches_the_stage(echo):
    def agree(ready, capacity, ended):
        return ready, capacity, ended

    auto = Auto(max_factor=3, buffer_size=5, agree=agree)
    stage = pipeline(range(8), echo=echo, factor=auto, batch_size=2)
    assert (stage.max_factor, stage.buffer_size, stage.agree) == (3, 5, agree)
    stage.close()


def test_pipeline_with_an_auto_agreement_builds_a_stage_that_votes_with_it():
    votes = []

    def agree(ready, capacity, ended):
        votes.append(ready)
        return ready, capacity, ended

    with pipeline(Source(range(8), shuffle=False), factor=Auto(agree=agree),
                  echo="before_augmentation", batch_size=4) as stage:
        assert stage.agree is agree
        assert sorted(int(x) for b in stage for x in b) == list(range(8))
    assert votes  # every step was agreed through it


def test_pipeline_with_auto_rejects_unknown_variants():
    with pytest.raises(ValueError, match=r"echo must be one of 'before_augmentation'.*got "
                                         r"'examples'"):
        pipeline(range(4), echo="examples", factor=Auto(), batch_size=2)


def test_a_failed_augmentation_counts_no_batch_and_a_checkpoint_loses_no_example():
    calls = []

    def augment(x):
        calls.append(x)
        if len(calls) == 6:
            raise RuntimeError("augmentation failed")
        return x

    def make():
        return AdaptiveExamples(Source(list(range(12)), shuffle=False), 4, augment=augment,
                                max_factor=1, collate=list)

    with make() as stage:
        assert next(stage) == [0, 1, 2, 3]
        with pytest.raises(RuntimeError, match="augmentation failed"):
            next(stage)
        stats = stage.stats()
        assert (stats.fresh_examples, stats.emitted_examples, stats.batches) == (4, 4, 1)
        state = json.loads(json.dumps(stage.state_dict()))
    with make() as restored:
        restored.load_state_dict(state)
        assert list(restored) == [[4, 5, 6, 7], [8, 9, 10, 11]]
        assert restored.stats().fresh_examples == 12


def test_auto_caps_copies_augmented_anew_at_8_and_identical_copies_at_4():
    def cap(echo, batch_size):
        stage = pipeline(range(8), echo=echo, batch_size=batch_size,
                         augment=lambda x, rng: x, factor=Auto())
        from dataecho.stats import chain
        return next(s.max_factor for s in chain(stage) if hasattr(s, "max_factor"))

    assert cap("before_augmentation", None) == cap("before_augmentation", 4) == 8
    assert cap("after_augmentation", None) == cap("after_augmentation", 4) == 4
    assert cap("batch", 4) == 4
    assert Auto(max_factor=5).cap(augmented=True) == Auto(max_factor=5).cap(augmented=False) == 5
    assert repr(Auto()) == "Auto()" and repr(Auto(max_factor=4)) == "Auto(max_factor=4)"
