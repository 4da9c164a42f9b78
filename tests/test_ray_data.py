"""Echoing in Ray Data: the map_batches function, the trainer-side count, and Ray itself."""

from __future__ import annotations

import threading
from collections import Counter
from itertools import groupby

import numpy as np
import pytest

from dataecho import Echo
from dataecho.echo import copies_at
from dataecho.ray_data import COPY_COLUMN, CountCopies, EchoRows, echo_rows
from helpers.checkpoint import assert_restores_everywhere


def rows(n: int, start: int = 0) -> dict[str, np.ndarray]:
    ids = np.arange(start, start + n)
    return {"id": ids, "x": ids * 10, "img": np.stack([ids, ids], axis=1)}


def test_integer_factor_repeats_rows_and_numbers_copies():
    out = EchoRows(3)(rows(4))
    assert out["id"].tolist() == [i for i in range(4) for _ in range(3)]
    assert out["img"].shape == (12, 2)
    assert out[COPY_COLUMN].tolist() == [0, 1, 2] * 4


def test_fractional_draws_match_the_echo_stage_whatever_the_batching():
    # Rows split into uneven batches, in any order, get the copies Echo gives them.
    n, factor, seed = 10_000, 1.7, 5
    expected = [len(list(g)) for _, g in groupby(Echo(range(n), factor, seed=seed))]
    echo = EchoRows(factor, key="id", seed=seed)
    got = np.zeros(n, dtype=np.int64)
    for start, size in [(6000, 4000), (0, 1), (1, 4095), (4096, 1904)]:
        out = echo(rows(size, start))
        np.add.at(got, out["id"], 1)
        assert (out[COPY_COLUMN] == 0).sum() == size
    assert got.tolist() == expected
    assert copies_at(factor, seed, np.arange(n)).tolist() == expected


def test_string_keys_are_hashed_stably_and_epochs_differ():
    paths = np.array([f"shard-{i:03d}/img-{i}.png" for i in range(4000)])
    batch = {"path": paths}
    a = EchoRows(1.25, key="path", seed=1)(batch)
    b = EchoRows(1.25, key="path", seed=1)(batch)
    c = EchoRows(1.25, key="path", seed=1, epoch=1)(batch)
    assert a["path"].tolist() == b["path"].tolist()
    assert a["path"].tolist() != c["path"].tolist()
    assert 1.2 < len(a["path"]) / 4000 < 1.3
    counts = Counter(a["path"].tolist())
    assert set(counts.values()) == {1, 2} and len(counts) == 4000


def test_errors_name_parameter_rule_and_fix():
    with pytest.raises(ValueError, match=r"fractional factor \(1.5\) needs key="):
        EchoRows(1.5)
    with pytest.raises(TypeError, match=r"factor must be a fixed number here, got 'auto'; "
                                        r"for adaptive echoing use EchoBatches"):
        EchoRows("auto")
    with pytest.raises(ValueError, match="factor"):
        EchoRows(0.5)
    with pytest.raises(TypeError, match="key must be a column name"):
        EchoRows(2, key=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"key='row' is not a column of the batch \(columns: id"):
        EchoRows(1.5, key="row")(rows(2))
    with pytest.raises(ValueError, match=r"already has a column 'echo_copy' \(columns: id, "
                                         r"x, img, echo_copy\), which EchoRows would "
                                         r"overwrite; if these rows went through echo_rows"):
        EchoRows(2)(EchoRows(2)(rows(2)))
    with pytest.raises(ValueError, match="one length"):
        EchoRows(2)({"a": np.arange(2), "b": np.arange(3)})
    with pytest.raises(ValueError, match="non-negative integers"):
        copies_at(1.5, 0, np.array([-1]))
    with pytest.raises(ValueError, match=r"epoch must be an int >= 0, got -1"):
        EchoRows(2, epoch=-1)
    with pytest.raises(TypeError, match=r"epoch must be an int >= 0, got 1.7"):
        EchoRows(2, epoch=1.7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"dataset must be a ray.data.Dataset"):
        echo_rows([1, 2], 2)
    with pytest.raises(ValueError, match="'echo_copy' column"):
        list(CountCopies([{"x": np.arange(2)}]))


