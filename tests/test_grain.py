"""dataecho.grain: echoing a grain.IterDataset, its counts and its checkpoints."""

import json
import pathlib
import pickle
import re
import subprocess
import sys
from itertools import groupby

import numpy as np
import pytest

grain = pytest.importorskip("grain", reason="dataecho.grain needs grain (dataecho[grain])")
from absl import flags

from dataecho import Auto, Echo
from dataecho.echo import copies_at, total_copies
from dataecho.grain import EchoIterDataset, stats
from helpers.checkpoint import assert_restores_everywhere

# mp_prefetch reads absl flags, which an absl app would have parsed at start-up.
if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


def workers(n):
    return grain.MultiprocessingOptions(num_workers=n)


def runs(values):
    """(value, copies) for each run of equal adjacent values."""
    return [(k, len(list(g))) for k, g in groupby(values)]


def add_noise(x, rng):
    return float(x) + rng.random()


class Checkpointed:
    """A Grain iterator under the stage protocol that the checkpoint helper drives."""

    def __init__(self, ds):
        self.it = iter(ds)

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self.it)
        except StopIteration:
            self.it.close()  # stops mp_prefetch's worker processes now, not at exit
            raise

    def state_dict(self):
        return self.it.get_state()

    def load_state_dict(self, state):
        self.it.set_state(state)

    def stats(self):
        return stats(self.it)


def test_integer_factor_yields_every_element_factor_times_in_a_row():
    ds = grain.MapDataset.range(50).to_iter_dataset().pipe(EchoIterDataset, factor=3)
    it = iter(ds)
    assert runs(list(it)) == [(i, 3) for i in range(50)]
    assert (it.stats().fresh_examples, it.stats().emitted_examples) == (50, 150)


def test_fractional_factor_makes_echos_copies_within_one_percent_over_100k():
    n, factor, seed = 100_000, 2.3, 7
    it = iter(grain.MapDataset.range(n).to_iter_dataset()
              .pipe(EchoIterDataset, factor=factor, seed=seed))
    copies = [c for _, c in runs(list(it))]
    assert copies == copies_at(factor, seed, np.arange(n)).tolist()
    assert copies == [c for _, c in runs(Echo(range(n), factor, seed=seed))]
    assert abs(sum(copies) / n - factor) < 0.01 * factor
    assert it.stats().emitted_examples == total_copies(factor, seed, n)


def test_random_map_after_the_echo_augments_each_copy_differently():
    ds = (grain.MapDataset.range(20).to_iter_dataset()
          .pipe(EchoIterDataset, factor=2).random_map(add_noise, seed=1))
    out = list(ds)
    for a, b in zip(out[::2], out[1::2], strict=True):
        assert int(a) == int(b) and a != b


def test_random_map_before_the_echo_repeats_one_augmentation():
    ds = (grain.MapDataset.range(20).to_iter_dataset().random_map(add_noise, seed=1)
          .pipe(EchoIterDataset, factor=2))
    out = list(ds)
    assert out[::2] == out[1::2] and len(set(out)) == 20


@pytest.mark.parametrize("factor", [1, 2, 2.5])
def test_restore_before_every_element_resumes_exactly(factor):
    def make():
        return Checkpointed(
            grain.MapDataset.range(12).to_iter_dataset()
            .pipe(EchoIterDataset, factor=factor, seed=3).random_map(add_noise, seed=1)
            .pipe(grain.experimental.WindowShuffleIterDataset, window_size=4, seed=2))
    out = assert_restores_everywhere(make)
    assert len(out) == total_copies(factor, 3, 12)


def test_restore_mid_echo_of_batches_yields_the_remaining_copies():
    def make():
        return Checkpointed(grain.MapDataset.range(10).to_iter_dataset().batch(4)
                            .pipe(EchoIterDataset, factor=1.5, seed=0))
    out = assert_restores_everywhere(make)
    assert len(out) == total_copies(1.5, 0, 3)


