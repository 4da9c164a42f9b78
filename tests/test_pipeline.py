import collections

import numpy as np
import pytest

import dataecho
from dataecho import Auto, Batch, Echo, Map, Shuffle, Source
from helpers.checkpoint import assert_restores_everywhere

DATA = np.arange(60, dtype=np.int64)


def augment(x, rng):
    return int(x) * 1000 + int(rng.integers(0, 1000))


def _stages(stage):
    names = []
    while stage is not None:
        names.append(type(stage).__name__)
        stage = stage.upstream
    return names[::-1]


@pytest.mark.parametrize(
    ("variant", "stages"),
    [
        ("before_augmentation", ["Source", "Echo", "Map", "Shuffle", "Batch"]),
        ("after_augmentation", ["Source", "Map", "Echo", "Shuffle", "Batch"]),
        ("batch", ["Source", "Map", "Batch", "Echo"]),
        (None, ["Source", "Map", "Batch"]),
    ],
)
def test_each_variant_puts_the_echo_stage_where_the_paper_does(variant, stages):
    assert _stages(dataecho.pipeline(DATA, augment=augment, echo=variant)) == stages


@pytest.mark.parametrize("variant", ["before_augmentation", "after_augmentation", "batch"])
@pytest.mark.parametrize("buffer_size", [None, 16])
def test_factor_one_builds_the_baseline_with_the_window_given(variant, buffer_size):
    # Every variant at factor 1 is echo=None's pipeline: no echo stage, and a window
    # (after the augmentation) only when one is given.
    def build(echo, **factor):
        return dataecho.pipeline(DATA, augment=augment, echo=echo, batch_size=8,
                                 buffer_size=buffer_size, seed=3, **factor)

    ours, baseline = build(variant, factor=1), build(None)
    assert repr(ours) == repr(baseline)
    assert [b.tolist() for b in ours] == [b.tolist() for b in baseline]
    window = ["Shuffle"] if buffer_size else []
    assert _stages(build(variant, factor=1)) == ["Source", "Map", *window, "Batch"]


