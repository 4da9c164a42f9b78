"""EchoNode in torchdata.nodes graphs, and NodeSource under the core stages."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torchdata.nodes")

from torchdata.nodes import Batcher, IterableWrapper, Loader, Mapper

import dataecho
from dataecho import Auto, NodeSource, as_stage
from dataecho.torch.nodes import EchoNode
from helpers.checkpoint import assert_restores_everywhere, same

pytestmark = pytest.mark.torch


class Steps:
    """A node seen as a checkpointable iterator, for the shared round-trip helper."""

    def __init__(self, node: Any) -> None:
        self.node = node

    def __iter__(self) -> Steps:
        return self

    def __next__(self) -> Any:
        return next(self.node)

    def state_dict(self) -> dict[str, Any]:
        return self.node.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.node.reset(state)

    def stats(self) -> Any:
        return self.node.stats()


def test_integer_factor_repeats_each_item():
    node = EchoNode(IterableWrapper(range(5)), 3)
    assert list(Loader(node)) == [i for i in range(5) for _ in range(3)]
    stats = node.stats()
    assert (stats.fresh_examples, stats.emitted_examples) == (5, 15)


def test_fractional_factor_with_shuffle_reads_every_item_once_per_epoch():
    node = EchoNode(IterableWrapper(range(200)), 1.5, buffer_size=16, seed=4)
    out = list(Loader(node))
    counts = Counter(out)
    assert set(counts) == set(range(200))
    assert set(counts.values()) <= {1, 2}
    assert out != sorted(out)  # the window spread the copies
    stats = node.stats()
    assert stats.fresh_examples == 200
    assert stats.emitted_examples == len(out)
    assert 1.35 < stats.realised_factor < 1.65


@pytest.mark.parametrize("factor, buffer_size", [(2, None), (1.5, None), (2.5, 4), (1, 3)])
def test_restores_before_every_item(factor, buffer_size):
    def make():
        return Steps(EchoNode(IterableWrapper(range(12)), factor, buffer_size=buffer_size,
                              seed=7))
    out = assert_restores_everywhere(make)
    assert Counter(out).keys() == set(range(12))


def test_batch_echoing_counts_examples_with_size_len():
    batches = Batcher(IterableWrapper(range(10)), batch_size=4, drop_last=False)
    node = EchoNode(batches, 2, size=len)
    out = list(Loader(node))
    assert out == [[0, 1, 2, 3]] * 2 + [[4, 5, 6, 7]] * 2 + [[8, 9]] * 2
    stats = node.stats()
    assert (stats.fresh_examples, stats.emitted_examples) == (10, 20)
    assert (stats.fresh_items, stats.emitted_items) == (3, 6)


def test_echo_before_augmentation_augments_each_copy():
    # A Mapper after the echo sees every copy separately: the paper's best variant.
    calls = []

    def augment(x: int) -> tuple[int, int]:
        calls.append(x)
        return x, len(calls)

    node = Mapper(EchoNode(IterableWrapper(range(3)), 2), augment)
    out = list(Loader(node))
    assert [x for x, _ in out] == [0, 0, 1, 1, 2, 2]
    assert len({call for _, call in out}) == 6  # each copy went through augment


def test_epochs_draw_differently_and_resume_through_the_loader():
    def make() -> tuple[EchoNode[int], Loader[int]]:
        node = EchoNode(IterableWrapper(range(40)), 1.5, buffer_size=8, seed=1)
        return node, Loader(node)

    node, loader = make()
    first, second = list(loader), list(loader)
    assert Counter(first).keys() == Counter(second).keys() == set(range(40))
    assert first != second  # each epoch derives its own seeds
    assert node.stats().fresh_examples == 80
    assert list(make()[1]) == first  # reruns are identical

    node, loader = make()
    list(loader)
    it = iter(loader)
    head = [next(it) for _ in range(11)]
    state = json.loads(json.dumps(loader.state_dict()))
    tail = list(it)
    assert head + tail == second

    node2, loader2 = make()
    loader2.load_state_dict(state)
    assert list(loader2) == tail
    assert node2.stats() == node.stats()


def test_auto_echoes_while_the_source_is_slow(no_thread_leak):
    def slow(x: int) -> int:
        time.sleep(0.01)
        return x

    node = EchoNode(Mapper(IterableWrapper(range(20)), slow), Auto(max_factor=3))
    out = []
    for x in Loader(node):
        time.sleep(0.002)  # a step 5x faster than the source
        out.append(x)
    assert set(out) == set(range(20))
    stats = node.stats()
    assert stats.fresh_examples == 20
    assert 20 < stats.emitted_examples <= 60
    node.close()


def test_auto_close_stops_the_thread_mid_epoch(no_thread_leak):
    node = EchoNode(IterableWrapper(range(1000)), "auto")
    it = iter(Loader(node))
    next(it)
    node.close()


def test_errors_name_the_parameter():
    with pytest.raises(TypeError, match=r"source must be a torchdata\.nodes\.BaseNode, got list"):
        EchoNode([1, 2], 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="factor"):
        EchoNode(IterableWrapper([1]), 0.5)
    with pytest.raises(ValueError, match="buffer_size"):
        EchoNode(IterableWrapper([1]), 2, buffer_size=0)
    with pytest.raises(TypeError, match=r"size must be callable as size\(item\)"):
        EchoNode(IterableWrapper([1]), 2, size="len")  # type: ignore[arg-type]
    node = EchoNode(IterableWrapper([1]), 2)
    with pytest.raises(TypeError, match="initial_state must be a dict returned by EchoNode"):
        node.reset([0])
    with pytest.raises(ValueError, match=r"initial_state lacks the keys done, stage, counts that "
                                         r"EchoNode.state_dict\(\) writes \(it has epoch\)"):
        node.reset({"epoch": 0})
    assert "factor=2.0" in repr(node)


def test_core_stages_read_a_node_and_restore_it():
    # Core stages over a torchdata node: the node's own checkpoint is used.
    assert isinstance(as_stage(IterableWrapper([1])), NodeSource)

    def make():
        node = Mapper(IterableWrapper(range(20)), lambda x: x * 10)
        echo = dataecho.Echo(node, 1.5, seed=2)
        return dataecho.Batch(dataecho.Shuffle(echo, 6, seed=3), 4)
    out = assert_restores_everywhere(make)
    flat = [x for batch in out for x in batch.tolist()]
    assert set(flat) == set(range(0, 200, 10))


def test_node_source_rejects_non_nodes():
    with pytest.raises(TypeError, match="node must have reset"):
        NodeSource([1, 2])
    assert same(list(NodeSource(IterableWrapper([3, 4]))), [3, 4])


def test_resumes_between_parallel_mappers():
    # The README's graph: threads read ahead on both sides of the echo node, and the
    # Loader's checkpoint still resumes exactly.
    from torchdata.nodes import ParallelMapper

    def make() -> tuple[EchoNode[int], Loader[Any]]:
        node = ParallelMapper(IterableWrapper(range(100)), map_fn=lambda x: x * 2,
                              num_workers=2)
        echo = EchoNode(node, factor=2, buffer_size=10, seed=0)
        node = ParallelMapper(echo, map_fn=lambda x: x + 1, num_workers=2)
        return echo, Loader(Batcher(node, batch_size=8))

    echo, loader = make()
    it = iter(loader)
    for _ in range(7):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    tail = list(it)
    echo2, loader2 = make()
    loader2.load_state_dict(state)
    assert list(loader2) == tail
    assert echo2.stats() == echo.stats()
    assert echo.stats().emitted_examples == 200


def test_auto_counts_one_example_per_item_by_default(no_thread_leak):
    # As with a fixed factor: an item is one example, not as many as its first
    # dimension (an image of 32 rows is one example).
    items = [{"image": np.zeros((32, 32, 3)), "label": i} for i in range(10)]
    for factor in (2, "auto"):
        node = EchoNode(IterableWrapper(items), factor)
        out = list(Loader(node))
        stats = node.stats()
        node.close()
        assert stats.fresh_examples == stats.fresh_items == 10, factor
        assert stats.emitted_examples == stats.emitted_items == len(out), factor
    batches = Batcher(IterableWrapper(range(10)), batch_size=4, drop_last=False)
    node = EchoNode(batches, "auto", size=len)
    list(Loader(node))
    node.close()
    assert node.stats().fresh_examples == 10 and node.stats().fresh_items == 3


def test_auto_carries_the_adaptive_parameters():
    assert EchoNode(IterableWrapper([1]), "auto").factor == Auto()
    assert Auto().cap(augmented=False) == 4  # a node's copies are identical items
    assert EchoNode(IterableWrapper([1]), Auto(max_factor=3)).factor.max_factor == 3


def test_counts_lead_by_at_most_the_window_mid_pass_and_are_exact_after_it():
    # docs/guides/counts.md: an EchoNode's counts lead what the loop took by at most its
    # buffer_size window (read a chunk at a time as items leave), never lag.
    node = EchoNode(IterableWrapper(range(300)), 2, buffer_size=40, seed=1)
    it, taken = iter(Loader(node)), 0
    for _ in range(450):
        next(it)
        taken += 1
        emitted = node.stats().emitted_examples
        assert taken <= emitted <= taken + 40
    taken += sum(1 for _ in it)
    stats = node.stats()
    assert (taken, stats.emitted_examples, stats.fresh_examples) == (600, 600, 300)
