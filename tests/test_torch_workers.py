"""EpochCounter: the workers of one DataLoader iteration agree on its epoch."""

import types

import pytest

pytest.importorskip("torch")
from dataecho.torch import workers as module
from dataecho.torch.workers import EpochCounter

pytestmark = pytest.mark.torch


def as_worker(monkeypatch, worker, num_workers, base_seed, started=0):
    """Acts as DataLoader worker ``worker``, forked as the ``started + worker``-th process
    (``started`` None: a spawned worker, whose copy carries its stamp)."""
    info = types.SimpleNamespace(id=worker, num_workers=num_workers, seed=base_seed + worker)
    monkeypatch.setattr(module, "get_worker_info", lambda: info)
    if started is not None:
        monkeypatch.setattr(module, "_STARTED", [started + worker])


def test_the_workers_of_one_iteration_share_its_epoch_and_the_next_iteration_advances(
        monkeypatch):
    counter = EpochCounter()
    got = []
    for base_seed in (11, 97, 5):  # three iterations, new workers each time
        for worker in (1, 0, 2):  # in any order
            as_worker(monkeypatch, worker, 3, base_seed)
            got.append(counter.claim(started=0))
    assert got == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert counter.next() == 3


def test_persistent_workers_are_told_apart_by_their_own_iteration_count(monkeypatch):
    counter = EpochCounter()
    got = []
    for started in range(3):  # one base seed, the same worker processes
        for worker in (0, 1):
            as_worker(monkeypatch, worker, 2, 40)
            got.append(counter.claim(started=started))
    assert got == [0, 0, 1, 1, 2, 2]


def test_an_iteration_takes_at_most_num_workers_claims(monkeypatch):
    # A DataLoader rebuilt each epoch with the same seeded generator repeats its
    # base seed: the next iteration's workers must still get the next epoch.
    counter = EpochCounter()
    got = []
    for _ in range(2):
        for worker in (0, 1):
            as_worker(monkeypatch, worker, 2, 123)
            got.append(counter.claim(started=0))
    assert got == [0, 0, 1, 1]


def test_a_rebuilt_loader_after_an_abandoned_iteration_reads_one_new_epoch(monkeypatch):
    # Fails on 8beab11: the same seeded generator gives every iteration the same base
    # seed; an iteration abandoned after its worker 0 claimed left the claim open, and
    # the next iteration's worker 1 joined it (epoch 0) while its worker 0 read epoch 1.
    counter = EpochCounter()
    as_worker(monkeypatch, 0, 2, 123, started=10)
    assert counter.claim(started=0) == 0  # worker 1 of this iteration never started
    got = {}
    for worker in (1, 0):  # the next iteration's workers, forked anew
        as_worker(monkeypatch, worker, 2, 123, started=12)
        got[worker] = counter.claim(started=0)
    assert got == {0: 1, 1: 1}


def test_a_copy_pickled_for_a_spawned_worker_carries_the_stamp_of_its_start(monkeypatch):
    def spawned(counter):  # what pickling for a spawned worker hands it
        copy = object.__new__(EpochCounter)
        copy.__dict__.update(counter.__getstate__())
        return copy

    counter = EpochCounter()
    got = []
    for _ in range(2):  # two iterations of a loader drawing the same base seed
        copies = [spawned(counter) for _ in range(2)]  # workers 0 and 1, in order
        for worker in (1, 0):
            as_worker(monkeypatch, worker, 2, 9, started=None)
            got.append(copies[worker].claim(started=0))
    assert got == [0, 0, 1, 1]


def test_set_starts_a_new_claim_and_a_restored_epoch_wins(monkeypatch):
    counter = EpochCounter()
    as_worker(monkeypatch, 0, 2, 7)
    assert counter.claim(started=0) == 0
    counter.set(4)
    as_worker(monkeypatch, 1, 2, 7)
    assert counter.claim(started=0) == 4  # set() ended the claim of base seed 7
    counter.set(0)
    as_worker(monkeypatch, 0, 2, 8)
    assert counter.claim(started=0, resume=9) == 9
    as_worker(monkeypatch, 1, 2, 8)
    assert counter.claim(started=0, resume=8) == 8  # each restored worker its own