@pytest.mark.parametrize("variant", ["before_augmentation", "after_augmentation", "batch"])
def test_every_example_is_used_factor_times_and_counted(variant):
    p = dataecho.pipeline(DATA, augment=augment, echo=variant, factor=3, batch_size=8, seed=1)
    used = collections.Counter(int(v) // 1000 for b in p for v in b)
    assert used == {i: 3 for i in range(60)}
    s = p.stats()
    assert (s.fresh_examples, s.emitted_examples, s.realised_factor) == (60, 180, 3.0)


def test_before_augmentation_copies_differ_and_after_augmentation_copies_match():
    def copies(variant):
        p = dataecho.pipeline(DATA, augment=augment, echo=variant, factor=2, batch_size=120)
        out = [int(v) for b in p for v in b]
        by = collections.defaultdict(set)
        for v in out:
            by[v // 1000].add(v)
        return [len(s) for s in by.values()]
    assert max(copies("after_augmentation")) == 1
    assert min(copies("before_augmentation")) == 2 or np.mean(copies("before_augmentation")) > 1.9


def test_pipeline_is_the_composition_of_the_stages():
    p = dataecho.pipeline(DATA, augment=augment, echo="before_augmentation", factor=2,
                          batch_size=8, buffer_size=16, seed=3)
    outputs = [b.tolist() for b in p]
    again = [b.tolist() for b in dataecho.pipeline(
        DATA, augment=augment, echo="before_augmentation", factor=2, batch_size=8,
        buffer_size=16, seed=3)]
    assert outputs == again
    assert isinstance(p, Batch) and isinstance(p.upstream, Shuffle)
    assert isinstance(p.upstream.upstream, Map) and isinstance(p.upstream.upstream.upstream, Echo)
    assert isinstance(p.upstream.upstream.upstream.upstream, Source)


@pytest.mark.parametrize("variant", ["before_augmentation", "after_augmentation", "batch"])
def test_whole_pipeline_restores_at_every_step_with_fractional_factor(variant):
    assert_restores_everywhere(lambda: dataecho.pipeline(
        Source(DATA[:25], seed=2, num_epochs=2), augment=augment, echo=variant, factor=1.7,
        batch_size=4, buffer_size=6, seed=2))


def test_repr_documents_the_pipeline():
    p = dataecho.pipeline(DATA, augment=augment, echo="batch", factor=2, batch_size=8, seed=0)
    text = repr(p)
    assert text.startswith("Echo(Batch(Map(Source(<ndarray of 60>")
    assert "batch_size=8" in text and "factor=2.0" in text and "fn=augment" in text


def test_endless_pipeline_over_a_source_with_num_epochs_none():
    p = dataecho.pipeline(Source(DATA, num_epochs=None), echo="batch", factor=2, batch_size=7)
    for _ in range(100):
        next(p)
    assert p.stats().batches == 100 and p.stats().emitted_examples == 700


@pytest.mark.parametrize("variant", ["before_augmentation", "after_augmentation", "batch"])
def test_auto_factor_builds_an_adaptive_pipeline_that_reads_every_example_once(variant):
    p = dataecho.pipeline(DATA, augment=augment, echo=variant, factor=Auto(max_factor=3),
                          batch_size=8)
    used = collections.Counter(int(v) // 1000 for b in p for v in b)
    assert set(used) == set(range(60)) and max(used.values()) <= 3
    assert p.stats().fresh_examples == 60
    p.close()


@pytest.mark.parametrize("variant", ["before_augmentation", "after_augmentation"])
def test_auto_factor_without_batches_echoes_examples_read_ahead_by_a_thread(variant):
    p = dataecho.pipeline(DATA, augment=augment, echo=variant, factor=Auto(max_factor=3),
                          batch_size=None)
    head = "Map(AdaptiveEcho(" if variant == "before_augmentation" else "AdaptiveEcho(Map("
    assert repr(p).startswith(head)
    used = collections.Counter(int(v) // 1000 for v in p)
    assert set(used) == set(range(60)) and max(used.values()) <= 3
    assert p.stats().fresh_examples == 60
    p.close()


@pytest.mark.parametrize(("variant", "kind"), [("before_augmentation", "AdaptiveExamples"),
                                               ("batch", "AdaptiveEcho")])
def test_auto_carries_the_adaptive_echo_buffer(variant, kind):
    # The adaptive stage's buffer spreads copies apart, the role the post-echo shuffle
    # window plays for a fixed factor.
    p = dataecho.pipeline(DATA, echo=variant, factor=Auto(buffer_size=24), batch_size=8)
    assert repr(p).startswith(kind) and "buffer_size=24" in repr(p)
    p.close()
    default = dataecho.pipeline(DATA, echo=variant, factor="auto", batch_size=8)
    assert "buffer_size=24" not in repr(default)
    default.close()


def test_buffer_size_with_auto_is_an_error_naming_auto_buffer_size():
    with pytest.raises(ValueError, match=r"buffer_size is the post-echo shuffle of a fixed "
                                         r"factor.*got buffer_size=24; pass "
                                         r"factor=dataecho.Auto\(buffer_size=24\)"):
        dataecho.pipeline(DATA, echo="batch", factor="auto", batch_size=8, buffer_size=24)


@pytest.mark.parametrize("kwargs, message", [
    ({"factor": 3}, r"factor does nothing with echo=None \(no echoing: the baseline\), got "
                    r"factor=3; drop factor for the baseline, or pass a variant"),
    ({"factor": "auto"}, r"factor does nothing with echo=None .* got factor='auto'; drop"),
    ({"factor": Auto(max_factor=8)},
     r"factor does nothing with echo=None .* got factor=Auto\(max_factor=8\); drop"),
])
def test_echo_none_with_a_factor_is_an_error_not_a_silent_baseline(kwargs, message):
    with pytest.raises(ValueError, match=message):
        dataecho.pipeline(DATA, echo=None, batch_size=8, **kwargs)
    baseline = ["Source", "Batch"]  # factor 1 or no factor is the baseline, as before
    assert _stages(dataecho.pipeline(DATA, echo=None, factor=1, batch_size=8)) == baseline
    assert _stages(dataecho.pipeline(DATA, echo=None, batch_size=8)) == baseline
    assert "factor=2.0" in repr(dataecho.pipeline(DATA, echo="batch", batch_size=8))


def test_an_augment_that_is_not_a_function_is_reported_under_its_own_name():
    with pytest.raises(TypeError, match=r"augment must be callable .* got 'flip' of type str"):
        dataecho.pipeline([1, 2, 3], augment="flip", factor=2)


def test_a_source_passed_in_keys_the_later_seeds_by_its_own_epoch_and_shard():
    def build(**keys):  # the repr shows every stage's seed
        return repr(dataecho.pipeline(Source(DATA, seed=4, epoch=2, shard_index=1, num_shards=3),
                                      augment=augment, factor=1.5, seed=4, **keys))
    assert build() == build(epoch=2, shard_index=1) != build(epoch=0, shard_index=0)


def test_a_shard_index_with_a_data_set_is_an_error_naming_source():
    with pytest.raises(ValueError, match=r"a map-style data set is read whole, so shard_index "
                                         r"must be 0, got 2; to read one shard pass "
                                         r"data=dataecho.Source\(data, shard_index=2"):
        dataecho.pipeline(DATA, shard_index=2)
