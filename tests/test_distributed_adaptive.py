"""Ranks under agreement: same steps, same fresh reads, stopping together.

Threads stand for ranks with an in-process all-reduce (deterministic, no torch); two
gloo processes, one with an upstream twice as slow, check RankAgreement itself.
"""

import json
import threading
import time

import numpy as np
import pytest

from dataecho.adaptive import AdaptiveEcho, AdaptiveExamples, Prefetcher

try:
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from dataecho.torch.distributed import RankAgreement
except ImportError:
    dist = None


def gloo(test):
    """Marks a test that runs two gloo processes."""
    usable = dist is not None and dist.is_available()
    return pytest.mark.torch(pytest.mark.skipif(
        not usable, reason="torch.distributed missing")(test))


class ThreadAgreement:
    """An all-reduce of votes between threads that stand for ranks, as RankAgreement does.

    A rank left voting alone (the others stopped, or raised) breaks the barrier after
    ``timeout`` seconds instead of hanging the test.
    """

    def __init__(self, world, timeout=5.0):
        self.calls = [0] * world
        self._votes = [None] * world
        self._agreed = None
        self._barrier = threading.Barrier(world, action=self._combine, timeout=timeout)

    def _combine(self):  # run by one thread once all have voted
        ready, capacity, ended = zip(*self._votes, strict=True)
        self._agreed = (min(ready), min(capacity), any(ended))

    def rank(self, k):
        def agree(ready, capacity, ended):
            self._votes[k] = (ready, capacity, ended)
            self._barrier.wait()  # the next round's action waits for this rank's read
            self.calls[k] += 1
            return self._agreed
        return agree


def _run_ranks(stages):
    """Iterates each stage in its own thread; per rank (items, stats, state, error)."""
    results = [None] * len(stages)

    def run(k):
        items, state, error = [], None, None
        try:
            with stages[k] as stage:
                for item in stage:
                    items.append(item)
                state = stage.state_dict()
        except BaseException as err:
            error = err
        results[k] = (items, stages[k].stats(), state, error)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(stages))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    return results


class EndsLate:
    """``n`` items, then nothing until :meth:`release`, then the end (or ``error``).

    Stands for a DataLoader whose workers report the end late: the consumer has taken
    every item, but the upstream has not said yet that it is over.
    """

    def __init__(self, n, error=None):
        self.n, self.error, self._end = n, error, threading.Event()

    def __iter__(self):
        yield from range(self.n)
        assert self._end.wait(10), "never released"
        if self.error is not None:
            raise self.error

    def release(self):
        self._end.set()


class EndsDuringTheWait:
    """A feed that releases an :class:`EndsLate` upstream's end once the consumer waits
    for an item past its last: the end comes while the rank waits, never before."""

    def __init__(self, feed, upstream):
        self._feed, self._upstream, self._taken = feed, upstream, 0

    def ready(self):
        return self._feed.ready()

    def finished(self):
        return self._feed.finished()

    def wait(self):
        self._past_the_last()
        self._feed.wait()

    def get(self):
        self._past_the_last()
        item = self._feed.get()
        self._taken += 1
        return item

    def _past_the_last(self):
        if self._taken == self._upstream.n:
            self._upstream.release()

    def close(self, wait=5.0):
        self._feed.close(wait)


def _late_end(make, error=None):
    """Rank 0 holds 10 items; rank 1 holds 5, and its end comes while the ranks wait
    for one more: exactly the round in which each rank used to take an item alone."""
    short = EndsLate(5, error)
    agreement = ThreadAgreement(2)
    stages = [make(range(10), agreement.rank(0), None),
              make(short, agreement.rank(1),
                   lambda produce: EndsDuringTheWait(Prefetcher(produce), short))]
    return _run_ranks(stages), agreement


def _echoes(upstream, agree, feed):
    return AdaptiveEcho(upstream, max_factor=1, agree=agree, feed=feed)


def _examples(upstream, agree, feed):
    return AdaptiveExamples(upstream, 2, max_factor=1, collate=list, agree=agree, feed=feed)


@pytest.mark.usefixtures("no_thread_leak")
def test_ranks_stop_together_when_an_upstream_ends_during_a_wait():
    (long, short), agreement = _late_end(_echoes)
    assert long[3] is None and short[3] is None
    assert long[0] == short[0] == [0, 1, 2, 3, 4]  # same steps, each item fresh once
    assert long[1].fresh_items == short[1].fresh_items == 5
    assert agreement.calls[0] == agreement.calls[1]
    with AdaptiveEcho(range(10), max_factor=1) as restored:  # item 5 was read ahead only
        restored.load_state_dict(long[2])
        assert list(restored) == [5, 6, 7, 8, 9]


