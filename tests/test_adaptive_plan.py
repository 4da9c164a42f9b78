"""The adaptive decision, replayed deterministically: simulated clock, no threads."""

import collections
import itertools

import numpy as np
import pytest

from dataecho import _rng
from dataecho.adaptive import AdaptiveEcho, AdaptiveExamples, EchoBuffer, SimClock, SimulatedFeed
from dataecho.adaptive.schedule import Plan, plan
from helpers import sim

MAX = 4


def simulate(ratio, *, n=400, max_factor=MAX, depth=2, **kwargs):
    """One fresh item per ``ratio`` consumer steps; each step takes one time unit."""
    return sim.simulate(AdaptiveEcho, range(n), period=ratio, depth=depth,
                        max_factor=max_factor, **kwargs)


@pytest.mark.parametrize("ratio", [1, 1.5, 2, 4, 8])
def test_realised_factor_tracks_ratio_capped_at_max_factor_within_ten_percent(ratio):
    stage, _ = simulate(ratio)
    target = min(ratio, MAX)
    assert abs(stage.stats().realised_factor - target) / target < 0.10


@pytest.mark.parametrize("ratio", [1, 1.5, 2, 4, 8, 16])
def test_no_fresh_item_is_used_more_than_max_factor_times(ratio):
    _, out = simulate(ratio)
    counts = collections.Counter(out)
    assert max(counts.values()) <= MAX
    assert sorted(counts) == list(range(400))  # every fresh item emitted


@pytest.mark.parametrize("ratio", [0.25, 0.5, 1])
def test_no_echo_at_all_when_upstream_keeps_up(ratio):
    stage, out = simulate(ratio)
    assert out == list(range(400))
    assert stage.stats().realised_factor == 1.0


def test_stall_fraction_is_zero_below_the_cap_and_the_uncovered_share_above_it():
    stage, _ = simulate(2)
    assert stage.timing().stall_fraction < 0.01  # only the wait for the very first item
    stage, _ = simulate(8)  # 4 steps of 1 per item of 8: waits half the time
    assert stage.timing().stall_fraction == pytest.approx(0.5, abs=0.01)


def test_warm_up_takes_min_fresh_items_before_any_echo():
    _, out = simulate(8, min_fresh=3, buffer_size=1)  # echoes the latest
    assert out[:4] == [0, 1, 2, 2]


def test_factor_follows_a_drifting_upstream():
    clock = SimClock()
    period = lambda k: 2.0 if k < 200 else 4.0  # noqa: E731
    stage = AdaptiveEcho(range(400), max_factor=8, clock=clock,
                         feed=lambda p: SimulatedFeed(p, period=period, clock=clock))
    out = []
    for item in stage:
        out.append(item)
        clock.advance(1.0)
    counts = collections.Counter(out)
    first = sum(counts[i] for i in range(20, 180)) / 160
    second = sum(counts[i] for i in range(220, 380)) / 160
    assert first == pytest.approx(2.0, rel=0.1) and second == pytest.approx(4.0, rel=0.1)


@pytest.mark.parametrize("ratio", [1, 1.5, 2, 4, 8])
def test_example_level_factor_tracks_ratio_and_never_repeats_an_example_in_a_batch(ratio):
    clock, batch = SimClock(), 8
    stage = AdaptiveExamples(
        range(800), batch, max_factor=MAX, collate=list, clock=clock,
        feed=lambda p: SimulatedFeed(p, period=ratio / batch, clock=clock, depth=2 * batch))
    counts = collections.Counter()
    for b in stage:
        assert len(set(b)) == len(b)
        counts.update(b)
        clock.advance(1.0)
    target = min(ratio, MAX)
    assert abs(stage.stats().realised_factor - target) / target < 0.10
    assert max(counts.values()) <= MAX and len(counts) == 800


@pytest.mark.parametrize(("burst", "buffer_size", "lowest"), [
    (4, None, 3.9),  # a DataLoader's workers finishing together: the default buffer copes
    (10, 16, 3.9),  # a windowed shuffle's window of 10 batches at once needs a larger one
])
def test_bursty_upstream_spends_the_budget_with_a_buffer_larger_than_a_burst(
        burst, buffer_size, lowest):
    def period(k):  # R = 6 on average, ``burst`` items at a time
        return 6.0 * burst if k % burst == 0 else 0.0

    extra = {} if buffer_size is None else {"buffer_size": buffer_size}
    stage, _ = simulate(period, n=600, depth=12, **extra)
    assert stage.stats().realised_factor > lowest
    latest_only, _ = simulate(period, n=600, depth=12, buffer_size=1)
    assert latest_only.stats().realised_factor < 2  # the paper's "repeat the latest"


