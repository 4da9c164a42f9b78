"""AdaptiveEcho with its real thread: decisions, accounting, checkpoint and shutdown."""

import _thread
import functools
import gc
import json
import signal
import threading
import time
import traceback

import numpy as np
import pytest

from dataecho import AdaptiveExamples, Batch, Echo, Shuffle
from dataecho.adaptive import AdaptiveEcho, Prefetcher, SimClock, SimulatedFeed
from dataecho.sizes import batch_len
from helpers.threads import prefetch_threads, wait_until

pytestmark = pytest.mark.usefixtures("no_thread_leak")


class Gated:
    """An upstream that yields item k only after ``open(k)``; records what was read."""

    def __init__(self, n):
        self.n, self.gate, self.read = n, threading.Semaphore(0), []

    def __iter__(self):
        for k in range(self.n):
            self.gate.acquire()
            self.read.append(k)
            yield k

    def open(self, k=1):
        for _ in range(k):
            self.gate.release()


def test_ready_fresh_item_wins_and_a_late_one_is_replaced_by_an_echo():
    up = Gated(3)
    with AdaptiveEcho(up, max_factor=4) as stage:
        up.open()
        assert next(stage) == 0  # warm-up: waits for the first fresh item
        assert next(stage) == 0  # item 1 not read yet: echo instead of waiting
        up.open()
        wait_until(lambda: stage.queued() == 1)
        assert next(stage) == 1
        up.open()
        wait_until(lambda: stage.queued() == 1)
        assert next(stage) == 2
        rest = list(stage)  # echoes of 2 only while the thread has not yet seen the end
        assert set(rest) <= {2}
        s = stage.stats()
        assert (s.fresh_items, s.emitted_items) == (3, 4 + len(rest))


def test_no_item_is_used_more_than_max_factor_times_then_the_consumer_waits():
    up = Gated(2)
    stage = AdaptiveEcho(up, max_factor=3, timeout=0.2)
    up.open()
    assert [next(stage) for _ in range(3)] == [0, 0, 0]
    with pytest.raises(TimeoutError, match=r"timeout=0\.2"):
        next(stage)  # budget spent, item 1 never comes
    up.open()  # lets the hung read finish so the thread can exit
    stage.close()


class Laneless(AdaptiveEcho):
    """AdaptiveEcho with every step decided by _step: the reference for the lane."""

    one_item_steps = False


@pytest.mark.parametrize("buffer_size", [1, 4])
def test_the_echo_lane_decides_as_the_general_path_does(buffer_size):
    def run(cls):
        up = Gated(5)
        stage = cls(up, max_factor=3, buffer_size=buffer_size, prefetch=4, seed=7)
        up.open(4)
        out = [next(stage)]
        wait_until(lambda: stage.queued() == 3)
        out += [next(stage) for _ in range(3)]  # fresh: 1, 2, 3
        lane = stage._lane is not None
        budget = 2 * min(buffer_size, 4)  # two echoes left for each buffered item
        out += [next(stage) for _ in range(budget)]  # nothing ready: echoes only
        counts, steps = stage.stats(), stage.state_dict()["steps"]
        up.open()  # item 4, then the end
        out += list(stage)
        stage.close()
        return out, counts, steps, lane

    lane, reference = run(AdaptiveEcho), run(Laneless)
    assert lane[3] and not reference[3]  # the lane was open only where it should be
    assert lane[:3] == reference[:3]  # the same picks, uses and counts, step by step
    out, counts, _, _ = lane
    assert out[:4] == [0, 1, 2, 3]
    assert all(out.count(k) <= 3 for k in range(5))  # never more than max_factor uses
    assert (counts.fresh_items, counts.emitted_items) == (4, 4 + 2 * min(buffer_size, 4))
    assert sorted(out[4:4 + 2 * buffer_size]) == sorted(2 * list(range(4 - buffer_size, 4)))


