"""The table of stream readers: recognition, splitting, checks and a reader of one's own."""

import collections

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, IterableDataset

from dataecho import Map, TarShards
from dataecho.torch import EchoDataset, Streamed
from dataecho.torch.streams import ANY, READERS, StreamReader, reader_of, register

pytestmark = pytest.mark.torch


class Parts(IterableDataset):
    """A stream of one's own in numbered parts; ``with_part(k, n)`` reads parts k, k+n, ..."""

    def __init__(self, parts=8, size=3, only=None):
        self.parts, self.size, self.only = parts, size, only

    def with_part(self, index, count):
        return Parts(self.parts, self.size, only=range(index, self.parts, count))

    def __iter__(self):
        for part in self.only or range(self.parts):
            yield from (torch.tensor([part * self.size + i]) for i in range(self.size))


@pytest.fixture
def parts_reader():
    """A reader of Parts that splits whole parts, registered for one test."""
    reader = StreamReader("Parts", lambda s: isinstance(s, Parts), split="dataecho",
                          shards=lambda s, k, n, epoch: Map(s.with_part(k, n), lambda x: x))
    register(reader)
    yield reader
    READERS.remove(reader)


def test_built_in_streams_are_recognised_by_their_library_and_the_rest_by_any():
    assert reader_of(TarShards(["a.tar"])).split == "dataecho"
    assert reader_of(Map(TarShards(["a.tar"]), lambda x: x)).shards is not None
    assert reader_of([1, 2]) is ANY and ANY.split is None
    datasets = pytest.importorskip("datasets")
    hf = datasets.Dataset.from_dict({"i": [1, 2]}).to_iterable_dataset()
    assert reader_of(hf).name == "Hugging Face datasets" and reader_of(hf).split == "stream"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_registered_reader_splits_whole_parts_so_each_worker_reads_only_its_own(
        parts_reader, num_workers):
    ds = EchoDataset(Parts(), factor=2, buffer_size=4, seed=0)
    assert ds.recipe.read == Streamed(split="dataecho")  # the entry's split is the default
    rows = [r for b in DataLoader(ds, batch_size=4, num_workers=num_workers)
            for r in b.flatten().tolist()]
    assert collections.Counter(rows) == {i: 2 for i in range(24)}


def test_a_registered_check_refuses_a_setup_naming_the_fix():
    def one_rank_only(stream, world_size):
        if world_size not in (None, 1):
            raise ValueError("Parts: every rank would read every part; split them first")

    reader = StreamReader("Parts", lambda s: isinstance(s, Parts), split="stream",
                          check=one_rank_only)
    register(reader)
    try:
        with pytest.raises(ValueError, match="every rank would read every part"):
            EchoDataset(Parts(), factor=2, rank=0, world_size=2)
        EchoDataset(Parts(), factor=2)
    finally:
        READERS.remove(reader)


def test_registering_something_else_is_refused_naming_the_class():
    with pytest.raises(TypeError, match=r"reader must be a dataecho.torch.streams.StreamReader, "
                                        r"got dict"):
        register({"name": "Parts"})