def test_state_is_the_parent_before_the_element_plus_the_copy_index():
    it = iter(grain.MapDataset.range(5).to_iter_dataset().pipe(EchoIterDataset, factor=3))
    next(it), next(it)
    assert it.get_state() == {"stage": "EchoIterDataset",
                              "config": {"factor": 3.0, "seed": 0},
                              "parent": {"next_index": 0}, "next_index_in_buffer": 2,
                              "fresh_items": 1, "emitted_items": 2,
                              "live": {"fresh_items": 1, "emitted_items": 2}}
    next(it)
    assert it.get_state()["parent"] == {"next_index": 1}
    assert it.get_state()["next_index_in_buffer"] == 0


def test_restore_under_mp_prefetch_resumes_exactly():
    # Two elements, one per worker; with seed 0 the first gets one copy and the second
    # two, so a restore mid-echo in worker 1 needs the draw keyed by the worker.
    assert copies_at(1.5, 0, np.arange(2)).tolist() == [1, 2]

    def make():
        return Checkpointed(
            grain.MapDataset.range(2).to_iter_dataset()
            .pipe(EchoIterDataset, factor=1.5, seed=0).random_map(add_noise, seed=1)
            .mp_prefetch(workers(2)))
    out = assert_restores_everywhere(make)
    assert sorted(int(x) for x in out) == [0, 1, 1]


def test_under_mp_prefetch_copies_and_summed_counts_match_one_process():
    n, factor, seed = 40, 1.5, 5
    it = iter(grain.MapDataset.range(n).to_iter_dataset()
              .pipe(EchoIterDataset, factor=factor, seed=seed).mp_prefetch(workers(2)))
    out = list(it)
    counts = stats(it)
    it.close()
    # The workers interleave their elements; each worker's copies stay together.
    copies = np.bincount(np.asarray(out), minlength=n)
    assert copies.tolist() == copies_at(factor, seed, np.arange(n)).tolist()
    assert (counts.fresh_examples, counts.emitted_examples) == (n, len(out))


def test_stats_mid_run_under_mp_prefetch_lead_what_was_consumed_by_a_buffer_a_worker():
    # 3 batches of 4 taken: 12 copies of 6 examples; each of the 2 workers may have
    # made its next batch (per_worker_buffer_size 1) by the time its state left it.
    it = iter(grain.MapDataset.range(40).to_iter_dataset()
              .pipe(EchoIterDataset, factor=2).batch(4).mp_prefetch(workers(2)))
    for _ in range(3):
        next(it)
    counts = stats(it)
    it.close()
    assert 12 <= counts.emitted_examples <= 12 + 2 * 4
    assert counts.emitted_examples == 2 * counts.fresh_examples


def test_per_host_slices_each_echo_their_own_examples_in_equal_numbers():
    base = grain.MapDataset.range(40)
    outs = [list(base[host::2].to_iter_dataset().pipe(EchoIterDataset, factor=1.5, seed=0))
            for host in range(2)]
    assert set(outs[0]) == set(range(0, 40, 2)) and set(outs[1]) == set(range(1, 40, 2))
    assert len(outs[0]) == len(outs[1]) == total_copies(1.5, 0, 20)


def test_stats_sums_a_state_dict_and_takes_fresh_from_the_first_of_two_echoes():
    it = iter(grain.MapDataset.range(8).to_iter_dataset().pipe(EchoIterDataset, factor=2)
              .batch(4).pipe(EchoIterDataset, factor=3))
    out = list(it)
    assert len(out) == 12
    counts = stats(it.get_state())
    assert (counts.fresh_examples, counts.emitted_examples) == (8, 12)


