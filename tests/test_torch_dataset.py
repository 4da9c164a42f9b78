import collections
import io
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset

from checkpoint import same
from dataecho.torch import EchoDataset

pytestmark = pytest.mark.torch


class Tokens(Dataset):
    """Each read returns (index, a token unique to that read), so reads can be counted."""

    def __init__(self, n):
        self.n = n
        self.reads = 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.reads += 1
        return torch.tensor([i, os.getpid() * 100_000 + self.reads])


def jitter(x, rng):
    return torch.cat([x, torch.tensor([int(rng.integers(1_000_000))])])


def _epoch(num_workers, ranks, factor=2, epoch=0, n=60, **kw):
    rows = []
    for rank in range(ranks):
        ds = EchoDataset(Tokens(n), augment=jitter, factor=factor, buffer_size=16, seed=3,
                         rank=rank, world_size=ranks, **kw)
        ds.set_epoch(epoch)
        for batch in DataLoader(ds, batch_size=8, num_workers=num_workers):
            rows.extend(batch.tolist())
    return rows


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("ranks", [1, 2])
def test_every_example_is_read_exactly_once_per_epoch_and_used_factor_times(num_workers, ranks):
    rows = _epoch(num_workers, ranks)
    uses = collections.Counter(r[0] for r in rows)
    reads = collections.defaultdict(set)
    for index, token, _ in rows:
        reads[index].add(token)
    assert uses == {i: 2 for i in range(60)}
    assert all(len(tokens) == 1 for tokens in reads.values())
    # Echoed before augmentation: the two copies were augmented differently.
    augmented = collections.defaultdict(set)
    for index, _, aug in rows:
        augmented[index].add(aug)
    assert sum(len(a) == 2 for a in augmented.values()) >= 58


def test_set_epoch_changes_the_order_and_both_epochs_are_complete():
    first, second = _epoch(0, 1, epoch=0), _epoch(0, 1, epoch=1)
    assert [r[0] for r in first] != [r[0] for r in second]
    assert collections.Counter(r[0] for r in second) == {i: 2 for i in range(60)}


def test_persistent_workers_advance_the_epoch_by_themselves():
    ds = EchoDataset(Tokens(40), factor=1.5, buffer_size=8, seed=1)
    loader = DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True)
    epochs = [[int(v) for b in loader for v in b[:, 0]] for _ in range(2)]
    assert all(set(e) == set(range(40)) for e in epochs)
    assert epochs[0] != epochs[1]


def test_stats_add_up_over_workers():
    ds = EchoDataset(Tokens(50), factor=3, buffer_size=8)
    n = sum(len(b) for b in DataLoader(ds, batch_size=10, num_workers=2))
    assert n == 150
    assert (ds.stats().fresh_examples, ds.stats().emitted_examples) == (50, 150)


def test_restore_between_batches_with_num_workers_zero_resumes_exactly():
    def make():
        ds = EchoDataset(Tokens(30), augment=jitter, factor=2.5, buffer_size=7, seed=5)
        return ds, DataLoader(ds, batch_size=4)

    ds, loader = make()
    it = iter(loader)
    states, outputs = [], []
    while True:
        states.append(ds.state_dict())
        try:
            outputs.append(next(it)[:, [0, 2]])
        except StopIteration:
            break
    for k in range(1, len(outputs)):
        buf = io.BytesIO()
        torch.save(states[k], buf)
        ds2, loader2 = make()
        ds2.load_state_dict(torch.load(io.BytesIO(buf.getvalue())))
        rest = [b[:, [0, 2]] for b in loader2]
        assert same(rest, outputs[k:]), f"restored after batch {k}"
        assert ds2.stats() == ds.stats()


def test_stateful_dataloader_with_workers_resumes_exactly():
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        ds = EchoDataset(Tokens(48), augment=jitter, factor=2, buffer_size=6, seed=2)
        return StatefulDataLoader(ds, batch_size=4, num_workers=2)

    loader = make()
    full = [b[:, [0, 2]] for b in loader]
    loader = make()
    it = iter(loader)
    head = [next(it)[:, [0, 2]] for _ in range(7)]
    state = loader.state_dict()
    del it
    restored = make()
    restored.load_state_dict(state)
    rest = [b[:, [0, 2]] for b in restored]
    assert same(head + rest, full)


def test_error_in_a_worker_reaches_the_caller_with_its_type():
    class Broken(Tokens):
        def __getitem__(self, i):
            if i == 7:
                raise KeyError("corrupt record 7")
            return super().__getitem__(i)

    loader = DataLoader(EchoDataset(Broken(20), factor=2), batch_size=4, num_workers=2)
    with pytest.raises(KeyError, match="corrupt record 7"):
        list(loader)


def test_batch_echoing_is_rejected_with_a_pointer_to_echo_batches():
    with pytest.raises(ValueError, match=r"for batch echoing wrap the DataLoader in "
                                         r"dataecho.torch.EchoBatches"):
        EchoDataset(Tokens(3), echo="batch")


def test_bad_arguments_are_checked_at_construction():
    with pytest.raises(ValueError, match=r"factor must be >= 1"):
        EchoDataset(Tokens(3), factor=0.5)
    with pytest.raises(ValueError, match=r"data is empty"):
        EchoDataset(Tokens(0))


def test_state_that_is_not_a_dict_is_rejected():
    with pytest.raises(TypeError, match=r"state must be a dict returned by EchoDataset"):
        EchoDataset(Tokens(3)).load_state_dict(np.zeros(2))
