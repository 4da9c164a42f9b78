"""EpochCounter: the workers of one DataLoader iteration agree on its epoch."""

import types

import pytest

pytest.importorskip("torch")
from dataecho.torch import workers as module
from dataecho.torch.workers import EpochCounter

pytestmark = pytest.mark.torch


def as_worker(monkeypatch, worker, num_workers, base_seed):
    info = types.SimpleNamespace(id=worker, num_workers=num_workers, seed=base_seed + worker)
    monkeypatch.setattr(module, "get_worker_info", lambda: info)


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
    counter.rewind(9)
    assert counter.next() == 9


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


@pytest.mark.parametrize("changes, words", [
    ({"ended": "no"}, "Counted has ended='no' of type str"),
    ({"ended": True, "epoch": -4}, "Counted has epoch=-4"),
    ({"upstream": None}, "Counted has upstream=None of type NoneType"),
])
def test_a_worker_state_with_damaged_values_is_refused(changes, words):
    from dataecho import Source

    counted = module.Counted(Source(range(4)), [0] * 4, 0, 0, lambda epoch: None)
    with pytest.raises((ValueError, TypeError), match="checkpoint") as error:
        counted.load_state_dict({**counted.state_dict(), **changes})
    assert f"state of {words}" in str(error.value)