def test_str_shows_the_parameters():
    ds = grain.MapDataset.range(3).to_iter_dataset().pipe(EchoIterDataset, factor=2.5, seed=4)
    assert str(ds) == "EchoIterDataset(factor=2.5, seed=4)"


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"factor": "two"}, TypeError, "factor must be a real number >= 1"),
    ({"factor": None}, TypeError, "factor must be a real number >= 1"),
    ({"factor": 0.5}, ValueError, "factor must be >= 1"),
    ({"factor": float("nan")}, ValueError, "factor must be finite"),
    ({"factor": 2, "seed": -1}, ValueError, "seed must be an int in [0, 2**63), got -1"),
    ({"factor": 2, "seed": 2**63}, ValueError, "seed must be an int in [0, 2**63)"),
    ({"factor": 2, "seed": 1.5}, TypeError, "seed must be an int in [0, 2**63)"),
    ({"factor": "auto"}, TypeError, "a Grain pipeline is deterministic"),
    ({"factor": Auto()}, TypeError, "adaptive echoing decides from timing"),
])
def test_bad_arguments_get_clear_errors(kwargs, error, words):
    with pytest.raises(error) as caught:
        EchoIterDataset(grain.MapDataset.range(3).to_iter_dataset(), **kwargs)
    assert words in str(caught.value)


def test_a_map_dataset_parent_is_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"call \.to_iter_dataset\(\) first"):
        EchoIterDataset(grain.MapDataset.range(3), factor=2)


def test_a_parent_of_the_wrong_kind_is_refused():
    with pytest.raises(TypeError, match=r"parent must be a grain\.IterDataset, got list"):
        EchoIterDataset([1, 2, 3], factor=2)


def test_stats_of_a_pipeline_without_an_echo_says_so():
    it = iter(grain.MapDataset.range(3).to_iter_dataset())
    with pytest.raises(ValueError, match="holds no EchoIterDataset"):
        stats(it)


def _state_after(n, factor=4, seed=0):
    it = iter(grain.MapDataset.range(5).to_iter_dataset()
              .pipe(EchoIterDataset, factor=factor, seed=seed))
    for _ in range(n):
        next(it)
    return it.get_state()


@pytest.mark.parametrize("kwargs", [{"factor": 2}, {"factor": 4, "seed": 1}])
def test_a_state_taken_with_another_factor_or_seed_is_refused_not_replayed(kwargs):
    state = _state_after(4)  # three copies of 0 emitted: more than factor 2 makes
    it = iter(grain.MapDataset.range(5).to_iter_dataset().pipe(EchoIterDataset, **kwargs))
    with pytest.raises(ValueError, match=r"state of EchoIterDataset was taken with \{'factor': "
                                         r"4\.0, 'seed': 0\}, but this one has .*rebuild it "
                                         r"with the saved factor and seed"):
        it.set_state(state)


@pytest.mark.parametrize(("key", "value", "error", "message"), [
    ("next_index_in_buffer", 4, ValueError,
     r"next_index_in_buffer=4, but it must be an int in \[0, 3\] \(copies already emitted "
     r"of the element in progress, fewer than the 4 it gets\)"),
    ("emitted_items", 99, ValueError,
     r"emitted_items=99, but it must be an int in \[6, 6\] \(copies emitted of 2 elements"),
    ("fresh_items", -1, ValueError, r"fresh_items=-1, but it must be an int >= 0"),
    ("fresh_items", "2", TypeError, r"fresh_items='2' of type str, but it must be an int"),
    ("parent", [0], TypeError, r"parent=\[0\] of type list, but it must be a dict"),
    ("config", None, ValueError, r"lacks the key 'config'"),
])
def test_a_damaged_state_is_refused_naming_the_key_the_value_and_the_rule(
        key, value, error, message):
    state = _state_after(6)  # 0 four times, then two copies of 1
    if value is None:
        del state[key]
    else:
        state[key] = value
    it = iter(grain.MapDataset.range(5).to_iter_dataset().pipe(EchoIterDataset, factor=4))
    with pytest.raises(error, match=r"state of EchoIterDataset (has )?" + message):
        it.set_state(state)


# Counts: exact after a full pass, mid-pass ahead by at most what follows the echo.


def _shuffled(n, window, batch, num_workers):
    return (grain.MapDataset.range(n).to_iter_dataset()
            .pipe(EchoIterDataset, factor=2, seed=0)
            .pipe(grain.experimental.WindowShuffleIterDataset, window_size=window, seed=1)
            .batch(batch).mp_prefetch(workers(num_workers)))