@pytest.mark.parametrize("min_gap", [0, 2])
def test_the_lane_matches_the_general_path_when_items_arrive_inside_a_plan(min_gap):
    # Fresh items arrive after 0-4 echo steps, so plans of every length are cut short
    # and undone at every point; a checkpoint and the counts are read at every step.
    schedule = [0, 3, 1, 4, 0, 2, 4, 1, 3, 0, 2, 4, 4, 1]  # echo steps before item k + 1

    def run(cls):
        up = Gated(len(schedule) + 1)
        # A step that found no budget would wait: the timeout fails the test quickly.
        stage = cls(up, max_factor=4, buffer_size=4, prefetch=1, min_gap=min_gap, seed=3,
                    timeout=2)
        seen, lanes = [], 0

        def step():
            state = stage.state_dict()
            del state["stage"]  # the class name differs
            seen.append((next(stage), state, stage.stats()))

        up.open()
        for echoes in schedule:
            step()  # fresh
            for _ in range(echoes):
                lanes += stage._lane is not None
                step()
            up.open()
            wait_until(lambda: stage.queued() == 1)
        seen += [(x, None, None) for x in stage]
        stage.close()
        return seen, lanes

    (lane, opened), (reference, _) = run(AdaptiveEcho), run(Laneless)
    assert opened > 20  # the lane emitted most echoes
    assert lane == reference


def test_the_lane_stops_echoing_once_the_upstream_is_over():
    end = threading.Event()

    def items():
        yield 0
        end.wait()  # the producer waits here while the lane echoes item 0

    stage = AdaptiveEcho(items(), max_factor=8, prefetch=1)
    assert [next(stage) for _ in range(4)] == [0, 0, 0, 0]  # fresh, then planned echoes
    assert stage._lane  # a plan with echoes left (1, then 2 steps ahead)
    end.set()
    wait_until(lambda: stage._feed.finished())
    assert list(stage) == []  # leftover budget is dropped: nothing is waited for any more
    assert stage.stats().emitted_items == 4
    stage.close()


def test_first_copy_is_true_for_each_fresh_item_and_false_for_its_echoes_on_the_lane():
    up = Gated(4)
    with AdaptiveEcho(up, max_factor=3, buffer_size=1, prefetch=1) as stage:
        assert stage.first_copy is False  # before the first item
        marks, lanes = [], 0
        for k in range(3):
            up.open()
            if k:  # (the first next() starts the thread and waits for item 0)
                wait_until(lambda: stage.queued() == 1)
            marks.append((next(stage), stage.first_copy))  # fresh
            for _ in range(2):  # nothing ready: echoes, planned on the lane
                lanes += stage._lane is not None
                marks.append((next(stage), stage.first_copy))
        assert marks == [(k, use == 0) for k in range(3) for use in range(3)]
        assert lanes == 6
        up.open()  # item 3: lets the thread finish


class Slow:
    """A re-iterable upstream that takes ``seconds`` per item, so the consumer outruns it."""

    def __init__(self, n, seconds):
        self.n, self.seconds = n, seconds

    def __iter__(self):
        for k in range(self.n):
            time.sleep(self.seconds)
            yield k


def first_copies(build, restore_at, tick):
    """Drains ``build()``, moved by a checkpoint into a new ``build()`` after ``restore_at``
    items (None: never); ``tick(stage)`` after each item. Returns the items marked first
    copies and the stats of the stage that finished the pass."""
    stage, firsts, seen, numbers = build(), 0, 0, set()
    assert stage.first_copy is False  # before the first item
    for _ in iter(int, 1):
        try:
            next(stage)
        except StopIteration:
            break
        number, first = stage.copies_of()()  # the protocol first_copy reads
        assert first == stage.first_copy and (number in numbers) != first  # an echo: of one
        numbers.add(number)  # whose first copy went out before (here or before a restore)
        firsts, seen = firsts + stage.first_copy, seen + 1
        tick(stage)
        if seen == restore_at:
            state = json.loads(json.dumps(stage.state_dict()))
            stage.close()
            stage = build()
            stage.load_state_dict(state)
            assert stage.first_copy is False  # the item emitted last went out before it
    stage.close()
    assert numbers == set(range(1, stage.stats().fresh_items + 1))
    return firsts, stage.stats()


