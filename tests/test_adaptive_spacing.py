import collections
import time
import warnings

import pytest

from dataecho import AdaptiveEcho, Auto, Map, Source
from dataecho.adaptive.spacing import gap_for, items_left, warn_spacing
from helpers.sim import simulate

# Auto()'s spacing where it echoes single examples (EchoDataset, pipeline(batch_size=None)):
# a 1,024-example buffer, copies half of it (512 steps) apart, 8 uses at most.
AUTO = {"max_factor": Auto().cap(augmented=True), "buffer_size": Auto().buffer("examples"),
        "min_gap": Auto().buffer("examples") // 2}


def gaps(out):
    """Steps between two uses of one item, over a run's output."""
    last, found = {}, []
    for step, item in enumerate(out):
        if item in last:
            found.append(step - last[item])
        last[item] = step
    return found


def test_a_readers_part_smaller_than_the_spacing_is_echoed_with_copies_a_quarter_apart():
    # One of 2 workers' parts of 96 examples: 48, where copies 512 apart could never echo.
    part = Source(range(96), shard_index=1, num_shards=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # echoing, it has nothing to warn about
        stage, out = simulate(AdaptiveEcho, part, period=4, **AUTO)
    assert stage.stats().fresh_items == 48 and stage.stats().realised_factor > 2
    assert min(gaps(out)) >= 12  # spaced a quarter of the part apart
    assert max(collections.Counter(out).values()) <= AUTO["max_factor"]


def test_a_part_that_holds_the_spacing_keeps_it_and_runs_as_a_stream_of_it_does():
    data = list(range(2048))  # 4 * 512 items: the spacing fits, so nothing changes
    stage, out = simulate(AdaptiveEcho, Source(data, shuffle=False), period=8, **AUTO)
    _, streamed = simulate(AdaptiveEcho, data, period=8, **AUTO)
    assert out == streamed and min(gaps(out)) >= 512
    assert stage.stats().realised_factor > 1


def test_a_restored_pass_is_spaced_for_the_items_it_has_left():
    source = Source(range(2000))
    for _ in range(1960):  # 40 items left in the pass
        next(source)
    state = AdaptiveEcho(source, **AUTO).state_dict()

    def restored(**kwargs):
        stage = AdaptiveEcho(Source(range(2000)), **kwargs)
        stage.load_state_dict(state)
        return stage

    _, out = simulate(restored, period=8, **AUTO)
    assert len(set(out)) == 40 and len(out) > 80 and min(gaps(out)) >= 10


def test_a_short_late_stream_warns_at_its_end_naming_auto_buffer_size():
    with pytest.warns(UserWarning, match=r"echoed nothing in a pass of 48 items .* "
                                         r"min_gap=512 .*factor=dataecho\.Auto\("
                                         r"buffer_size=24\)"):
        stage, _ = simulate(AdaptiveEcho, range(48), period=4, **AUTO)  # length unknown
    assert stage.stats().realised_factor == 1.0


@pytest.mark.parametrize("period", [0.5, 1])
def test_a_short_stream_that_keeps_up_does_not_warn(period):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stage, _ = simulate(AdaptiveEcho, range(48), period=period, **AUTO)
    assert stage.stats().realised_factor == 1.0


def test_the_known_length_counts_the_items_left_through_maps_and_none_for_a_stream():
    source = Source(range(96), num_epochs=2, shard_index=0, num_shards=2)
    for _ in range(5):
        next(source)
    assert items_left(Map(Map(source, abs), abs)) == 2 * 48 - 5
    assert items_left(Source(range(96), num_epochs=None)) is None
    assert items_left(AdaptiveEcho(range(4))) is None


@pytest.mark.parametrize(("min_gap", "left", "gap"), [
    (512, 48, 12), (512, 2048, 512), (512, 2047, 511), (512, 1, 1), (512, None, 512),
    (0, 48, 0)])
def test_the_gap_is_min_gap_or_a_quarter_of_the_pass_if_that_is_shorter(min_gap, left, gap):
    assert gap_for(min_gap, left) == gap


@pytest.mark.parametrize(("gap", "fresh", "waits", "warned"), [
    (512, 48, 12, True), (512, 48, 11, False), (47, 48, 48, False), (0, 48, 48, False),
    (512, 1, 1, False)])
def test_the_warning_needs_a_pass_within_the_gap_that_was_late_at_a_quarter_of_its_steps(
        gap, fresh, waits, warned):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_spacing("AdaptiveEcho", gap, fresh, waits)
    assert len(caught) == warned


# --- in DataLoader workers ----------------------------------------------------------------


class _SlowReads:
    """A map-style data set whose reads take ``delay`` seconds: the workers are late."""

    def __init__(self, n, delay):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay)
        return i


@pytest.mark.torch
def test_auto_echoes_96_examples_read_slowly_in_two_dataloader_workers():
    # Issue 31: copies 512 apart in a worker holding 48 examples gave factor 1.000.
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from dataecho.torch import EchoDataset

    ds = EchoDataset(_SlowReads(96, 0.008), factor=Auto(), seed=0)
    rows = [i for batch in DataLoader(ds, batch_size=8, num_workers=2) for i in batch.tolist()]
    stats = ds.stats()
    assert stats.fresh_examples == 96 and set(rows) == set(range(96))
    # Measured 4.9 (reads 10 ms); reads 80x slower than a step leave a wide margin.
    assert stats.realised_factor > 1.5


def _warnings_as_errors(worker_id):
    warnings.simplefilter("error")


@pytest.mark.torch
def test_auto_on_a_short_stream_in_dataloader_workers_warns_at_the_epochs_end():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, IterableDataset

    from dataecho.torch import EchoDataset, Streamed

    class Slow(IterableDataset):
        def __iter__(self):
            for i in range(96):
                time.sleep(0.008)
                yield torch.tensor(i)

    ds = EchoDataset(Slow(), factor=Auto(), seed=0, read=Streamed(split="dataecho"))
    # The length of a stream is unknown, so no echo; each worker warns at its part's end
    # (an error here, so that it reaches the test from the worker).
    loader = DataLoader(ds, batch_size=8, num_workers=2, worker_init_fn=_warnings_as_errors)
    with pytest.raises(UserWarning, match=r"pass of 48 items .*Auto\(buffer_size=24\)"):
        for _ in loader:
            pass
    assert ds.stats().realised_factor == 1.0