def test_the_training_process_counts_one_epoch_per_iteration():
    counter = EpochCounter()
    assert [counter.claim(started=k) for k in range(3)] == [0, 1, 2]
    assert counter.claim(started=3, resume=7) == 7 and counter.next() == 8


def test_too_many_workers_is_reported_as_num_workers(monkeypatch):
    import types

    info = types.SimpleNamespace(id=0, num_workers=300)
    monkeypatch.setattr(module, "get_worker_info", lambda: info)
    with pytest.raises(ValueError, match=r"num_workers must be <= 256 for EchoDataset .*got "
                                         r"300; pass DataLoader\(\.\.\., num_workers=256\)"):
        module.worker_slot()


def test_as_an_epoch_source_each_copy_counts_its_own_iterations(monkeypatch):
    # begin() is claim() with this copy's count of iterations begun: persistent
    # workers (one base seed) still read a new epoch at each iteration.
    import copy

    counter = EpochCounter()
    workers = [copy.copy(counter) for _ in range(2)]  # what each worker process holds
    got = []
    for _ in range(3):
        for worker, mine in enumerate(workers):
            as_worker(monkeypatch, worker, 2, 40)
            got.append(mine.begin())
    assert got == [0, 0, 1, 1, 2, 2]
    workers[0].ended(2)  # claimed at begin(): nothing moves
    assert counter.next() == 3
    as_worker(monkeypatch, 0, 2, 41)
    assert workers[0].begin(resume=7) == 7 and counter.next() == 8


def test_shared_counts_add_each_workers_growth_to_its_slot(monkeypatch):
    counts = module.SharedCounts()
    counts.reset(10, 20)  # the training process: a checkpoint's totals
    for worker, (fresh, emitted) in enumerate([(3, 6), (4, 8)]):
        as_worker(monkeypatch, worker, 2, 5)
        read = [1, 2]  # a restored pipeline had counted these before
        publish = counts.publisher(lambda read=read: (read[0], read[1]))
        read[:] = [1 + fresh, 2 + emitted]
        publish()
    assert counts.total() == (17, 34)


def test_the_training_process_counts_are_read_when_asked_and_kept_across_iterations(
        monkeypatch):
    counts = module.SharedCounts()
    first = [0, 0]
    assert counts.publisher(lambda: (first[0], first[1])) is None  # nothing per example
    first[:] = [3, 6]
    assert counts.total() == (3, 6) and counts.own() == (3, 6)
    second = [0, 0]
    counts.publisher(lambda: (second[0], second[1]))  # a new iteration keeps the first's
    first[:] = [99, 99]  # the first iteration is no longer read
    second[:] = [1, 2]
    assert counts.total() == (4, 8)
    counts.reset(10, 20)  # a checkpoint's totals replace what the iteration read
    second[:] = [5, 5]
    assert counts.total() == (10, 20)
    restored = [0, 0]
    counts.publisher(lambda: (restored[0], restored[1]))
    restored[:] = [1, 1]
    assert counts.total() == (11, 21)


def test_a_training_process_iteration_never_writes_over_worker_0s_counts(monkeypatch):
    counts = module.SharedCounts()
    live = [0, 0]
    counts.publisher(lambda: (live[0], live[1]))  # an iteration here, then abandoned
    live[:] = [2, 2]
    module._before_fork()  # starting DataLoader worker 0 ...
    monkeypatch.setattr(module.os, "getpid", lambda: 4242)
    as_worker(monkeypatch, 0, 2, 5)
    live[:] = [50, 50]  # ... whose fork still holds that iteration
    assert counts.own() == (2, 2)
    worker = [0, 0]
    publish = counts.publisher(lambda: (worker[0], worker[1]))
    worker[:] = [7, 7]
    publish()
    monkeypatch.undo()  # back in the training process
    assert counts.total() == (9, 9)  # its abandoned iteration does not write slot 0 again
