"""Iteration: one iteration of an EchoDataset's epoch loop, handed over and counted."""

import gc

import pytest

pytest.importorskip("torch")
from dataecho import Echo, Source
from dataecho.loop import Epochs
from dataecho.torch.iteration import Iteration, Tally
from dataecho.torch.ranks import Part
from dataecho.torch.workers import EpochCounter, SharedCounts

pytestmark = pytest.mark.torch


class Closing(Source[int]):
    """A source that records being closed and fails once at the listed positions."""

    def __init__(self, size: int, fail_at: tuple[int, ...] = ()) -> None:
        super().__init__(list(range(size)), shuffle=False)
        self.closed, self.fail_at = 0, set(fail_at)

    def __next__(self) -> int:
        if self._index in self.fail_at:
            self.fail_at.discard(self._index)
            raise OSError(f"transient read error at {self._index}")
        return super().__next__()

    def close(self) -> None:
        self.closed += 1


def iteration(stage, *, stream=False, part=None, counts=None):
    """An epoch loop over ``stage`` (its one epoch) and the iteration that reads it."""
    loop = Epochs(lambda epoch: Tally(stage), EpochCounter(), mark_end=True)
    return loop, Iteration([], loop, part or Part(None, None), counts or SharedCounts(),
                           EpochCounter(), None, stream=stream)


def test_hands_over_every_item_counts_them_and_ends_the_epoch_once():
    counts = SharedCounts()
    loop, it = iteration(Echo(range(3), factor=2), counts=counts)
    iterator, seen = iter(it), []
    for item in iterator:
        seen.append((item, counts.total()))  # the training process reads them when asked
    assert [item for item, _ in seen] == [0, 0, 1, 1, 2, 2]
    assert [emitted for _, (_, emitted) in seen] == [1, 2, 3, 4, 5, 6]
    assert loop.ended and loop.stats().emitted_examples == 6 and it.failed is None
    assert list(iterator) == []  # a finished iteration stays finished


def test_a_read_error_sticks_at_every_later_call_naming_the_first_and_the_epoch():
    loop, it = iteration(Closing(5, fail_at=(2,)))
    iterator = iter(it)
    assert [next(iterator), next(iterator)] == [0, 1]
    with pytest.raises(OSError, match="transient read error at 2"):
        next(iterator)
    for _ in range(2):  # not a silent end of the epoch, though the source would go on
        with pytest.raises(RuntimeError, match=r"stopped at a read error \(OSError: "
                           r"transient read error at 2\).*rest of epoch 0.*set_epoch\(0\)"
                           ) as info:
            next(iterator)
        assert isinstance(info.value.__cause__, OSError)
    assert isinstance(it.failed, OSError) and not loop.ended


def test_dropping_an_iteration_leaves_the_pipeline_open_and_its_position_in_the_state():
    source = Closing(4)
    loop, it = iteration(source)
    iterator = iter(it)
    assert next(iterator) == 0
    del iterator
    gc.collect()
    assert source.closed == 0 and loop.stage is not None
    assert loop.state_dict()["stage"]["yields"] == 1  # a checkpoint still says where


def test_an_empty_pass_of_a_stream_is_an_error_naming_where():
    _, it = iteration(Echo(iter([]), factor=2), stream=True)
    with pytest.raises(ValueError, match="yielded no examples in the training process"):
        list(it)
    _, it = iteration(Echo(iter([]), factor=2))  # a map-style data set's part may be empty
    assert list(it) == []


def test_a_process_that_reads_nothing_does_not_start_an_epoch():
    part = Part(None, None)
    part.idle = True  # as a spawned worker of a process accelerate's dispatcher skips
    loop, it = iteration(Closing(3), part=part)
    assert list(it) == [] and loop.stage is None and loop.stats().emitted_examples == 0