def test_stats_after_a_full_pass_behind_a_window_shuffle_are_the_exact_totals():
    # Fails on the code before this test: 1,000 examples, window 512, 2 workers gave
    # fresh 512 and emitted 1,024, the counts from the start of each worker's last window.
    it = iter(_shuffled(1000, 512, 128, 2))
    taken = sum(len(b) for b in it)
    counts = stats(it)
    it.close()
    assert taken == 2000
    assert (counts.fresh_examples, counts.emitted_examples) == (1000, 2000)


def _dropping(n, num_workers):
    ds = (grain.MapDataset.range(n).to_iter_dataset().pipe(EchoIterDataset, factor=2)
          .random_map(add_noise, seed=1).batch(8, drop_remainder=True))
    return ds.mp_prefetch(workers(num_workers)) if num_workers else ds


def test_stats_after_a_full_pass_with_drop_remainder_count_the_dropped_copies():
    it = iter(_dropping(44, 0))  # 88 copies: 11 batches of 8, none dropped
    taken = sum(len(b) for b in it)
    assert (taken, str(stats(it))) == (88, "fresh 44 examples, emitted 88 (factor 2.000)")
    it = iter(_dropping(46, 0))  # 92 copies: 11 batches, 4 copies of 2 examples dropped
    taken = sum(len(b) for b in it)
    assert (taken, str(stats(it))) == (88, "fresh 46 examples, emitted 92 (factor 2.000)")


def test_stats_after_a_full_pass_under_mp_prefetch_count_the_batches_handed_out():
    # Each of the 2 workers echoes 22 examples into 44 copies, hands out 5 batches of 8
    # and drops 4 copies of 2 examples, after its last state left it. The code before
    # this test put the echo's running counts in that state, which the worker's queue
    # pickles in a thread while the worker reads on: fresh 40 to 44, emitted 80 to 88,
    # by timing (the Grain page's example printed 11,922 and 23,842 for 11,904, 23,808).
    for _ in range(3):
        it = iter(_dropping(44, 2))
        taken = sum(len(b) for b in it)
        counts = stats(it)
        it.close()
        assert (taken, str(counts)) == (80, "fresh 40 examples, emitted 80 (factor 2.000)")


def test_stats_mid_pass_lead_the_copies_taken_by_at_most_a_window_and_a_buffer_a_worker():
    window, batch, num_workers, buffer = 64, 8, 2, 1  # per_worker_buffer_size: 1
    it = iter(_shuffled(400, window, batch, num_workers))
    taken = 0
    for _ in range(30):
        taken += len(next(it))
        emitted = stats(it).emitted_examples
        assert taken <= emitted <= taken + num_workers * (window + buffer * batch)
    it.close()


def test_the_live_counts_are_plain_numbers_in_a_pickled_or_json_state():
    it = iter(grain.MapDataset.range(5).to_iter_dataset().pipe(EchoIterDataset, factor=2))
    next(it)
    state = it.get_state()
    for copy in (pickle.loads(pickle.dumps(state)), json.loads(json.dumps(state))):
        assert type(copy["live"]) is dict
        assert copy["live"] == {"fresh_items": 1, "emitted_items": 1}
    restored = iter(grain.MapDataset.range(5).to_iter_dataset()
                    .pipe(EchoIterDataset, factor=2))
    restored.set_state(json.loads(json.dumps(state)))
    assert list(restored) == [0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert restored.get_state()["live"] == {"fresh_items": 5, "emitted_items": 10}


def test_the_pages_first_block_prints_the_exact_totals_and_exits_without_warnings(tmp_path):
    # Fails on the code before this test: fresh 512, emitted 1,024, then a
    # SharedMemoryArray.__del__ traceback and "2 leaked shared_memory objects".
    page = pathlib.Path(__file__).parents[1] / "docs" / "integrations" / "grain.md"
    block = re.search(r"```python\n(.*?)```", page.read_text(), re.S).group(1)
    script = tmp_path / "block.py"
    script.write_text(block)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "fresh 1,000 examples, emitted 2,000 (factor 2.000)"
    assert "Traceback" not in done.stderr and "leaked" not in done.stderr, done.stderr
