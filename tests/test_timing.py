"""Timing both sides of the echo point: the read an echo saves, the augmentation it repeats."""

import time

import pytest

from dataecho import IterableSource, Source, pipeline
from dataecho import timing as timing_module
from dataecho.timing import EVERY, SIZE, Clock, Timed, Timing
from helpers.checkpoint import assert_restores_everywhere


def nap(seconds, took):
    """Sleeps ``seconds`` and records how long that really took (a sleep overshoots)."""
    start = time.perf_counter()
    time.sleep(seconds)
    took.append(time.perf_counter() - start)


class Slow:
    """A map-style data set whose every read sleeps ``seconds``."""

    def __init__(self, n, seconds):
        self.n, self.seconds, self.took = n, seconds, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        nap(self.seconds, self.took)
        return i


class Sleepy:
    """An augmentation that sleeps ``seconds``."""

    def __init__(self, seconds):
        self.seconds, self.took = seconds, []

    def __call__(self, x, rng):
        nap(self.seconds, self.took)
        return x + rng.random()


@pytest.mark.parametrize(("echo", "factor"), [("before_augmentation", 2),
                                              ("after_augmentation", 2),
                                              ("before_augmentation", 1)])
def test_both_sides_are_measured_within_ten_percent_of_known_sleeps(echo, factor,
                                                                    monkeypatch):
    # Every call timed, so the mean is over the same calls as the sleeps' own record:
    # five sampled calls of a loaded machine could land on a long one (the sampling has
    # tests of its own).
    monkeypatch.setattr(timing_module, "EVERY", 1)
    timing, data, augment = Timing(), Slow(5 * EVERY, 0.004), Sleepy(0.002)
    stage = pipeline(data, augment=augment, echo=echo, factor=factor,
                     batch_size=None, buffer_size=1, seed=0, timing=timing)
    n = sum(1 for _ in stage)
    sides = timing.sides()
    assert n == 5 * EVERY * factor and sides.reads == 5 * EVERY
    # Copies made before the augmentation are augmented anew; after it, not.
    assert sides.augments == 5 * EVERY * (factor if echo == "before_augmentation" else 1)
    assert sides.read_s == pytest.approx(sum(data.took) / len(data.took), rel=0.1)
    assert sides.augment_s == pytest.approx(sum(augment.took) / len(augment.took), rel=0.1)


def test_without_augmentation_its_side_is_zero_and_before_a_timed_call_the_read_is_unknown():
    timing = Timing()
    stage = pipeline(list(range(10)), factor=2, batch_size=None, timing=timing)
    assert timing.sides().read_s is None
    list(stage)
    assert timing.sides().augment_s == 0.0 and timing.sides().augments == 0


def test_timed_stages_leave_items_states_and_counts_as_they_are():
    def build(timed):
        return pipeline(list(range(40)), augment=lambda x, rng: x + rng.random(), factor=2.5,
                        batch_size=None, buffer_size=7, seed=3,
                        timing=Timing() if timed else None)

    plain, timed = build(False), build(True)
    for _ in range(33):
        assert next(plain) == next(timed)
    assert plain.state_dict() == timed.state_dict()
    assert plain.stats() == timed.stats()
    assert_restores_everywhere(lambda: build(True), every=3)


def test_a_clock_in_shared_storage_writes_only_its_own_places():
    store = [0] * (3 * SIZE)
    clock = Clock(store, at=SIZE)
    list(Timed(Source(list(range(2 * EVERY)), shuffle=False), clock))
    assert store[:SIZE] == [0] * SIZE and store[2 * SIZE:] == [0] * SIZE
    assert clock.totals()[:2] == (2 * EVERY, 2) and clock.totals()[2] > 0


def test_a_garbage_collection_inside_a_timed_call_is_not_counted_and_runs_after():
    import gc

    class Collecting:  # a read during which the collector would run
        def __init__(self):
            self.pauses = 0

        def __iter__(self):
            return self

        def __next__(self):
            self.pauses += not gc.isenabled()  # disabled only while timed
            return 1

    clock, reads = Clock(), Collecting()
    stage = Timed(IterableSource(reads), clock)
    for _ in range(2 * EVERY):
        next(stage)
    assert reads.pauses == 2 and gc.isenabled() and clock.totals()[1] == 2


def test_a_read_that_waits_now_and_then_costs_its_mean():
    clock = Clock()
    for ns in [1000] * 9 + [91_000]:  # a read that waits for its next shard once in ten
        clock.add(ns, calls=EVERY)
    assert clock.seconds_per_call() == pytest.approx(1e-5)


def test_a_read_that_waits_now_and_then_is_timed_at_every_call_and_costs_its_mean():
    # A stream's read: quick most of the time, a long wait for the network once in 23
    # calls. One call in 31 would time about 1 wait in this run, so the mean would be
    # off by far more than 10%; calls this slow are all timed.
    took: list[float] = []

    class Stream:
        def __init__(self):
            self.i = 0

        def __iter__(self):
            return self

        def __next__(self):
            self.i += 1
            if self.i > 23 * 20:
                raise StopIteration
            nap(0.01 if self.i % 23 == 0 else 0.0002, took)
            return self.i

    clock = Clock()
    calls = sum(1 for _ in Timed(IterableSource(Stream()), clock))
    total, timed, _ = clock.totals()
    assert calls == total == 23 * 20 and timed == calls - EVERY + 1  # all from the first
    assert clock.seconds_per_call() == pytest.approx(sum(took) / len(took), rel=0.1)


def test_cheap_calls_stay_sampled_one_in_every():
    clock = Clock()
    list(Timed(Source(list(range(40 * EVERY)), shuffle=False), clock))
    assert clock.totals()[:2] == (40 * EVERY, 40)