def test_a_column_named_like_the_copy_column_is_not_called_an_echo():
    # The column merely exists: the message must not claim the rows were echoed twice.
    with pytest.raises(ValueError, match="EchoRows would overwrite") as error:
        EchoRows(2)({"id": np.arange(2), "echo_copy": np.array([7, 8])})
    assert "echoed twice" not in str(error.value)


def test_a_factor_that_would_make_a_batch_of_billions_of_rows_fails_before_allocating():
    with pytest.raises(ValueError, match=r"factor=1,000,000,000,000 would turn a batch of 1 row "
                                         r"into up to 1,000,000,000,000 rows, more than one "
                                         r"output batch may hold \(MAX_BATCH_ROWS = 2\*\*31"):
        EchoRows(1e12)
    echo = EchoRows(2**20)  # fine for batches of up to 2048 rows
    assert len(echo({"id": np.zeros(1, dtype=np.int8)})["id"]) == 2**20
    with pytest.raises(ValueError, match=r"factor=1,048,576 would turn a batch of 4,096 rows "
                                         r"into up to 4,294,967,296 rows.*pass a smaller "
                                         r"factor .*batch_size=N\) with N <= 2,048"):
        echo(rows(4096))  # np.repeat would allocate 4 billion rows per column

    class Rows:  # map_batches never runs: the batch size alone is enough to refuse
        def map_batches(self, fn, batch_format, batch_size):
            raise AssertionError("echo_rows should have refused the batch size")

    with pytest.raises(ValueError, match=r"factor=3 would turn a batch of 1,073,741,824 rows "
                                         r"into up to 3,221,225,472 rows"):
        echo_rows(Rows(), 3, batch_size=2**30)


def test_count_copies_state_without_its_counters_is_an_error_naming_them():
    state = CountCopies([{"echo_copy": np.array([0])}]).state_dict()
    del state["fresh"], state["batches"]
    with pytest.raises(ValueError, match=r"state of CountCopies lacks the keys fresh, batches "
                                         r"\(it has .*\); pass the dict returned by "
                                         r"CountCopies.state_dict\(\)"):
        CountCopies([{"echo_copy": np.array([0])}]).load_state_dict(state)


@pytest.mark.parametrize(("key", "value", "error", "message"), [
    ("emitted", 0, ValueError, r"emitted=0, but it must be an int >= 1 \(rows read, at least "
                               r"the fresh ones\)"),
    ("fresh", -1, ValueError, r"fresh=-1, but it must be an int >= 0"),
    ("batches", "1", TypeError, r"batches='1' of type str, but it must be an int >= 0"),
    ("upstream", 3, TypeError, r"upstream=3 of type int, but it must be a dict"),
])
def test_count_copies_state_out_of_range_is_refused_naming_key_value_and_rule(
        key, value, error, message):
    stage = CountCopies([{"echo_copy": np.array([0, 1])}] * 2)
    next(stage)
    state = {**stage.state_dict(), key: value}
    with pytest.raises(error, match=r"state of CountCopies has " + message):
        CountCopies([{"echo_copy": np.array([0, 1])}] * 2).load_state_dict(state)


def test_count_copies_counts_fresh_rows_and_restores_everywhere():
    echo = EchoRows(2.5, key="id", seed=3)
    out = echo(rows(50))
    order = np.random.default_rng(0).permutation(len(out["id"]))  # a shuffle buffer
    shuffled = {k: v[order] for k, v in out.items()}
    batches = [{k: v[i:i + 8] for k, v in shuffled.items()} for i in range(0, len(order), 8)]

    got = assert_restores_everywhere(lambda: CountCopies(batches))
    assert all(COPY_COLUMN not in b for b in got)
    stage = CountCopies(batches)
    list(stage)
    stats = stage.stats()
    assert stats.fresh_examples == 50
    assert stats.emitted_examples == len(order)
    assert stats.realised_factor == pytest.approx(len(order) / 50)


