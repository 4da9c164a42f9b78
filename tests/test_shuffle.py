import collections
import json

import numpy as np
import pytest

from dataecho import Batch, Echo, Shuffle, Source, pipeline
from dataecho.shuffle import CHUNK, MAX_WINDOW, window_of
from helpers.checkpoint import Flaky, assert_restores_everywhere, drain_retrying


def test_shuffle_preserves_the_multiset_of_echoed_items():
    out = list(Shuffle(Echo(range(100), 3), buffer_size=37, seed=1))
    assert collections.Counter(out) == {i: 3 for i in range(100)}
    assert out != sorted(out)


def test_buffer_size_one_keeps_copies_adjacent():
    assert list(Shuffle(Echo(range(5), 2), buffer_size=1)) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def _repeats_per_batch(batches):
    return sum(len(b) - len(set(b)) for b in batches)


def test_large_buffer_spreads_copies_to_chance_level_while_no_buffer_packs_them():
    n, factor, batch, window = 20_000, 2, 64, 6_400
    spread = list(Batch(Shuffle(Echo(range(n), factor), window, seed=0), batch, collate=list))
    packed = list(Batch(Echo(range(n), factor), batch, collate=list))
    # Without a shuffle every batch holds batch/2 pairs of copies.
    assert _repeats_per_batch(packed) == n * (factor - 1)
    # A copy lands in its partner's batch with probability ~ (batch - 1) / (window - 1).
    expected = n * (factor - 1) * (batch - 1) / (window - 1)
    observed = _repeats_per_batch(spread)
    assert observed < 1.5 * expected + 3 * np.sqrt(expected)
    assert observed > 0.5 * expected - 3 * np.sqrt(expected)


def test_window_order_depends_on_seed_and_is_reproducible():
    a = list(Shuffle(range(50), 50, seed=3))
    assert a == list(Shuffle(range(50), 50, seed=3))
    assert a != list(Shuffle(range(50), 50, seed=4))


@pytest.mark.parametrize("buffer_size", [1, 3, 7, 100])
def test_restore_at_every_step_including_mid_window(buffer_size):
    assert_restores_everywhere(
        lambda: Shuffle(Echo(Source(range(12), seed=2, num_epochs=2), 2.5), buffer_size, seed=9)
    )


def test_state_holds_the_window_start_not_the_elements():
    stage = Shuffle(Source([np.zeros(10_000)] * 20), 10)
    next(stage)
    state = stage.state_dict()
    assert state["skip"] == 1 and state["upstream"]["index"] == 0
    assert len(json.dumps(state)) < 1000


def test_partial_last_window_is_emitted():
    assert sorted(Shuffle(range(10), 4)) == list(range(10))


def test_upstream_error_mid_window_keeps_the_items_read_and_resumes_the_window():
    out, _ = drain_retrying(Shuffle(Flaky(10, fail_at=6), 4, seed=5))
    assert out == list(Shuffle(range(10), 4, seed=5))


def test_checkpoint_after_an_upstream_error_rereads_the_windows_it_holds():
    # Item 6 belongs to window 1, read (one item as each leaves, for a window of 4)
    # while window 0 goes out: the error comes after three of window 0's items, with
    # items 4 and 5 read; the state rebuilds window 0, skips three and reads two again.
    reference = list(Shuffle(range(10), 4, seed=5))
    _, state = drain_retrying(Shuffle(Flaky(10, fail_at=6), 4, seed=5))
    assert state["upstream"]["consumed"] == 0
    assert (state["window"], state["skip"], state["ahead"]) == (0, 3, 2)
    restored = Shuffle(list(range(10)), 4, seed=5)
    restored.load_state_dict(state)
    assert list(restored) == reference[3:]


class Counting:
    """An upstream that records, at each read, how many items the stage has handed out."""

    def __init__(self, n):
        self.n, self.out, self.at = n, [0], []

    def __iter__(self):
        for i in range(self.n):
            self.at.append(self.out[0])
            yield i