def test_plan_prefers_fresh_then_echoes_then_waits():
    assert plan(1, ready=1, capacity=1, ended=False) == Plan(1)
    assert plan(1, ready=0, capacity=1, ended=False) == Plan(0, echoes=1)
    assert plan(1, ready=0, capacity=0, ended=False) == Plan(0, block=True)
    assert plan(4, ready=2, capacity=1, ended=False) == Plan(2, block=True)


def test_plan_stops_with_what_it_has_once_a_rank_can_supply_nothing_more():
    assert plan(4, ready=0, capacity=9, ended=True) == Plan(0, stop=True)
    assert plan(1, ready=0, capacity=1, ended=True) == Plan(0, stop=True)


def test_echo_buffer_spends_each_budget_once_and_evicts_the_oldest():
    buf = EchoBuffer(size=3, max_uses=3)
    for i in range(4):
        buf.add(f"x{i}", i)
    assert buf.capacity == 3  # x0 evicted
    draws = [d for _ in range(6) for d in buf.draw(1)]
    assert collections.Counter(item for item, _, _ in draws) == {"x1": 2, "x2": 2, "x3": 2}
    assert buf.capacity == 0


def test_picks_are_a_function_of_seed_and_position_drawn_in_blocks():
    picks = _rng.Picks(7, _rng.ADAPTIVE_PICKS, _rng.ADAPTIVE_PICK_BLOCKS)
    blocks = _rng.Stream(7, _rng.ADAPTIVE_PICK_BLOCKS)
    # Forward by small and large gaps, then backwards (a restore), across blocks.
    positions = [0, 1, 2, 5, 1023, 1024, 5_000, 2**40, 3, 4, 2]
    for k in positions:
        u = int(blocks.at(k // 1024).integers(0, 2**32, size=1024, dtype=np.uint64)[k % 1024])
        for n in (1, 2, 3, 4, 16, 2**31 + 1, 2**32 - 1):
            assert picks.below(k, n) == (u * n) >> 32, (k, n)
    # n >= 2**32 leaves the blocks: one draw of the (seed, tag) stream at that position.
    stream = _rng.Stream(7, _rng.ADAPTIVE_PICKS)
    assert picks.below(9, 2**32) == int(stream.at(9).integers(2**32))
    other = _rng.Picks(8, _rng.ADAPTIVE_PICKS, _rng.ADAPTIVE_PICK_BLOCKS)
    assert [picks.below(k, 4) for k in range(64)] != [other.below(k, 4) for k in range(64)]


def test_picks_are_uniform_over_the_buffer():
    picks = _rng.Picks(0, _rng.ADAPTIVE_PICKS, _rng.ADAPTIVE_PICK_BLOCKS)
    for n in (2, 3, 4):
        counts = collections.Counter(picks.below(k, n) for k in range(30_000))
        assert set(counts) == set(range(n))
        expected = 30_000 / n  # binomial sd ~ sqrt(30000 p q) < 90: 5 sd is under 4.5%
        assert all(abs(c - expected) < 0.045 * expected + 5 for c in counts.values()), counts


def test_simulated_feed_bounds_the_producer_by_the_queue_depth():
    clock, reads = SimClock(), []

    def produce():
        reads.append(clock())
        return len(reads)

    feed = SimulatedFeed(produce, period=1.0, clock=clock, depth=2)
    clock.advance(10.0)
    assert feed.ready() == 2 and len(reads) <= 3  # two queued, at most one in production


def test_simulated_feed_wait_moves_the_clock_to_the_next_item_and_takes_nothing():
    clock = SimClock()
    feed = SimulatedFeed(iter("ab").__next__, period=2.0, clock=clock)
    feed.wait()
    assert clock() == 2.0 and feed.ready() == 1 and feed.get() == "a"
    assert clock() == 2.0  # get took the ready item without waiting
    feed.get()
    feed.wait()  # the end: returns, finished
    assert feed.finished() and feed.ready() == 0


def test_last_example_batch_is_topped_up_with_echoes_even_when_its_fresh_one_was_awaited():
    # The last example arrives during a wait (R = 4, cap 2): it is taken after a vote,
    # with echoes for the rest, as when it had been ready (it used to end the pass on
    # a partial batch of one).
    clock = SimClock()
    stage = AdaptiveExamples(
        range(200), 3, max_factor=2, collate=list, clock=clock,
        feed=lambda p: SimulatedFeed(p, period=4 / 3, clock=clock, depth=3))
    batches = []
    for b in stage:
        batches.append(b)
        clock.advance(1.0)
    assert batches[-1][0] == 199 and len(batches[-1]) == 3
    assert all(len(b) == 3 for b in batches)


@pytest.mark.parametrize("ratio", [2, 8])
def test_min_gap_spreads_the_copies_of_an_item_and_keeps_the_factor(ratio):
    spread, out = simulate(ratio, n=600, buffer_size=64, min_gap=32)
    packed, _ = simulate(ratio, n=600, buffer_size=64)
    last: dict[int, int] = {}
    gaps = []
    for step, item in enumerate(out):
        if item in last:
            gaps.append(step - last[item])
        last[item] = step
    assert gaps and min(gaps) >= 32  # never two uses of one item closer than min_gap
    s, p = spread.stats(), packed.stats()
    assert s.fresh_items == p.fresh_items == 600
    # The budget bounds the factor when the upstream is slow (ratio 8 > max_factor 4);
    # with a fast one the buffer holds enough spaced items: the same factor either way.
    assert abs(s.realised_factor - p.realised_factor) / p.realised_factor < 0.10
    assert max(collections.Counter(out).values()) <= MAX
    if ratio == 8:  # the numbers docs/guides/adaptive.md quotes
        assert round(s.realised_factor, 2) == 3.92 and round(p.realised_factor, 2) == 4.00


def test_without_min_gap_a_starved_buffer_echoes_the_newest_item_back_to_back():
    _, out = simulate(8, n=600, buffer_size=64)
    _, spread = simulate(8, n=600, buffer_size=64, min_gap=32)
    repeats = [sum(a == b for a, b in itertools.pairwise(o)) / (len(o) - 1)
               for o in (out, spread)]
    # Three quarters of the steps repeat the step before's item: what min_gap prevents.
    assert round(repeats[0], 2) == 0.75 and repeats[1] == 0


def test_echo_buffer_with_a_gap_cools_each_used_item_for_gap_steps():
    buf = EchoBuffer(size=8, max_uses=3, gap=2)
    for i in range(4):
        buf.add(f"x{i}", i, now=0)
    assert buf.capacity == 0  # the fresh use counts: drawable from step 2 on
    buf.release(1)
    assert buf.capacity == 0
    buf.release(2)
    assert buf.capacity == 4
    drawn = buf.draw(2, np.random.default_rng(0), now=2)
    assert buf.capacity == 2 and len(buf.cooling) == 2
    assert {use for _, _, use in drawn} == {1}
    buf.release(4)
    assert buf.capacity == 4
    _, _, use = buf.take(0, now=4)
    assert use == 1 and buf.capacity == 3
    for k in range(5, 12):  # the rest of the budget: each item leaves after 3 uses
        buf.release(k)
        while buf.capacity:
            buf.take(0, now=k)
    buf.release(20)
    assert buf.capacity == 0 and not buf.cooling


def _buffer_state(buf):
    return ([(e.item, e.index, e.uses) for e in buf.entries],
            [(when, e.item, e.uses) for when, e in buf.cooling])


@pytest.mark.parametrize("gap", [0, 1, 3])
@pytest.mark.parametrize("seed", range(8))
def test_echo_buffer_rollback_restores_the_state_after_the_kept_changes(gap, seed):
    rng = np.random.default_rng(seed)
    buf = EchoBuffer(size=5, max_uses=4, gap=gap)
    for i in range(5):
        buf.add(f"x{i}", i, now=0)
    buf.record()
    states, marks = [_buffer_state(buf)], [0]
    for step in range(1, 13):  # what the lane's plan does: release, then take one, per step
        buf.release(step)
        if buf.capacity:
            buf.take(int(rng.integers(buf.capacity)), now=step)
        states.append(_buffer_state(buf))
        marks.append(len(buf.log))
    keep = int(rng.integers(len(marks)))
    buf.rollback(marks[keep])
    assert _buffer_state(buf) == states[keep] and buf.log is None
    with pytest.raises(RuntimeError, match=r"call record\(\) first"):
        buf.rollback(0)
