"""Epochs, the one epoch loop: its epoch source and the position of an ended epoch."""

import json

import pytest

from dataecho import Echo, EchoStats, Source
from dataecho.loop import ENDED, Epochs, LocalCounter


def build(epoch):
    return Echo(Source(range(5), epoch=epoch), factor=2)


def read(loop):
    stage = loop.start()
    items = list(stage)
    loop.end()
    return items


def test_without_mark_end_an_ended_epoch_moves_to_the_next_from_its_start():
    loop = Epochs(build)
    read(loop)
    state = loop.state_dict()
    assert (state["epoch"], state["stage"], loop.epoch, loop.ended) == (1, None, 1, False)
    assert state["done"]["fresh_examples"] == 5


def test_with_mark_end_the_state_after_an_epochs_end_names_it_ended():
    loop = Epochs(build, mark_end=True)
    first = read(loop)
    state = json.loads(json.dumps(loop.state_dict()))
    assert (state["epoch"], state["stage"], loop.ended) == (0, ENDED, True)
    second = read(loop)  # the next start reads the next epoch
    assert loop.epoch == 1 and second != first
    restored = Epochs(build, mark_end=True)
    restored.load_state_dict(state)
    assert restored.pending and restored.state_dict() == state
    assert list(restored.start()) == [] and restored.ended  # nothing left of epoch 0
    assert restored.state_dict()["stage"] == ENDED
    assert read(restored) == second
    assert restored.stats() == loop.stats() == EchoStats(10, 20, 10, 20, None)


def test_with_mark_end_set_epoch_restarts_even_the_same_epoch():
    loop = Epochs(build, mark_end=True)
    first = read(loop)
    loop.set_epoch(0)  # the caller asks for epoch 0 again: it is read from its start
    assert loop.state_dict()["stage"] is None and loop.epoch == 0
    assert read(loop) == first
    restored = Epochs(build, mark_end=True)
    restored.load_state_dict(Epochs(build, mark_end=True).state_dict() | {"stage": ENDED})
    restored.set_epoch(0)  # a loaded state of this epoch is kept
    assert restored.pending and list(restored.start()) == []


def test_an_abandoned_iteration_reads_its_epoch_again_and_is_counted():
    loop = Epochs(build)
    stage = loop.start()
    next(stage)
    assert loop.start() is not stage and loop.epoch == 0
    assert loop.stats().fresh_examples == 1


class Shared:
    """An epoch source that advances when an epoch begins (as EchoDataset's does)."""

    def __init__(self):
        self.value, self.calls = 0, []

    def next(self):
        return self.value

    def set(self, epoch):
        self.calls.append(("set", epoch))
        self.value = epoch

    def begin(self, resume=None):
        epoch = self.value if resume is None else resume
        self.value = epoch + 1
        return epoch

    def ended(self, epoch):
        self.calls.append(("ended", epoch))


def test_a_given_epoch_source_decides_which_epoch_each_start_reads():
    counter = Shared()
    loop = Epochs(build, counter, mark_end=True)
    stage = loop.start()  # left before its end: the next start still reads epoch 1
    next(stage)
    assert loop.epoch == 0 and counter.next() == 1
    read(loop)
    assert loop.epoch == 1 and counter.calls == [("ended", 1)]
    state = loop.state_dict()
    restored = Epochs(build, Shared(), mark_end=True)
    restored.load_state_dict(state)
    assert list(restored.start()) == [] and restored.epoch == 1  # resume wins
    assert restored.start() is not None and restored.epoch == 2


def test_local_counter_repeats_an_epoch_until_it_ended():
    counter = LocalCounter()
    assert (counter.begin(), counter.begin()) == (0, 0)
    counter.ended(0)
    assert counter.next() == 1 and counter.begin(resume=4) == 4 and counter.next() == 4


def test_bad_arguments_and_a_damaged_stage_are_refused_naming_them():
    with pytest.raises(TypeError, match=r"^build must be callable as build\(epoch\)"):
        Epochs(3)
    with pytest.raises(TypeError, match=r"^counter must have the EpochSource methods .*got "
                                        r"Half without begin"):
        class Half(LocalCounter):
            begin = None

        Epochs(build, Half())
    with pytest.raises(TypeError, match=r"^mark_end must be"):
        Epochs(build, mark_end="yes")
    state = Epochs(build).state_dict() | {"stage": "half"}
    with pytest.raises(ValueError, match=r"state of Epochs has stage='half', but it must be "
                                         r"None \(the epoch's start\), 'ended'"):
        Epochs(build).load_state_dict(state)


def test_a_state_whose_counts_disagree_with_its_stage_is_refused():
    # Fails on the code before this test: the counts were reported as loaded, whatever
    # the stage's own counters said.
    from dataecho import Echo

    loop = Epochs(lambda epoch: Echo(range(6), factor=2, seed=epoch))
    stage = loop.start()
    for _ in range(3):
        next(stage)
    state = json.loads(json.dumps(loop.state_dict()))
    state["counts"]["fresh_examples"] += 1  # within every range: caught at the start
    again = Epochs(lambda epoch: Echo(range(6), factor=2, seed=epoch))
    again.load_state_dict(state, "EchoBatches")
    with pytest.raises(ValueError, match=r"state of EchoBatches has counts=\{'fresh_examples': "
                                         r"3, .* but its stage's counters make "
                                         r"\{'fresh_examples': 2"):
        again.start()


def test_a_pickled_copy_leaves_the_live_stage_and_counts_what_it_read_as_done():
    import pickle

    loop = Epochs(build)
    stage = loop.start()
    stage.copies_of()  # a live stage may hold what pickle cannot take: not copied
    _ = [next(stage) for _ in range(3)]
    copy = pickle.loads(pickle.dumps(loop))
    assert copy.stage is None and copy.stats() == loop.stats()
    assert loop.stage is stage  # the original goes on reading
    # The copy's next start reads what the original's would: here the abandoned epoch.
    assert list(copy.start()) == list(loop.start()) == list(build(0))
    assert copy.stats() == loop.stats()