def test_the_next_window_is_read_a_chunk_at_a_time_as_items_leave_not_all_at_once():
    # A windowed shuffle that refilled at once would read 100 items while handing out
    # none, every 100 items: a stream's link would idle during the drain and the
    # trainer wait for the refill. It reads CHUNK items whenever CHUNK have left.
    upstream = Counting(1000)
    stage = Shuffle(upstream, 100, seed=0)
    out = []
    for item in stage:
        out.append(item)
        upstream.out[0] = len(out)
    assert sorted(out) == list(range(1000))
    assert out == list(Shuffle(range(1000), 100, seed=0))
    ahead = [read - handed for read, handed in enumerate(upstream.at)]
    chunk = min(CHUNK, 100 // 4)
    assert ahead[:100] == list(range(100))  # the first window, before anything leaves
    # Then within a window ahead (never more held than a window), a chunk behind.
    assert min(ahead[100:]) >= 100 - chunk and max(ahead[100:]) < 100
    assert max(collections.Counter(upstream.at[100:]).values()) <= chunk


def test_upstream_error_while_restoring_mid_window_still_skips_what_was_emitted():
    reference = list(Shuffle(range(10), 4, seed=5))
    source = Shuffle(range(10), 4, seed=5)
    for _ in range(6):
        next(source)
    state = json.loads(json.dumps(source.state_dict()))
    restored = Shuffle(Flaky(10, fail_at=6), 4, seed=5)
    with pytest.raises(OSError):
        restored.load_state_dict(state)  # re-reading window 1 (items 4-7) hits the error
    assert restored.state_dict()["skip"] == 2
    assert list(restored) == reference[6:]


def test_a_huge_factor_keeps_the_default_window_bounded_so_the_first_batch_comes_at_once():
    assert window_of(1280, 1e9) == MAX_WINDOW == 2**16
    pipe = pipeline(list(range(5)), factor=1e9, batch_size=2, collate=list)
    assert repr(pipe).count(f"buffer_size={MAX_WINDOW}") == 1
    assert next(pipe) == [0, 0]  # within the first window: 65,536 copies of item 0


@pytest.mark.parametrize(("key", "value", "message"), [
    ("window", 2**63, r"state of Shuffle has window=9223372036854775808, but it must be an "
                      r"int in \[0, 9223372036854775807\] \(windows read so far"),
    ("skip", 4, r"state of Shuffle has skip=4, but it must be an int in \[0, 3\] \(items of "
                r"the window already emitted, fewer than buffer_size=4\)"),
])
def test_a_state_beyond_what_the_shuffle_can_reach_is_refused_naming_key_value_and_rule(
        key, value, message):
    stage = Shuffle(range(10), 4)
    next(stage)
    state = {**stage.state_dict(), key: value}
    with pytest.raises(ValueError, match=message):
        Shuffle(range(10), 4).load_state_dict(state)


def _copies_out(stage, copy_of, limit=None):
    out = []
    for item in stage:
        out.append((item, *copy_of()))
        if limit is not None and len(out) == limit:
            break
    return out


@pytest.mark.parametrize("factor", [2, 1.5, 3])
def test_the_first_copy_out_of_each_example_is_marked_once_also_after_a_restore(factor):
    def make():
        stage = Shuffle(Echo(range(40), factor=factor, seed=2), 7, seed=3)
        return stage, stage.copies_of()

    stage, copy_of = make()
    full = _copies_out(stage, copy_of)
    firsts, seen = [], set()
    for item, _, _ in full:
        firsts.append(item not in seen)
        seen.add(item)
    # The first copy out of each example, by its number, exactly once each.
    assert [first for _, _, first in full] == firsts
    assert sorted(e for _, e, first in full if first) == list(range(1, 41))
    for k in range(len(full)):
        head, probe = make()
        _copies_out(head, probe, limit=k) if k else None
        state = json.loads(json.dumps(head.state_dict()))
        again, probe = make()
        again.load_state_dict(state)
        assert _copies_out(again, probe) == full[k:], f"restored at {k}"


def test_a_shuffle_over_a_stage_that_cannot_tell_copies_cannot_either():
    assert Shuffle(Source(range(5)), 3).copies_of() is None