@pytest.mark.parametrize("restore_at", [None, 1, 7, 30])
def test_first_copies_over_a_pass_are_its_fresh_examples_across_a_restore(restore_at):
    clock = SimClock()

    def build():
        return AdaptiveEcho(range(20), max_factor=3, clock=clock, feed=lambda produce:
                            SimulatedFeed(produce, period=2.5, clock=clock))

    firsts, stats = first_copies(build, restore_at, lambda _: clock.advance(1.0))
    assert stats.emitted_items > stats.fresh_items  # echoes, each not a first copy
    assert firsts == stats.fresh_examples == 20


def test_a_shuffle_after_the_stage_hands_on_each_first_copy_once():
    clock = SimClock()
    stage = AdaptiveEcho(range(20), max_factor=3, clock=clock, feed=lambda produce:
                         SimulatedFeed(produce, period=2.5, clock=clock))
    shuffled = Shuffle(stage, 8, seed=1)
    copy_of, marks = shuffled.copies_of(), []
    for _ in shuffled:
        marks.append(copy_of())
        clock.advance(1.0)
    assert len(marks) == stage.stats().emitted_items > 20  # echoes among them
    assert sorted(number for number, first in marks if first) == list(range(1, 21))
    assert AdaptiveExamples(range(4), 2).copies_of() is None  # batches: not per example


@pytest.mark.parametrize("restore_at", [None, 11, 40])
def test_first_copies_with_a_slow_upstream_on_the_lane_are_its_fresh_examples(restore_at):
    lanes = []
    firsts, stats = first_copies(lambda: AdaptiveEcho(Slow(24, 0.004), max_factor=4),
                                 restore_at, lambda stage: lanes.append(stage._lane))
    assert any(lane is not None for lane in lanes)  # the lane emitted echoes
    assert stats.emitted_items > stats.fresh_items
    assert firsts == stats.fresh_examples == 24


def test_min_fresh_items_come_first_even_when_the_upstream_is_slow():
    up = Gated(5)
    with AdaptiveEcho(up, min_fresh=3, buffer_size=1) as stage:  # echoes the latest
        up.open(3)
        assert [next(stage) for _ in range(4)] == [0, 1, 2, 2]
        up.open(2)


def test_upstream_that_keeps_ahead_of_the_consumer_is_never_echoed():
    with AdaptiveEcho(range(100), prefetch=4) as stage:
        out = []
        for _ in range(30):
            out.append(next(stage))
            wait_until(lambda: stage.queued() > 0)  # the consumer is the slower side
        assert out == list(range(30))
        assert stage.stats().realised_factor == 1.0


def test_stats_count_examples_in_batches_and_timing_reports_stall():
    with AdaptiveEcho([np.zeros((5, 2)), np.zeros((3, 2))], max_factor=1) as stage:
        list(stage)
    s = stage.stats()
    assert (s.fresh_examples, s.emitted_examples, s.fresh_items) == (8, 8, 2)
    t = stage.timing()
    assert t.steps == 2 and 0.0 <= t.stall_fraction <= 1.0 and t.wall_s > 0


def test_batch_stage_upstream_reports_its_own_batch_sizes():
    with AdaptiveEcho(Batch(range(10), batch_size=4), max_factor=1) as stage:
        list(stage)
    assert stage.stats().fresh_examples == 10 and stage.stats().batches == 3


def test_batch_len_reads_leading_dimension_of_first_field():
    assert batch_len({"x": np.zeros((6, 3)), "y": np.zeros(6)}) == 6
    assert batch_len((["a", "b", "c"], np.zeros(3))) == 3
    assert batch_len(np.float32(1.0)) == 1


