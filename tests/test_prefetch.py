"""The prefetch thread: order, bounds, errors, timeouts and every way it must stop."""

import gc
import itertools
import sys
import threading
import time
import traceback

import numpy as np
import pytest

from dataecho.adaptive import Prefetcher
from helpers.threads import prefetch_threads, wait_until

pytestmark = pytest.mark.usefixtures("no_thread_leak")


def test_items_arrive_in_order_then_stop_iteration():
    feed = Prefetcher(iter(range(50)).__next__, depth=3)
    assert [feed.get() for _ in range(50)] == list(range(50))
    with pytest.raises(StopIteration):
        feed.get()
    assert feed.finished()
    feed.close()


def test_producer_reads_at_most_depth_items_ahead():
    reads = []

    def produce():
        reads.append(len(reads))
        return reads[-1]

    feed = Prefetcher(produce, depth=3)
    feed.get()
    wait_until(lambda: feed.ready() == 3)
    time.sleep(0.05)
    assert len(reads) == 4  # the one taken plus a full queue, nothing in hand
    feed.close()


def test_upstream_exception_reaches_consumer_with_type_and_traceback():
    def broken():
        raise KeyError("disk gone")

    feed = Prefetcher(broken)
    with pytest.raises(KeyError, match="disk gone") as info:
        feed.get()
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "broken" in frames  # the upstream's own frame survives the thread hop
    assert any("prefetch thread" in note for note in info.value.__notes__)
    with pytest.raises(StopIteration):  # like a generator: over after raising
        feed.get()
    feed.close()


def test_hung_upstream_raises_timeout_error_and_thread_exits_once_released():
    release = threading.Event()
    feed = Prefetcher(lambda: release.wait(), timeout=0.2)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"timeout=0\.2"):
        feed.get()
    assert time.monotonic() - start < 2.0
    feed.close(wait=0)
    release.set()
    wait_until(lambda: not prefetch_threads())


def test_close_stops_the_thread_and_discards_queued_items():
    feed = Prefetcher(iter(range(100)).__next__, depth=4)
    feed.get()
    feed.close()
    assert not prefetch_threads()
    assert feed.finished()
    with pytest.raises(StopIteration):
        feed.get()


def test_garbage_collection_stops_the_thread():
    feed = Prefetcher(iter(range(100)).__next__, depth=2)
    feed.get()
    del feed
    gc.collect()
    wait_until(lambda: not prefetch_threads())


def test_thread_parks_when_nobody_reads_and_resumes_losslessly():
    feed = Prefetcher(iter(range(20)).__next__, depth=2, park_after=0.05)
    assert feed.get() == 0
    wait_until(lambda: not prefetch_threads())  # parked: queue full, consumer gone
    assert [feed.get() for _ in range(19)] == list(range(1, 20))
    feed.close()


@pytest.mark.parametrize(("bad", "error"), [
    (0, ValueError), (-1.0, ValueError), (float("nan"), ValueError),
    ("1", TypeError), (True, TypeError)])
def test_timeout_must_be_positive_seconds_or_none(bad, error):
    with pytest.raises(error, match=r"timeout must be a number of seconds > 0 or None"):
        Prefetcher(iter([]).__next__, timeout=bad)


@pytest.mark.parametrize("seconds", [np.float32(0.5), np.int64(2), np.float64(0.5)])
def test_timeout_takes_numpy_numbers_like_every_numeric_parameter(seconds):
    feed = Prefetcher(iter([]).__next__, timeout=seconds)
    assert feed.timeout == float(seconds) and type(feed.timeout) is float
    feed.close()


def test_depth_is_checked_under_the_name_users_pass():
    with pytest.raises(ValueError, match=r"prefetch must be an int >= 1, got 0"):
        Prefetcher(iter([]).__next__, depth=0)


def test_a_thread_that_parks_while_the_consumer_waits_is_restarted():
    # A producer parks (queue full for park_after = 0 s) just as the consumer drains the
    # queue: the consumer must start a new one, not wait for the one that quit. Tiny
    # thread switch intervals make that interleaving happen within a few thousand reads
    # (before the fix, 4 runs in 5 of 3,000 reads each timed out).
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(3):
            feed = Prefetcher(itertools.count().__next__, depth=1, timeout=5.0,
                              park_after=0.0)
            assert [feed.get() for _ in range(3000)] == list(range(3000))
            feed.close()
    finally:
        sys.setswitchinterval(interval)
    wait_until(lambda: not prefetch_threads())


def test_wait_returns_once_an_item_is_ready_and_takes_nothing():
    feed = Prefetcher(iter([7]).__next__, depth=2)
    feed.wait()  # the first item is read in the thread meanwhile
    assert feed.ready() == 1
    assert feed.get() == 7  # the item waited for, still there
    feed.wait()  # nothing follows: returns at the end, takes nothing
    assert feed.finished() and feed.ready() == 0
    with pytest.raises(StopIteration):
        feed.get()
    feed.close()


def test_wait_times_out_like_get_and_leaves_an_upstream_error_to_get():
    release = threading.Event()
    feed = Prefetcher(lambda: release.wait(), timeout=0.2)
    with pytest.raises(TimeoutError, match=r"timeout=0\.2"):
        feed.wait()
    feed.close(wait=0)
    release.set()
    wait_until(lambda: not prefetch_threads())

    error = KeyError("disk gone")

    def broken():
        raise error

    feed = Prefetcher(broken)
    feed.wait()  # returns: no item will come
    assert feed.finished() and feed.ready() == 0
    with pytest.raises(KeyError) as info:
        feed.get()
    assert info.value is error
    feed.close()


def test_wait_restarts_a_thread_that_parked_while_the_consumer_waited():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # as above: makes the park-while-waiting race likely
    try:
        feed = Prefetcher(itertools.count().__next__, depth=1, timeout=5.0, park_after=0.0)
        out = []
        for _ in range(3000):
            feed.wait()
            assert feed.ready() == 1
            out.append(feed.get())
        assert out == list(range(3000))
        feed.close()
    finally:
        sys.setswitchinterval(interval)
    wait_until(lambda: not prefetch_threads())


@pytest.mark.parametrize("event", ["item", "end", "close"])
def test_the_producer_marks_the_consumers_plan_when_an_item_arrives_or_it_stops(event):
    gate = threading.Event()

    def produce():
        gate.wait()
        if event == "end":
            raise StopIteration
        return "fresh"

    feed = Prefetcher(produce, depth=2)
    feed.ready()  # starts the thread, which waits at the gate
    plan = ["echo 2", "echo 1"]
    with feed.channel.cond:
        feed.channel.plan = plan
    if event == "close":
        feed.close()
    else:
        gate.set()
        wait_until(lambda: feed.channel.items or feed.finished())
    assert plan.pop() is plan and plan == ["echo 2", "echo 1"]  # the mark, then the echoes
    assert feed.channel.plan is None  # marked once: a later item leaves the list alone
    gate.set()
    feed.close()