@pytest.mark.torch
def test_count_copies_reads_tensor_columns_and_can_keep_the_column():
    torch = pytest.importorskip("torch")
    batch = {"x": torch.zeros(3), COPY_COLUMN: torch.tensor([0, 1, 0])}
    stage = CountCopies([batch], drop=False)
    assert COPY_COLUMN in next(stage)
    assert stage.stats().fresh_examples == 2


@pytest.mark.torch
def test_ray_pipeline_counts_every_fresh_row_once():
    """A real local Ray cluster (``ray[data]`` is a test dependency; ~20 s)."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("torch")
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True,
             log_to_driver=False)
    try:
        ds = ray.data.range(1000, override_num_blocks=4)
        ds = echo_rows(ds, 1.5, key="id", seed=0)
        ds = ds.map_batches(lambda b: {**b, "x": b["id"] * 2 + b[COPY_COLUMN]})
        # iter_torch_batches, as the README: it needs the ray extra's pydantic.
        stage = CountCopies(ds.iter_torch_batches(batch_size=64, local_shuffle_buffer_size=256,
                                                  local_shuffle_seed=0))
        seen = Counter(i for batch in stage for i in batch["id"].tolist())
        assert set(seen) == set(range(1000))
        assert sum(seen.values()) == int(copies_at(1.5, 0, np.arange(1000)).sum())
        assert stage.stats().fresh_examples == 1000

        # With preserve_order and a seeded local shuffle Ray's output is deterministic,
        # so a checkpoint restores by re-iterating and skipping the batches consumed.
        options = ray.data.DataContext.get_current().execution_options
        order, options.preserve_order = options.preserve_order, True

        def make() -> CountCopies:
            ds = echo_rows(ray.data.range(300, override_num_blocks=3), 1.5, key="id")
            return CountCopies(ds.iter_batches(batch_size=32, local_shuffle_buffer_size=100,
                                               local_shuffle_seed=1))
        try:
            assert_restores_everywhere(make, every=5)
        finally:
            options.preserve_order = order

        shards = echo_rows(ray.data.range(200), 2).streaming_split(2, equal=True)
        fresh = [CountCopies(s.iter_batches(batch_size=10)) for s in shards]
        # streaming_split shards are read concurrently, as DDP ranks do.
        threads = [threading.Thread(target=lambda c=c: list(c)) for c in fresh]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert sum(c.stats().fresh_examples for c in fresh) == 200
    finally:
        ray.shutdown()


def test_a_later_echo_counts_rows_not_batches():
    rows = EchoRows(2)({"id": np.arange(40)})  # 80 rows, 40 fresh
    batches = [{k: v[i:i + 8] for k, v in rows.items()} for i in range(0, 80, 8)]
    stage = Echo(CountCopies(batches), 2)
    assert sum(len(b["id"]) for b in stage) == 160
    stats = stage.stats()
    assert (stats.fresh_examples, stats.emitted_examples, stats.batches) == (40, 160, 20)


def test_echo_rows_tells_ray_it_changes_the_row_count():
    class Dataset:  # Ray's map_batches signature (its default differs across versions)
        def map_batches(self, fn, *, batch_format="default", udf_modifying_row_count=False,
                        **kwargs):
            self.seen = {"batch_format": batch_format,
                         "udf_modifying_row_count": udf_modifying_row_count, **kwargs}
            return self

    assert echo_rows(Dataset(), 2).seen == {"batch_format": "numpy",
                                            "udf_modifying_row_count": True}
    assert echo_rows(Dataset(), 2, udf_modifying_row_count=False,
                     num_cpus=1).seen["udf_modifying_row_count"] is False


def test_count_copies_drop_accepts_only_a_real_boolean():
    with pytest.raises(TypeError, match=r"drop must be True or False, got 'no' of type str"):
        CountCopies([{"echo_copy": np.array([0])}], drop="no")