def test_restore_rereads_prefetched_items_so_no_fresh_item_is_lost_or_repeated():
    data = list(range(40))
    with AdaptiveEcho(data, prefetch=8) as stage:
        first = [next(stage) for _ in range(10)]
        wait_until(lambda: stage.queued() == 8)  # prefetched beyond what was emitted
        state = json.loads(json.dumps(stage.state_dict()))
    with AdaptiveEcho(data, prefetch=8) as restored:
        restored.load_state_dict(state)
        rest = list(restored)
    fresh_before = sorted(set(first))
    assert sorted(set(rest)) == list(range(fresh_before[-1] + 1, 40))
    assert restored.stats().fresh_items == 40


def test_restore_into_other_parameters_fails_loudly():
    with AdaptiveEcho(range(5), max_factor=2) as stage:
        state = stage.state_dict()
    with pytest.raises(ValueError, match=r"max_factor \(saved 2, here 4\)"):
        AdaptiveEcho(range(5)).load_state_dict(state)


def test_composes_with_core_stages_and_repr_shows_parameters():
    stage = Echo(AdaptiveEcho(Batch(range(8), 4), max_factor=1), 2)
    assert repr(stage) == ("Echo(AdaptiveEcho(Batch(<range>, batch_size=4, drop_last=False), "
                           "max_factor=1, min_fresh=1, prefetch=2, buffer_size=4, seed=0), "
                           "factor=2.0, seed=0)")
    assert len(list(stage)) == 4 and stage.stats().fresh_examples == 8
    stage.close()


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"max_factor": 0}, ValueError, r"max_factor must be an int >= 1, got 0"),
    ({"max_factor": 2.5}, TypeError, r"max_factor must be an int >= 1, got 2.5"),
    ({"min_fresh": 0}, ValueError, r"min_fresh must be an int >= 1, got 0"),
    ({"prefetch": 0}, ValueError, r"prefetch must be an int >= 1, got 0"),
    ({"timeout": -1}, ValueError, r"timeout must be a number of seconds > 0 or None"),
    ({"seed": -1}, ValueError, r"seed must be an int in \[0, 2\*\*63\)"),
])
def test_arguments_are_checked_with_a_message_naming_the_fix(kwargs, error, message):
    with pytest.raises(error, match=message):
        AdaptiveEcho(range(3), **kwargs)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"size": 3}, r"size must be callable as size\(item\)"),
    ({"agree": 3}, r"agree must be callable as agree\(ready, capacity, ended\).*RankAgreement"),
    ({"clock": 0.0}, r"clock must be callable as clock\(\) -> seconds"),
    ({"feed": "thread"}, r"feed must be callable as feed\(produce\)"),
    ({"timeout": "5"}, r"timeout must be a number of seconds > 0 or None, got '5' of type str"),
])
def test_callables_and_timeout_are_checked_at_construction_not_in_the_thread(kwargs, message):
    # These once failed only later, as "'int' object is not callable" from the thread.
    with pytest.raises(TypeError, match=message):
        AdaptiveEcho(range(3), **kwargs)


def test_timeout_takes_numpy_numbers():
    stage = AdaptiveEcho(range(3), timeout=np.float32(0.5))
    assert stage.timeout == 0.5 and type(stage.timeout) is float


# --- shutdown: no thread survives, and errors reach the caller ---------------------

def test_break_inside_with_block_stops_the_thread():
    with AdaptiveEcho(range(1000)) as stage:
        for _ in stage:
            break
    assert not prefetch_threads()


def test_break_from_an_unnamed_loop_stops_the_thread_on_garbage_collection():
    for _ in AdaptiveEcho(range(1000)):
        break
    gc.collect()
    wait_until(lambda: not prefetch_threads())


def test_break_from_a_named_loop_parks_the_thread_and_resuming_continues():
    stage = AdaptiveEcho(range(100), max_factor=1,
                         feed=functools.partial(Prefetcher, depth=2, park_after=0.05))
    for item in stage:
        if item == 9:
            break
    wait_until(lambda: not prefetch_threads())
    assert list(stage) == list(range(10, 100))


