"""Sliced reading under accelerate: each process reads its own part, in its own slots.

accelerate's own ``IterableDatasetShard`` does the dropping here, one process at a
time; the two-process jobs under torchrun are in test_accelerated.py.
"""
import collections
import pickle

import pytest

pytest.importorskip("accelerate")

from accelerate.data_loader import IterableDatasetShard

from dataecho.pipeline import echoed_items, pipeline
from dataecho.source import Source
from dataecho.torch import EchoDataset, accelerated
from dataecho.torch.placed import PLACEHOLDER, Slots

pytestmark = pytest.mark.torch


def _kept(slots_of, stream_of, processes, **shard):
    """What each process's IterableDatasetShard keeps of the stream built for it."""
    kept = []
    for p in range(processes):
        class Stream(__import__("torch").utils.data.IterableDataset):
            def __iter__(self, p=p):
                return iter(stream_of(p, slots_of(p)))
        kept.append(list(IterableDatasetShard(Stream(), num_processes=processes,
                                              process_index=p, **shard)))
    return kept


@pytest.mark.parametrize("sizes", [[8, 8], [9, 7], [3, 10], [1, 5], [12, 12, 11]])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("split_batches", [False, True])
def test_each_process_keeps_exactly_its_own_items_in_order_and_no_placeholder(
        sizes, drop_last, split_batches):
    processes, batch = len(sizes), 6 if split_batches else 2
    if split_batches:
        batch = 2 * processes  # the whole batch, split between the processes

    def slots_of(p):
        return Slots(p, processes, batch // processes if split_batches else batch,
                     drop_last)

    def stream_of(p, slots):
        own = [(p, i) for i in range(sizes[p])]
        return slots.place(iter(own), 0, slots.runs(sizes), lambda: iter(own))

    kept = _kept(slots_of, stream_of, processes, batch_size=batch, drop_last=drop_last,
                 split_batches=split_batches)
    per = batch // processes if split_batches else batch
    runs = slots_of(0).runs(sizes)
    assert [len(k) for k in kept] == [runs * per] * processes  # the same steps everywhere
    for p, k in enumerate(kept):
        assert PLACEHOLDER not in k
        own = [(p, i) for i in range(sizes[p])]
        if drop_last:  # the shortest part's whole runs, read in order, none repeated
            assert k == own[:len(k)] and runs == min(sizes) // per
        else:  # the whole part, completed by its first items as accelerate pads
            assert k == (own * len(k))[:len(k)] and runs == -(-max(sizes) // per)


@pytest.mark.parametrize("sizes", [[8, 8], [9, 7], [3, 10], [1, 5], [0, 4], [12, 12, 11]])
@pytest.mark.parametrize("drop_last", [False, True])
def test_a_part_of_unknown_size_fills_its_own_runs_and_no_placeholder_is_kept(
        sizes, drop_last):
    # A stream or an adaptive factor: each process's part fills as many runs as it has
    # items (the loop's EqualSteps ends the processes' epochs together).
    processes, batch = len(sizes), 2

    def stream_of(p, slots):
        return slots.fill(iter([(p, i) for i in range(sizes[p])]), 0)

    kept = _kept(lambda p: Slots(p, processes, batch, drop_last), stream_of, processes,
                 batch_size=batch, drop_last=drop_last)
    for p, k in enumerate(kept):
        own = [(p, i) for i in range(sizes[p])]
        assert PLACEHOLDER not in k
        if drop_last:  # its whole runs, in order; an incomplete last one dropped
            assert k == own[:sizes[p] // batch * batch]
        else:  # all of it, the last run completed with that run's own items again
            assert k[:len(own)] == own and len(k) == -(-sizes[p] // batch) * batch
            assert set(k[len(own):]) <= set(own[len(own) // batch * batch:])


def test_a_resumed_part_of_unknown_size_goes_on_at_the_item_it_stopped_at():
    slots = Slots(1, 2, 3, drop_last=False)
    whole = list(slots.fill(iter(range(10)), 0))
    assert whole[-6:] == [PLACEHOLDER] * 3 + [9, 9, 9]  # the last run: one item, completed
    for done in range(0, 10, 3):  # at a run's edge, where a loader's checkpoint stands
        assert list(slots.fill(iter(range(done, 10)), done)) == whole[done // 3 * 6:]
    assert list(slots.fill(iter(()), 10)) == []  # resumed at the part's end


def test_a_resumed_stream_goes_on_at_the_item_it_stopped_at():
    slots = Slots(1, 2, 3, drop_last=False)
    whole = list(slots.place(iter(range(12)), 0, 4, lambda: iter(range(12))))
    for done in range(12):
        resumed = list(slots.place(iter(range(done, 12)), done, 4, lambda: iter(range(12))))
        # at a run's edge (where a checkpoint of the shard's loader stands) the stream
        # starts a new run; inside one, at the next item
        start = done // 3 * 6 if done % 3 == 0 else whole.index(done)
        assert resumed == whole[start:]


def test_the_placeholder_is_one_object_in_every_process():
    assert pickle.loads(pickle.dumps(PLACEHOLDER)) is PLACEHOLDER
    assert "never an example" in repr(PLACEHOLDER)


@pytest.mark.parametrize("factor", [1, 2, 1.5, 2.25])
@pytest.mark.parametrize("shard", [0, 3])
def test_echoed_items_counts_what_the_pipeline_hands_over(factor, shard):
    source = Source(list(range(101)), seed=0, epoch=2, shard_index=shard, num_shards=4)
    stage = pipeline(source, factor=factor, seed=7, epoch=2, shard_index=shard,
                     batch_size=None, echo="before_augmentation")
    assert echoed_items(source.shard_size, factor, seed=7, epoch=2, shard=shard) == \
        len(list(stage))


@pytest.mark.parametrize("factor", [2, 1.5])
@pytest.mark.parametrize(("size", "drop_last"), [(48, False), (50, False), (50, True)])
def test_two_sliced_processes_train_every_example_factor_times_reading_it_once(
        monkeypatch, factor, size, drop_last):
    # Each process's EchoDataset, told it is read sliced (as accelerate's record says
    # under torchrun), reads its own half; accelerate's shard keeps its slots.
    reads = collections.Counter()

    class Ids:
        def __len__(self):
            return size

        def __getitem__(self, i):
            reads[i] += 1
            return i

    batch, kept, counts = 4, [], []
    for p in range(2):
        slots = Slots(p, 2, batch, drop_last)
        monkeypatch.setattr(accelerated, "reads_as", lambda *a, slots=slots: accelerated.Reading(
            (slots.process, slots.processes), True, slots))
        ds = EchoDataset(Ids(), factor=factor, buffer_size=8, seed=0)
        kept.append(list(IterableDatasetShard(ds, batch_size=batch, drop_last=drop_last,
                                              num_processes=2, process_index=p)))
        counts.append(ds.stats())
    assert len(kept[0]) == len(kept[1]) and len(kept[0]) % batch == 0
    trained = collections.Counter(kept[0] + kept[1])
    emitted = sum(c.emitted_examples for c in counts)
    assert sum(c.fresh_examples for c in counts) == size or drop_last
    if not drop_last and factor == 2:
        # every example its two copies; a shorter part completed by its first copies
        assert all(trained[i] >= 2 for i in range(size)) and emitted == 2 * size
    if drop_last:
        assert sum(trained.values()) == emitted  # nothing beyond what was handed over
    if factor == 2 and size == 48:
        assert trained == {i: 2 for i in range(size)} and reads == {i: 1 for i in range(size)}
    assert set(reads.values()) <= {1, 2}  # read once; twice only to complete a part


# One process at a time here, without a loop to end their epochs together: the warning
# that asks for EqualSteps has its own test below.
@pytest.mark.filterwarnings("ignore:EchoDataset reads .* under accelerate's sliced mode")
@pytest.mark.parametrize("factor", [2, "auto"])
@pytest.mark.parametrize("drop_last", [False, True])
def test_two_sliced_processes_read_a_stream_once_between_them(monkeypatch, factor, drop_last):
    # A stream that splits itself by process (as WebDataset's split_by_node does) into
    # parts of 13 and 12 ids: each process's EchoDataset reads its own part only, and
    # accelerate's shard keeps exactly that part's copies (EqualSteps in the training
    # loop ends the processes' epochs together).
    import torch

    from dataecho import Auto
    from dataecho.torch import Streamed

    reads, size, batch = collections.Counter(), 25, 4

    class Split(torch.utils.data.IterableDataset):
        def __init__(self, process):
            self.process = process

        def __iter__(self):
            for i in range(self.process, size, 2):
                reads[i] += 1
                yield i

    for p in range(2):
        slots = Slots(p, 2, batch, drop_last)
        monkeypatch.setattr(accelerated, "reads_as", lambda *a, slots=slots: accelerated.Reading(
            (slots.process, slots.processes), True, slots))
        ds = EchoDataset(Split(p), factor=Auto(max_factor=2) if factor == "auto" else factor,
                         seed=0, read=Streamed(split="stream"))
        kept = list(IterableDatasetShard(ds, batch_size=batch, drop_last=drop_last,
                                         num_processes=2, process_index=p))
        own = set(range(p, size, 2))
        stats = ds.stats()
        assert set(kept) <= own and stats.fresh_examples == len(own)
        if factor == 2:
            handed = collections.Counter(kept[:stats.emitted_examples])
            if not drop_last:
                assert handed == {i: 2 for i in own} and len(kept) % batch == 0
            else:
                assert len(kept) == stats.emitted_examples // batch * batch
    assert reads == {i: 1 for i in range(size)}  # the processes read it once between them


def test_a_wrapper_that_hides_the_dataset_from_a_sliced_loader_is_named_once(monkeypatch):
    # Inside the user's wrapper every process reads the whole epoch (no placeholders
    # can pass): said once, naming the wrapper and the fix; the data set itself is not.
    ds = EchoDataset(list(range(8)), factor=2)

    class Mine:
        pass

    class Shard:
        def __init__(self, dataset, processes):
            self.dataset, self.num_processes, self.process_index = dataset, processes, 0
            self.batch_size, self.split_batches, self.drop_last = 2, False, False

    def reads(shard):
        monkeypatch.setattr(accelerated, "_reading", lambda dataset: ("sliced", shard))
        seen = accelerated.SeenSplit()
        return [accelerated.reads_as(ds, None, None, 0, seen) for _ in range(2)]

    with pytest.warns(UserWarning, match=r"inside a Mine, .* each of the 2 processes reads "
                                         r"the whole epoch .* hand accelerate the EchoDataset"
                      ) as caught:
        assert [r.read_as for r in reads(Shard(Mine(), 2))] == [(0, 1)] * 2
    assert len(caught) == 1
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert reads(Shard(ds, 2))[0].slots == Slots(0, 2, 2, False)  # held: placed
        reads(Shard(Mine(), 1))  # one process: nothing is read twice


def test_the_dispatched_default_is_named_once_on_process_zero_with_the_setting(monkeypatch):
    # accelerate's default for an IterableDataset: process 0's workers read for all.
    import warnings

    import torch.distributed as dist

    ds = EchoDataset(list(range(8)), factor=2)
    monkeypatch.setattr(accelerated, "_reading", lambda dataset: ("dispatched", None))
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    seen = accelerated.SeenSplit()
    with pytest.warns(UserWarning, match=r"process 0's DataLoader workers read the data for "
                                         r"all 4 processes, 1/4 .*dispatch_batches=False"
                      ) as caught:
        for _ in range(3):
            assert accelerated.reads_as(ds, None, None, 0, seen).read_as == (0, 1)
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the other processes read nothing: no word
        assert accelerated.reads_as(ds, None, None, 1, accelerated.SeenSplit()).read_as is None


def test_a_sliced_stream_without_equal_steps_is_warned_of_once_and_not_inside_them(
        monkeypatch, tmp_path):
    # Parts whose length is known only once read may end at different steps: without
    # EqualSteps a DDP step only some processes take would hang.
    import warnings

    import torch.distributed as dist
    from torch.utils.data import DataLoader

    from dataecho.torch import Streamed
    from dataecho.torch.distributed import EqualSteps

    slots = Slots(0, 2, 2, drop_last=False)
    monkeypatch.setattr(accelerated, "reads_as", lambda *a: accelerated.Reading(
        (0, 2), True, slots))

    def shard(ds):
        return IterableDatasetShard(ds, batch_size=2, num_processes=2, process_index=0)

    class Evens(__import__("torch").utils.data.IterableDataset):  # process 0's part
        def __iter__(self):
            return iter(range(0, 6, 2))

    ds = EchoDataset(Evens(), factor=2, read=Streamed(split="stream"))
    with pytest.warns(UserWarning, match=r"reads a stream \(Evens\) under accelerate's sliced "
                                         r"mode: each of the 2 processes .* hangs; wrap the "
                                         r"prepared loader in .*EqualSteps") as caught:
        first, again = list(shard(ds)), list(shard(ds))
    assert len(caught) == 1 and sorted(first) == [0, 0, 2, 2, 4, 4] == sorted(again)

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0,
                            world_size=1)
    try:
        ds = EchoDataset(Evens(), factor=2, read=Streamed(split="stream"))
        EqualSteps(DataLoader(shard(ds), batch_size=2))  # accelerate's shard holds it
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert sorted(shard(ds)) == [0, 0, 2, 2, 4, 4]
    finally:
        dist.destroy_process_group()
