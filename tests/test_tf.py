"""dataecho.tf: echoing inside a tf.data graph, resumed by tf.train.Checkpoint."""

import os
import re
import runpy
from collections import Counter
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter
tf = pytest.importorskip("tensorflow", reason="dataecho.tf needs tensorflow-cpu")

import dataecho
from dataecho.tf import echo

EXAMPLE = Path(__file__).parent.parent / "examples" / "tf_keras_echo.py"


def values(dataset):
    return [tuple(int(v) for v in x) if isinstance(x, tuple) else int(x)
            for x in dataset.as_numpy_iterator()]


def test_an_integer_factor_yields_every_element_that_many_times_in_a_row():
    stage = echo(3)
    assert values(tf.data.Dataset.range(4).apply(stage)) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert stage.stats() == dataecho.EchoStats(4, 12, 4, 12, None)


def test_the_shuffle_after_the_echo_spreads_copies_and_keeps_every_one():
    out = values(tf.data.Dataset.range(100).apply(echo(2, buffer_size=50, seed=3)))
    assert Counter(out) == {i: 2 for i in range(100)}
    adjacent = sum(a == b for a, b in pairwise(out))
    assert adjacent < 10


def test_an_integer_factor_keeps_the_dataset_length_known():
    ds = tf.data.Dataset.range(7).apply(echo(2, buffer_size=4))
    assert int(ds.cardinality()) == 14


def test_a_fractional_factor_is_realised_within_one_percent_over_100k_elements():
    n = 100_000
    stage = echo(1.5, seed=7)
    ds = tf.data.Dataset.range(n).apply(stage)
    out = np.concatenate([b for b in ds.batch(16_384).as_numpy_iterator()])
    copies = np.bincount(out, minlength=n)
    assert set(np.unique(copies).tolist()) == {1, 2}
    assert abs(len(out) / n - 1.5) < 0.015
    assert stage.stats() == dataecho.EchoStats(n, len(out), n, len(out), None)


def test_fractional_copies_are_a_function_of_seed_and_element_index():
    def copies(seed):
        out = values(tf.data.Dataset.range(200).apply(echo(1.5, seed=seed)))
        return np.bincount(out).tolist()

    assert copies(1) == copies(1)
    assert copies(1) != copies(2)
    # An element's draw depends on its index, not on what it holds.
    shifted = values(tf.data.Dataset.range(1000, 1200).apply(echo(1.5, seed=1)))
    assert np.bincount(np.array(shifted) - 1000).tolist() == copies(1)


def test_batch_echoing_counts_examples_through_size():
    stage = echo(2, size=lambda x, y: tf.shape(x)[0])
    ds = tf.data.Dataset.from_tensor_slices((np.arange(10), np.arange(10) % 2)).batch(4)
    batches = list(ds.apply(stage).as_numpy_iterator())
    assert [len(x) for x, _ in batches] == [4, 4, 4, 4, 2, 2]
    assert stage.stats() == dataecho.EchoStats(10, 20, 3, 6, 6)


def test_counts_are_readable_while_the_dataset_is_being_consumed():
    stage = echo(2)
    it = iter(tf.data.Dataset.range(50).apply(stage))
    for _ in range(10):
        next(it)
    mid = stage.stats()
    # Read-ahead (tf.data's prefetch) may have emitted more than was consumed.
    assert mid.emitted_items >= 10 and mid.fresh_items == (mid.emitted_items + 1) // 2
    for _ in it:
        pass
    assert stage.stats() == dataecho.EchoStats(50, 100, 50, 100, None)


def _pipeline(factor, buffer_size, read_ahead=True):
    stage = echo(factor, seed=5, buffer_size=buffer_size)
    pairs = tf.data.Dataset.range(6).map(lambda i: (i, i * 10)).apply(stage)
    if not read_ahead:  # no prefetch thread: the counts move only when next() is called
        options = tf.data.Options()
        options.autotune.enabled = False
        options.experimental_optimization.inject_prefetch = False
        pairs = pairs.with_options(options)
    return pairs, stage


def _pairs(iterator):
    return [tuple(int(v) for v in x) for x in iterator]