def test_upstream_exception_reaches_the_caller_with_type_and_traceback():
    def broken_reader():
        yield 0
        raise OSError("shard 3 unreadable")

    stage = AdaptiveEcho(broken_reader(), max_factor=1)
    assert next(stage) == 0
    with pytest.raises(OSError, match="shard 3 unreadable") as info:
        next(stage)
    assert "broken_reader" in [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert not prefetch_threads()
    with pytest.raises(RuntimeError, match="stopped at an earlier OSError") as again:
        next(stage)  # a retry does not end the pass silently
    assert again.value.__cause__ is info.value


def test_hung_upstream_times_out_and_leaves_no_thread_once_it_returns():
    release = threading.Event()

    def hung():
        yield 0
        release.wait()
        yield 1

    stage = AdaptiveEcho(hung(), max_factor=1, timeout=0.2)
    assert next(stage) == 0
    with pytest.raises(TimeoutError):
        next(stage)
    release.set()
    wait_until(lambda: not prefetch_threads())


def test_a_retry_after_a_timeout_raises_again_and_a_restore_resumes_reading():
    release = threading.Event()

    class Hung:  # re-iterable, so a restore can read it again
        def __iter__(self):
            yield 0
            release.wait()
            yield from (1, 2)

    stage = AdaptiveEcho(Hung(), max_factor=1, timeout=0.2)
    assert next(stage) == 0
    with pytest.raises(TimeoutError) as first:
        next(stage)
    # Once ended the pass silently with StopIteration: training would stop early.
    with pytest.raises(RuntimeError, match=r"earlier TimeoutError.*load_state_dict") as again:
        next(stage)
    assert again.value.__cause__ is first.value
    state = stage.state_dict()
    release.set()  # the hung read returns: its daemon thread exits
    wait_until(lambda: not prefetch_threads())
    stage.load_state_dict(state)
    assert list(stage) == [1, 2]


def test_keyboard_interrupt_while_waiting_stops_the_thread():
    release = threading.Event()

    def slow():
        yield 0
        release.wait(5.0)
        yield 1

    stage = AdaptiveEcho(slow(), max_factor=1)
    next(stage)
    # A process started with SIGINT ignored (a background job of a non-interactive
    # shell) has no handler for interrupt_main to call: install Python's own.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.2, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            next(stage)
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    release.set()
    wait_until(lambda: not prefetch_threads())
    with pytest.raises(RuntimeError, match="stopped at an earlier KeyboardInterrupt"):
        next(stage)


def test_a_checkpoint_in_the_format_before_min_gap_is_refused_by_its_version():
    state = AdaptiveEcho([1, 2, 3]).state_dict()
    config = {k: v for k, v in state["config"].items() if k != "min_gap"}  # absent at 0
    with pytest.raises(ValueError, match=r"has version 1 but this dataecho expects version 2"):
        AdaptiveEcho([1, 2, 3]).load_state_dict({**state, "version": 1, "config": config})


@pytest.mark.parametrize(("change", "words"), [
    ({"emitted": None}, "state of AdaptiveEcho lacks the key 'emitted'"),
    ({"steps": None}, "state of AdaptiveEcho lacks the key 'steps'"),
    ({"emitted": 10**30}, "state of AdaptiveEcho has emitted=10"),
    ({"fresh": 10**30}, "state of AdaptiveEcho has fresh=10"),
    ({"emitted": 9}, "but it must be an int in [0, 2]"),  # 1 fresh item, max_factor 2
])
def test_a_state_with_a_missing_key_or_a_counter_past_its_bound_is_refused(change, words):
    # Fails on the code before this test: a bare KeyError, or the counter was accepted.
    stage = AdaptiveEcho(range(20), max_factor=2)
    next(stage)
    state = json.loads(json.dumps(stage.state_dict()))
    stage.close()
    for key, value in change.items():
        if value is None:
            del state[key]
        else:
            state[key] = value
    restored = AdaptiveEcho(range(20), max_factor=2)
    try:
        with pytest.raises(ValueError) as error:
            restored.load_state_dict(state)
    finally:
        restored.close()
    assert words in str(error.value), str(error.value)
