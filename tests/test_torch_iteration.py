"""Handout: one iteration's hand-over of a counted pipeline."""

import gc

import pytest

pytest.importorskip("torch")
from dataecho import Echo, Source
from dataecho.torch.handout import Handout, Tally

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


def hand_out(tally: Tally, ended: list[Tally], failed: list[Exception],
             published: list[int] | None = None, check_empty: bool = False) -> Handout:
    def publisher(counts):
        if published is None:
            return None
        return lambda: published.append(counts()[1])
    return Handout(tally, publisher, ended.append, failed.append, check_empty)


@pytest.mark.parametrize("publish", [False, True])
def test_hands_over_every_item_counts_them_and_ends_once(publish):
    ended, failed, published = [], [], [] if publish else None
    tally = Tally(Echo(range(3), factor=2))
    iterator = iter(hand_out(tally, ended, failed, published))
    assert list(iterator) == [0, 0, 1, 1, 2, 2]
    assert tally.counts() == (3, 6) and ended == [tally] and not failed
    assert list(iterator) == [] and ended == [tally]  # a finished iteration stays finished
    if publish:  # after every example, and once more at the end
        assert published == [1, 2, 3, 4, 5, 6, 6]


@pytest.mark.parametrize("publish", [False, True])
def test_a_read_error_sticks_at_every_later_call_naming_the_first(publish):
    ended, failed = [], []
    iterator = iter(hand_out(Tally(Closing(5, fail_at=(2,))), ended, failed,
                             [] if publish else None))
    assert [next(iterator), next(iterator)] == [0, 1]
    with pytest.raises(OSError, match="transient read error at 2"):
        next(iterator)
    for _ in range(2):  # not a silent end of the epoch, though the source would go on
        with pytest.raises(RuntimeError, match=r"stopped at a read error \(OSError: "
                           "transient read error at 2\\)") as info:
            next(iterator)
        assert isinstance(info.value.__cause__, OSError)
    assert len(failed) == 1 and not ended


def test_dropping_an_iteration_leaves_the_pipeline_open_for_the_next():
    source = Closing(4)
    tally = Tally(source)
    iterator = iter(hand_out(tally, [], []))
    assert next(iterator) == 0
    del iterator
    gc.collect()
    assert source.closed == 0
    assert list(hand_out(tally, [], [])) == [1, 2, 3]  # the next iteration reads on


def test_an_empty_epoch_of_a_stream_is_an_error_once_it_ends():
    ended = []
    tally = Tally(Source([1], shuffle=False))
    next(tally)  # read before this iteration: nothing is left for it
    iterator = iter(hand_out(tally, ended, [], check_empty=True))
    assert list(iterator) == []  # not empty: the epoch handed over an item before
    empty = Tally(Echo(iter([]), factor=2))
    with pytest.raises(ValueError, match="yielded no examples in the training process"):
        next(iter(hand_out(empty, ended, [], check_empty=True)))


def test_renew_at_the_first_item_replaces_the_pipeline_or_hands_out_nothing():
    old, new = Tally(Source([1, 2], shuffle=False)), Tally(Source([7, 8], shuffle=False))
    asked = []

    def renew(tally):
        asked.append(tally)
        return new

    handout = Handout(old, lambda counts: None, lambda tally: None, print, False, renew)
    iterator = iter(handout)
    assert asked == []  # asked at the first item, not when the iteration begins
    assert list(iterator) == [7, 8] and asked == [old]
    idle = Handout(old, lambda counts: None, lambda tally: None, print, False,
                   lambda tally: None)
    assert list(idle) == [] and old.counts() == (0, 0)