@pytest.mark.parametrize("read_ahead", [True, False])
@pytest.mark.parametrize(("factor", "buffer_size"), [(3, None), (1.5, None), (2.5, 4)])
def test_restore_through_checkpoint_at_every_position_yields_exactly_the_rest(
        tmp_path, factor, buffer_size, read_ahead):
    ds, stage = _pipeline(factor, buffer_size, read_ahead)
    expected = _pairs(ds)
    final = stage.stats()
    assert final.fresh_items == 6 and final.emitted_items == len(expected)
    for position in range(len(expected) + 1):
        ds, stage = _pipeline(factor, buffer_size, read_ahead)
        it = iter(ds)
        head = _pairs(next(it) for _ in range(position))
        saved = stage.stats()
        path = tf.train.Checkpoint(iterator=it, echo=stage).write(str(tmp_path / f"p{position}"))

        ds, stage = _pipeline(factor, buffer_size, read_ahead)
        it = iter(ds)
        tf.train.Checkpoint(iterator=it, echo=stage).read(path).assert_consumed()
        if not read_ahead:
            assert stage.stats() == saved
        rest = _pairs(it)
        assert head + rest == expected, f"restored after {position} elements"
        assert stage.stats() == final


def test_counts_without_read_ahead_follow_the_elements_taken():
    ds, stage = _pipeline(2, None, read_ahead=False)
    it = iter(ds)
    for taken in range(1, 13):
        next(it)
        assert stage.stats() == dataecho.EchoStats(
            (taken + 1) // 2, taken, (taken + 1) // 2, taken, None)


def test_counts_start_again_with_each_pass():
    stage = echo(2)
    ds = tf.data.Dataset.range(5).apply(stage)
    for _ in range(2):
        assert len(values(ds)) == 10
        assert stage.stats() == dataecho.EchoStats(5, 10, 5, 10, None)


def test_restore_mid_echo_yields_the_remaining_copies(tmp_path):
    ds, stage = _pipeline(3, None)
    it = iter(ds)
    assert [int(next(it)[0]) for _ in range(4)] == [0, 0, 0, 1]
    path = tf.train.Checkpoint(iterator=it, echo=stage).write(str(tmp_path / "mid"))
    ds, stage = _pipeline(3, None)
    it = iter(ds)
    tf.train.Checkpoint(iterator=it, echo=stage).read(path)
    assert [int(x[0]) for x in it] == [1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5]
    assert stage.stats() == dataecho.EchoStats(6, 18, 6, 18, None)


@pytest.mark.parametrize(("factor", "buffer_size"), [(3, None), (1.5, None), (2.5, 4)])
def test_echo_applied_inside_a_tf_function_yields_and_counts_what_eager_mode_does(
        factor, buffer_size):
    expected = values(tf.data.Dataset.range(6).apply(echo(factor, seed=5,
                                                          buffer_size=buffer_size)))
    stage = echo(factor, seed=5, buffer_size=buffer_size)

    @tf.function
    def consume():
        ds = tf.data.Dataset.range(6).apply(stage)
        return ds.batch(100).get_single_element(), ds.cardinality()

    out, length = consume()
    assert out.numpy().tolist() == expected
    assert int(length) == (18 if factor == 3 else tf.data.UNKNOWN_CARDINALITY)
    assert stage.stats() == dataecho.EchoStats(6, len(expected), 6, len(expected), None)


def test_a_stage_built_inside_a_tf_function_echoes_and_says_it_keeps_no_counts():
    built = []

    @tf.function
    def consume():
        built.append(echo(1.5, seed=5))
        return tf.data.Dataset.range(6).apply(built[-1]).batch(100).get_single_element()

    expected = values(tf.data.Dataset.range(6).apply(echo(1.5, seed=5)))
    assert consume().numpy().tolist() == expected
    with pytest.raises(RuntimeError, match=r"built inside a function being traced .* build it "
                                           r"outside, stage = dataecho\.tf\.echo"):
        built[-1].stats()


def test_echo_inside_a_flat_map_or_interleave_function_echoes_each_inner_dataset():
    def inner(n):
        return tf.data.Dataset.range(n * 10, n * 10 + 5).apply(echo(1.5, seed=1))

    expected = [x for n in range(3) for x in values(inner(n))]
    assert values(tf.data.Dataset.range(3).flat_map(inner)) == expected
    assert values(tf.data.Dataset.range(3).interleave(inner, cycle_length=1)) == expected


@pytest.mark.parametrize("factor", [2, 2.5])
def test_echo_in_tf_compat_v1_graph_mode_yields_and_counts_what_eager_mode_does(factor):
    expected = values(tf.data.Dataset.range(6).apply(echo(factor, seed=5, buffer_size=4)))
    graph = tf.Graph()
    with graph.as_default():
        stage = echo(factor, seed=5, buffer_size=4)
        iterator = tf.compat.v1.data.make_initializable_iterator(
            tf.data.Dataset.range(6).apply(stage))
        element = iterator.get_next()
        init = [tf.compat.v1.global_variables_initializer(), iterator.initializer]
    out = []
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        with pytest.raises(tf.errors.OutOfRangeError):
            while True:
                out.append(int(session.run(element)))
        counts = session.run(stage.counts).tolist()
    assert out == expected
    assert counts == [6, len(expected), 6, len(expected)]


@pytest.mark.parametrize(("factor", "buffer_size"), [(3, None), (2.5, 4)])
def test_an_eager_checkpoint_restores_into_the_pipeline_built_in_a_tf_function(
        tmp_path, factor, buffer_size):
    def build(stage):
        return tf.data.Dataset.range(6).map(lambda i: (i, i * 10)).apply(stage)

    expected = _pairs(build(echo(factor, seed=5, buffer_size=buffer_size)))
    for position in sorted({0, 1, 4, len(expected) // 2, len(expected)}):
        stage = echo(factor, seed=5, buffer_size=buffer_size)
        it = iter(build(stage))
        head = _pairs(next(it) for _ in range(position))
        path = tf.train.Checkpoint(iterator=it, echo=stage).write(str(tmp_path / f"p{position}"))
        stage = echo(factor, seed=5, buffer_size=buffer_size)
        it = iter(tf.function(lambda stage=stage: build(stage))())
        tf.train.Checkpoint(iterator=it, echo=stage).read(path).assert_consumed()
        assert head + _pairs(it) == expected, f"restored after {position} elements"
        assert stage.stats().emitted_items == len(expected)


def test_repr_shows_the_parameters():
    assert repr(echo(2.5, seed=1, buffer_size=64)) == (
        "echo(factor=2.5, seed=1, buffer_size=64, reshuffle_each_iteration=True)")


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"factor": "2"}, TypeError, r"factor must be a real number >= 1 .* got '2' of type str"),
    ({"factor": 0.5}, ValueError, r"factor must be >= 1 .* got 0\.5"),
    ({"factor": float("nan")}, ValueError, r"factor must be finite"),
    ({"factor": "auto"}, TypeError,
     r"factor must be a fixed number here, got 'auto'; for adaptive echoing use "
     r"dataecho\.AdaptiveEcho\(dataset\.as_numpy_iterator\(\)"),
    ({"factor": dataecho.Auto()}, TypeError, r"factor must be a fixed number here"),
    ({"factor": 2, "seed": -1}, ValueError, r"seed must be an int in \[0, 2\*\*63\), got -1"),
    ({"factor": 2, "seed": 2**63}, ValueError, r"seed must be an int in \[0, 2\*\*63\)"),
    ({"factor": 2, "seed": 1.5}, TypeError, r"seed must be an int .* of type float"),
    ({"factor": 2, "buffer_size": 0}, ValueError, r"buffer_size must be an int >= 1, got 0"),
    ({"factor": 2, "size": 4}, TypeError, r"size must be callable as size\(item\)"),
    ({"factor": 2, "buffer_size": 8, "reshuffle_each_iteration": "yes"}, TypeError,
     r"reshuffle_each_iteration must be True or False, got 'yes'"),
])
def test_bad_arguments_get_clear_errors(kwargs, error, message):
    factor = kwargs.pop("factor")
    with pytest.raises(error, match=message):
        echo(factor, **kwargs)


def test_a_dataset_of_the_wrong_kind_gets_a_clear_error():
    with pytest.raises(TypeError, match=r"dataset must be a tf\.data\.Dataset, got list; "
                                        r"build one with tf\.data\.Dataset\.from_tensor_slices"):
        echo(2)([1, 2, 3])


def test_keras_example_trains_and_prints_exact_counts(capsys, monkeypatch):
    pytest.importorskip("sklearn", reason="the fast mode trains on scikit-learn's digits")
    monkeypatch.setattr("sys.argv", [str(EXAMPLE), "--fast"])
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    for pattern in [
            r"epoch 1: loss \d\.\d{3}; fresh 1,347 examples, emitted 2,694 \(factor 2\.000\)",
            r"epoch 2: loss \d\.\d{3}; fresh 1,347 examples, emitted 2,694 \(factor 2\.000\)",
            r"2 epochs: fresh 2,694 examples, emitted 5,388 \(factor 2\.000\)",
            r"held-out accuracy 0\.\d{3}"]:
        assert any(re.fullmatch(pattern, line) for line in lines), (pattern, lines)