@pytest.mark.usefixtures("no_thread_leak")
def test_example_ranks_stop_together_when_an_upstream_ends_during_a_wait():
    (long, short), agreement = _late_end(_examples)
    assert long[3] is None and short[3] is None
    assert long[0] == short[0] == [[0, 1], [2, 3]]  # the partial [4] dropped everywhere
    assert long[1].fresh_items == short[1].fresh_items == 5
    assert agreement.calls[0] == agreement.calls[1]


@pytest.mark.usefixtures("no_thread_leak")
def test_an_upstream_error_during_a_wait_ends_every_rank_and_is_raised_on_its_own():
    error = LookupError("shard 7 unreadable")
    (long, short), agreement = _late_end(_echoes, error)
    assert short[3] is error and long[3] is None  # the same object, its own type
    assert long[0] == short[0] == [0, 1, 2, 3, 4]
    assert agreement.calls[0] == agreement.calls[1]


STEP_S = 0.005  # the consumer's training step
UP_S = 0.015  # rank 0's upstream per item; rank 1 takes twice as long


def _upstream(n, seconds):
    for k in range(n):
        time.sleep(seconds)
        yield np.full(2, k)


def _run(stage, agreement):
    steps = 0
    for _ in stage:
        time.sleep(STEP_S)
        steps += 1
    s = stage.stats()
    return {"steps": steps, "fresh": s.fresh_items, "emitted": s.emitted_items,
            "calls": agreement.calls}


def _worker(rank, init_file, out_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    up = UP_S * (2 if rank == 1 else 1)
    results = {}
    agree = RankAgreement()
    with AdaptiveEcho(_upstream(40, up), max_factor=4, agree=agree) as stage:
        results["batches"] = _run(stage, agree)
    agree = RankAgreement()  # rank 1 holds fewer items: everyone stops at its end
    with AdaptiveEcho(_upstream(40 if rank == 0 else 25, up), agree=agree) as stage:
        results["unequal"] = _run(stage, agree)
    agree = RankAgreement()
    examples = AdaptiveExamples(_upstream(96, up / 8), 8, agree=agree, min_fresh=8)
    with examples as stage:
        results["examples"] = _run(stage, agree)
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(str(tmp / "init"), str(tmp)), nprocs=2, join=True)
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in (0, 1)]


@gloo
def test_both_ranks_take_the_same_number_of_steps_and_fresh_items(ranks):
    fast, slow = ranks[0]["batches"], ranks[1]["batches"]
    assert fast["steps"] == slow["steps"] and fast["calls"] == slow["calls"]
    assert fast["fresh"] == slow["fresh"] == 40


@gloo
def test_the_fast_rank_echoes_as_much_as_the_slow_one_needs(ranks):
    fast = ranks[0]["batches"]
    assert fast["emitted"] / fast["fresh"] > 1.5  # R ~ 6 on the slow rank: echo capped at 4


@gloo
def test_ranks_stop_together_when_one_upstream_ends_first(ranks):
    long, short = ranks[0]["unequal"], ranks[1]["unequal"]
    assert long["steps"] == short["steps"]
    assert long["fresh"] == short["fresh"] == 25 and long["calls"] == short["calls"]


@gloo
def test_example_level_ranks_take_the_same_number_of_batches(ranks):
    fast, slow = ranks[0]["examples"], ranks[1]["examples"]
    assert fast["steps"] == slow["steps"] and fast["fresh"] == slow["fresh"]
    assert fast["emitted"] == 8 * fast["steps"]  # full batches only under agreement


@gloo
def test_an_nccl_vote_uses_the_cuda_device_current_at_the_first_vote(monkeypatch, tmp_path):
    import torch

    # Scripts often build the stage before torch.cuda.set_device(local_rank): the device
    # must not be fixed then, or every rank votes on cuda:0.
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0,
                            world_size=1)
    try:
        current = [0]
        monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
        monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])
        agree = RankAgreement()
        current[0] = 3  # torch.cuda.set_device(3), after the stage was built
        assert agree.device == torch.device("cuda", 3)
        current[0] = 5
        assert agree.device == torch.device("cuda", 3)  # fixed from the first vote on
        assert RankAgreement(device="cpu").device == torch.device("cpu")
    finally:
        dist.destroy_process_group()
