"""EchoDataset over streams: WebDataset, Hugging Face datasets, any IterableDataset."""

import collections
import json
import os
import subprocess
import sys
import warnings

import pytest

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # nothing from a hub: local files only
os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from dataecho.torch import EchoDataset, Indexed, Streamed

pytestmark = pytest.mark.torch

N, FILES = 48, 4


def tag(x, rng):
    """The example's index and a draw that differs per copy: (index, draw)."""
    return torch.tensor([float(x), float(rng.random())], dtype=torch.float64)


class Numbers(IterableDataset):
    """A stream that does not split itself: every worker would read all of it."""

    def __init__(self, n, fail_at=None):
        self.n, self.fail_at = n, fail_at

    def __iter__(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise KeyError(f"record {i} is missing")
            yield i


class Empty(IterableDataset):
    def __iter__(self):
        return iter(())


def _rows(ds, num_workers, batch_size=4):
    loader = DataLoader(ds, batch_size=batch_size, num_workers=num_workers)
    return [row for batch in loader for row in batch.tolist()]


def _check_epoch(rows, n, factor):
    """Every example once per epoch as fresh, ``factor`` copies, all draws different."""
    used = collections.Counter(int(r[0]) for r in rows)
    assert used == {i: factor for i in range(n)}
    draws = [r[1] for r in rows]
    assert len(set(draws)) == len(draws)  # copies, workers and ranks draw differently


# --- WebDataset ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def tar_urls(tmp_path_factory):
    wds = pytest.importorskip("webdataset", reason="needs webdataset (dataecho[webdataset])")
    root = tmp_path_factory.mktemp("wds")
    urls = []
    for f in range(FILES):
        path = str(root / f"part-{f:02d}.tar")
        with wds.TarWriter(path) as sink:
            for i in range(f, N, FILES):
                sink.write({"__key__": f"{i:06d}", "cls": i})
        urls.append(path)
    return urls


def _webdataset(urls, seed=None):
    import webdataset as wds

    shuffle = False if seed is None else len(urls)
    ds = wds.WebDataset(urls, shardshuffle=shuffle, seed=seed, nodesplitter=wds.split_by_node,
                        empty_check=False)
    return ds.decode().to_tuple("cls").map(lambda t: t[0])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_webdataset_is_read_once_per_epoch_and_echoed_factor_times_over_ranks(
        tar_urls, monkeypatch, num_workers):
    rows, fresh = [], 0
    for rank in range(2):
        # WebDataset's split_by_node reads RANK/WORLD_SIZE (torchrun sets them).
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        ds = EchoDataset(_webdataset(tar_urls), augment=tag, factor=2, buffer_size=8, seed=1,
                         rank=rank, world_size=2)
        rows += _rows(ds, num_workers)
        fresh += ds.stats().fresh_examples
        assert ds.stats().emitted_examples == 2 * ds.stats().fresh_examples
    _check_epoch(rows, N, 2)
    assert fresh == N


def test_webdataset_with_a_seeded_order_resumes_at_every_batch(tar_urls):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        ds = EchoDataset(_webdataset(tar_urls, seed=5), augment=tag, factor=2, buffer_size=5,
                         seed=2)
        return StatefulDataLoader(ds, batch_size=4, num_workers=2)

    _assert_resumes_at_every_batch(make)


# --- Hugging Face datasets ------------------------------------------------------------

@pytest.fixture(scope="module")
def json_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    files = []
    for f in range(FILES):
        path = root / f"part-{f:02d}.jsonl"
        path.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(f, N, FILES)))
        files.append(str(path))
    return files


def _hf(files, rank=None, world_size=None):
    datasets = pytest.importorskip("datasets", reason="needs datasets (dataecho[hf])")
    from datasets.distributed import split_dataset_by_node

    ds = datasets.load_dataset("json", data_files=files, split="train", streaming=True)
    if rank is not None:
        ds = split_dataset_by_node(ds, rank=rank, world_size=world_size)
    return ds.map(lambda row: {"i": row["i"]})


def _index(row, rng):
    return tag(row["i"], rng)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_hf_stream_is_read_once_per_epoch_and_echoed_factor_times_over_ranks(
        json_files, num_workers):
    rows, fresh = [], 0
    for rank in range(2):
        ds = EchoDataset(_hf(json_files, rank, 2), augment=_index, factor=3, buffer_size=8,
                         seed=1, rank=rank, world_size=2)
        rows += _rows(ds, num_workers)
        fresh += ds.stats().fresh_examples
    _check_epoch(rows, N, 3)
    assert fresh == N


def test_hf_stream_resumes_from_its_own_state_at_every_batch(json_files):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        ds = EchoDataset(_hf(json_files), augment=_index, factor=2, buffer_size=5, seed=2)
        return StatefulDataLoader(ds, batch_size=4, num_workers=2)

    _assert_resumes_at_every_batch(make)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_checkpoint_of_a_hf_stream_shuffled_with_a_buffer_warns_with_the_fix(
        json_files, num_workers):
    # On 8beab11 a StatefulDataLoader resume lost the 8 examples of the stream's shuffle
    # buffer (120 of 128 copies), or failed inside datasets with workers, silently.
    from torchdata.stateful_dataloader import StatefulDataLoader

    shuffled = _hf(json_files).shuffle(seed=0, buffer_size=8)
    ds = EchoDataset(shuffled, augment=_index, factor=2, buffer_size=4, seed=2)
    with pytest.warns(UserWarning, match=r"will not resume exactly: .*shuffle\(seed, "
                      r"buffer_size=8\)\).*drop \.shuffle\(\) on the stream"):
        ds.state_dict()
    if num_workers == 0:  # warned once per copy
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ds.state_dict()
    plain = EchoDataset(_hf(json_files), augment=_index, factor=2, buffer_size=4, seed=2)
    loader = StatefulDataLoader(plain, batch_size=4, num_workers=num_workers)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        it = iter(loader)
        next(it)
        loader.state_dict()


def test_hf_stream_on_several_ranks_without_split_dataset_by_node_is_refused(json_files):
    with pytest.raises(ValueError, match=r"split_dataset_by_node"):
        EchoDataset(_hf(json_files), factor=2, rank=0, world_size=2)


# --- any IterableDataset --------------------------------------------------------------

@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_stream_that_does_not_split_itself_is_split_by_dataecho(num_workers):
    rows, fresh = [], 0
    for rank in range(2):
        ds = EchoDataset(Numbers(N), augment=tag, factor=2, buffer_size=8, seed=1, rank=rank,
                         world_size=2, read=Streamed(split="dataecho"))
        rows += _rows(ds, num_workers)
        fresh += ds.stats().fresh_examples
    _check_epoch(rows, N, 2)
    assert fresh == N


def test_an_unknown_stream_read_by_several_workers_must_say_who_splits_it():
    ds = EchoDataset(Numbers(N), factor=2)
    assert len(_rows(ds, 0)) == 2 * N  # one reader: nothing to split
    with pytest.raises(ValueError, match=r"read=Streamed\(split=...\) must say who splits the "
                                         r"stream \(Numbers\) across the 2 readers"):
        _rows(EchoDataset(Numbers(N), factor=2), 2)


def test_a_dataecho_split_stream_resumes_at_every_batch():
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        ds = EchoDataset(Numbers(30), augment=tag, factor=2.5, buffer_size=5, seed=2,
                         read=Streamed(split="dataecho"))
        return StatefulDataLoader(ds, batch_size=4, num_workers=2)

    _assert_resumes_at_every_batch(make)


def test_an_empty_stream_is_an_error_not_an_empty_epoch():
    with pytest.raises(ValueError, match=r"dataset yielded no examples in the training "
                                         r"process for a whole epoch"):
        _rows(EchoDataset(Empty(), factor=2), 0)
    with pytest.raises(ValueError, match=r"dataset yielded no examples in DataLoader worker"):
        _rows(EchoDataset(Empty(), factor=2, read=Streamed(split="stream")), 2)


def test_an_error_in_a_workers_stream_reaches_the_loop_with_its_type():
    with pytest.raises(KeyError, match="record 7 is missing"):
        _rows(EchoDataset(Numbers(N, fail_at=7), factor=2, read=Streamed(split="dataecho")), 2)


def test_read_options_of_the_other_kind_of_data_are_refused():
    with pytest.raises(ValueError, match=r"read=Indexed\(shuffle=True, drop_remainder=False\) "
                                         r"says how to read a map-style data set, but dataset "
                                         r"is a stream \(Numbers\); pass read=Streamed"):
        EchoDataset(Numbers(4), read=Indexed(shuffle=True))
    with pytest.raises(ValueError, match=r"says how to read a stream, but dataset is a "
                                         r"map-style data set \(list\); pass read=Indexed"):
        EchoDataset(list(range(4)), read=Streamed(split="stream"))
    with pytest.raises(ValueError, match=r"Streamed.split must be 'stream' .* got 'workers'"):
        Streamed(split="workers")
    with pytest.raises(TypeError, match=r"read must be dataecho.torch.Indexed\(...\) for a "
                                        r"map-style data set, .* got 'stream'"):
        EchoDataset(Numbers(4), read="stream")
    with pytest.raises(TypeError, match=r"dataset must be re-iterable .* one-shot iterator"):
        EchoDataset(iter(range(4)))


def test_set_epoch_reaches_a_stream_that_has_one():
    class Epochs(IterableDataset):
        def __init__(self):
            self.epoch = None

        def set_epoch(self, epoch):
            self.epoch = epoch

        def __iter__(self):
            info = get_worker_info()
            assert info is None
            yield from (self.epoch * 10 + i for i in range(3))

    stream = Epochs()
    ds = EchoDataset(stream, factor=1, buffer_size=1)
    ds.set_epoch(4)
    assert sorted(_rows(ds, 0, batch_size=1)) == [40, 41, 42]


def _assert_resumes_at_every_batch(make):
    """A StatefulDataLoader restored at every batch boundary yields exactly the rest."""
    full = list(make())
    reference = make()
    it = iter(reference)
    for k in range(len(full) + 1):
        state = json.loads(json.dumps(reference.state_dict()))
        restored = make()
        restored.load_state_dict(state)
        rest = list(restored)
        assert len(rest) == len(full) - k, k
        for a, b in zip(rest, full[k:], strict=True):
            assert torch.equal(a, b), k
        if k < len(full):
            next(it)


# --- TarShards ----------------------------------------------------------------------

def _number(sample, rng):
    return tag(int(sample["cls"]), rng)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_tar_shards_are_split_by_whole_shards_over_ranks_and_workers(tar_urls, num_workers):
    from dataecho import TarShards

    rows, fresh = [], 0
    for rank in range(2):
        ds = EchoDataset(TarShards(tar_urls, seed=3), augment=_number, factor=2, buffer_size=8,
                         seed=1, rank=rank, world_size=2)
        rows += _rows(ds, num_workers)
        fresh += ds.stats().fresh_examples
    _check_epoch(rows, N, 2)
    assert fresh == N


def test_a_decode_map_over_tar_shards_is_rebuilt_for_each_reader(tar_urls):
    from dataecho import Map, TarShards

    decoded = Map(TarShards(tar_urls, seed=3), lambda sample: int(sample["cls"]))
    ds = EchoDataset(decoded, augment=tag, factor=2, buffer_size=8, seed=1)
    _check_epoch(_rows(ds, 2), N, 2)


def test_tar_shards_resume_at_every_batch(tar_urls):
    from torchdata.stateful_dataloader import StatefulDataLoader

    from dataecho import TarShards

    def make():
        ds = EchoDataset(TarShards(tar_urls, seed=3), augment=_number, factor=2.5,
                         buffer_size=5, seed=2)
        return StatefulDataLoader(ds, batch_size=4, num_workers=2)

    _assert_resumes_at_every_batch(make)


# --- factor=Auto() in the workers -----------------------------------------------------

class Slow(IterableDataset):
    """A stream whose reads take ``delay`` seconds: the workers are input-bound."""

    def __init__(self, n, delay):
        self.n, self.delay = n, delay

    def __iter__(self):
        import time

        for i in range(self.n):
            time.sleep(self.delay)
            yield i


@pytest.mark.parametrize("echo", ["before_augmentation", "after_augmentation"])
def test_auto_in_workers_reads_every_example_once_and_uses_none_more_than_max_factor(echo):
    from dataecho import Auto

    ds = EchoDataset(Slow(N, 0.002), augment=tag, echo=echo, factor=Auto(max_factor=3),
                     seed=1, read=Streamed(split="dataecho"))
    rows = _rows(ds, 2)
    used = collections.Counter(int(r[0]) for r in rows)
    assert set(used) == set(range(N)) and max(used.values()) <= 3
    stats = ds.stats()
    assert (stats.fresh_examples, stats.emitted_examples) == (N, len(rows))
    if echo == "before_augmentation":  # every copy augmented anew, in the worker
        assert len({r[1] for r in rows}) == len(rows)


def test_auto_in_workers_resumes_without_losing_or_repeating_a_fresh_example():
    from torchdata.stateful_dataloader import StatefulDataLoader

    from dataecho import Auto

    def make():
        ds = EchoDataset(Slow(N, 0.002), augment=tag, factor=Auto(max_factor=2), seed=1,
                         read=Streamed(split="dataecho"))
        return StatefulDataLoader(ds, batch_size=4, num_workers=2)

    loader = make()
    it = iter(loader)
    head = [next(it) for _ in range(5)]
    state = loader.state_dict()
    del it, loader
    restored = make()
    restored.load_state_dict(state)
    rows = [r for b in head + list(restored) for r in b.tolist()]
    used = collections.Counter(int(r[0]) for r in rows)
    assert set(used) == set(range(N)) and max(used.values()) <= 2


def test_auto_parameters_that_cannot_act_in_workers_are_refused():
    from dataecho import Auto

    with pytest.raises(ValueError, match=r"buffer_size is the post-echo shuffle of a fixed "
                                         r"factor.*pass factor=dataecho.Auto\(buffer_size=8\)"):
        EchoDataset(Numbers(4), factor=Auto(), buffer_size=8)
    with pytest.raises(ValueError, match=r"DataLoader workers have no process group .*"
                                         r"EqualSteps"):
        EchoDataset(Numbers(4), factor=Auto(agree=len))


def _equal_steps_rank(rank, init_file, out_dir):
    import torch.distributed as dist

    from dataecho import Auto
    from dataecho.torch.distributed import EqualSteps

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    # Rank 1 reads fewer and slower examples: it echoes more, and still runs out first
    # (8 examples, at most 16 uses: 4 batches; rank 0 has at least 10).
    stream = Slow(40, 0.001) if rank == 0 else Slow(8, 0.004)
    ds = EchoDataset(stream, factor=Auto(max_factor=2), seed=rank, rank=rank, world_size=2,
                     read=Streamed(split="stream"))
    steps = EqualSteps(DataLoader(ds, batch_size=4, num_workers=1))
    counts = [sum(1 for _ in steps) for _ in range(2)]  # two epochs
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump({"steps": counts, "dropped": steps.dropped}, f)
    dist.destroy_process_group()


def test_equal_steps_ends_every_ranks_epoch_at_the_same_step(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_equal_steps_rank, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2,
             join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["steps"] == ranks[1]["steps"]
    assert all(2 <= s <= 4 for s in ranks[0]["steps"])
    assert ranks[0]["dropped"] == 2 and ranks[1]["dropped"] == 0  # one batch left per epoch


def test_a_stage_stream_without_a_read_counter_is_counted_at_factor_one():
    # No stage of this pipeline counts its reads: the items handed over are counted
    # (this failed at the first next() before).
    from dataecho.stage import Stage

    class Upto(Stage):
        def __init__(self, n):
            self.n, self.i = n, 0

        def __next__(self):
            if self.i >= self.n:
                raise StopIteration
            self.i += 1
            return self.i - 1

        def _config(self):
            return {"n": self.n}

        def _snapshot(self):
            return {"i": self.i}

        def _set_state(self, state):
            self.i = state["i"]

    ds = EchoDataset(Upto(6), factor=1, buffer_size=1)
    assert sorted(_rows(ds, 0, batch_size=2)) == list(range(6))
    assert (ds.stats().fresh_examples, ds.stats().emitted_examples) == (6, 6)


# --- LitData and streams whose state_dict takes the loader's counts (Mosaic) ----------

@pytest.fixture(scope="module")
def lit_dir(tmp_path_factory):
    pytest.importorskip("litdata", reason="needs litdata (dataecho[litdata])")
    out = str(tmp_path_factory.mktemp("litdata") / "optimized")
    # Written by litdata's own writer in a process of its own: optimize() starts worker
    # processes and threads that the DataLoader workers of these tests must not inherit.
    script = ("import litdata\n"
              "def record(i):\n    return {'index': i}\n"
              "if __name__ == '__main__':\n"
              f"    litdata.optimize(fn=record, inputs=list(range({N})), output_dir={out!r},"
              " chunk_size=8, num_workers=1, mode='overwrite')\n")
    path = tmp_path_factory.mktemp("litdata_writer") / "write.py"
    path.write_text(script)
    subprocess.run([sys.executable, str(path)], check=True, capture_output=True, timeout=120)
    return out


def _lit_tag(sample, rng):
    return tag(int(sample["index"]), rng)


def _lit(lit_dir):
    import litdata

    return EchoDataset(litdata.StreamingDataset(lit_dir, shuffle=True, seed=4),
                       augment=_lit_tag, factor=2, buffer_size=6, seed=1)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_litdata_stream_splits_itself_and_every_example_is_used_factor_times(
        lit_dir, num_workers):
    # Fails on the code before this test: dataecho called LitData's state_dict() without
    # the three counts it takes, at the first example.
    ds = _lit(lit_dir)
    assert ds.recipe.read == Streamed(split="stream")
    for _ in range(2):  # two epochs, each complete
        _check_epoch(_rows(ds, num_workers), N, 2)


def test_a_litdata_stream_resumes_at_every_batch(lit_dir):
    from torchdata.stateful_dataloader import StatefulDataLoader

    _assert_resumes_at_every_batch(
        lambda: StatefulDataLoader(_lit(lit_dir), batch_size=4, num_workers=2))


class CountedStream(IterableDataset):
    """A stream that splits itself by worker and checkpoints by the loader's counts.

    ``state_dict(num_samples, from_beginning)`` is the signature of Mosaic's
    ``StreamingDataset`` (whose package imports torchvision, which does not load
    against the CPU torch these tests pin); dataecho reads it as a plain stream.
    """

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        return iter(range(worker, self.n, workers))

    def state_dict(self, num_samples, from_beginning):
        return {"sample_in_epoch": num_samples}

    def load_state_dict(self, state):
        raise AssertionError("a state of the loader's counts must not be loaded per worker")


def test_a_stream_whose_state_dict_takes_the_loaders_counts_resumes_at_every_batch():
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        ds = EchoDataset(CountedStream(30), augment=tag, factor=2, buffer_size=5, seed=2,
                         read=Streamed(split="stream"))
        return StatefulDataLoader(ds, batch_size=4, num_workers=2)

    _check_epoch([row for batch in make() for row in batch.tolist()], 30, 2)
    _assert_resumes_at_every_batch(make)


def test_a_stream_state_of_another_split_is_refused_not_replayed():
    # Fails on the code before this test: a state of the one reader of a stream that
    # splits itself was accepted by reader 0 of 2, which skipped and repeated examples.
    ds = EchoDataset(CountedStream(30), factor=2, buffer_size=5, seed=2,
                     read=Streamed(split="stream"))
    it = iter(DataLoader(ds, batch_size=4))
    next(it)
    state = json.loads(json.dumps(ds.state_dict()))
    restored = EchoDataset(CountedStream(30), factor=2, buffer_size=5, seed=2, rank=0,
                           world_size=2, read=Streamed(split="stream"))
    restored.load_state_dict(state)
    with pytest.raises(ValueError, match=r"saved with other parameters: reader \(saved \[0, "
                                         r"1\], here \[0, 2\]\).*other number of DataLoader "
                                         r"workers or ranks"):
        next(iter(DataLoader(restored, batch_size=4)))


class Resumable(IterableDataset):
    """A stream that checkpoints itself and, like many, resets its position when a
    pass ends; it splits itself by worker when ``splits``."""

    def __init__(self, n, splits):
        self.n, self.splits, self.pos, self.epoch = n, splits, 0, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        info = get_worker_info() if self.splits else None
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        mine = list(range(worker, self.n, workers))
        while self.pos < len(mine):
            self.pos += 1
            yield torch.tensor([1000 * self.epoch + mine[self.pos - 1]])
        self.pos = 0

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = state["pos"]


def _two_epochs_resumed_at_every_batch(make, epochs=2):
    """Stops after every batch of ``epochs`` epochs, resumes in a new loader; the batches
    after each resume, appended to those before, must be the uninterrupted run's."""
    loader = make()
    full = [b.tolist() for _ in range(epochs) for b in loader]
    for k in range(len(full) + 1):
        reference, seen, epoch = make(), 0, 0
        state = reference.state_dict() if k == 0 else None
        while state is None:  # k batches in, in epoch `epoch`
            for _ in reference:
                seen += 1
                if seen == k:
                    state = json.loads(json.dumps(reference.state_dict()))
                    break
            else:
                epoch += 1
        restored = make()
        restored.load_state_dict(state)
        rest = [b.tolist() for _ in range(epoch, epochs) for b in restored]
        assert rest == full[k:], (k, len(rest), len(full) - k)


@pytest.mark.parametrize("split", ["stream", "dataecho"])
@pytest.mark.parametrize("factor", [2, 1.5, "auto"])
@pytest.mark.parametrize(("num_workers", "persistent"), [(0, False), (1, False), (2, False),
                                                         (2, True)])
def test_a_stateful_stream_resumes_at_every_batch_of_every_epoch(
        split, factor, num_workers, persistent):
    # Fails on the code before this test for a stream read through by a worker whose
    # last batch was full (dataecho split, factor 1.5, two workers): its state already
    # named the start of the next pass, and the restore read the epoch again.
    from torchdata.stateful_dataloader import StatefulDataLoader

    from dataecho import Auto

    auto = factor == "auto"

    def make():
        ds = EchoDataset(Resumable(12, splits=split == "stream"), seed=0,
                         factor=Auto(max_factor=1) if auto else factor,
                         read=Streamed(split=split), **({} if auto else {"buffer_size": 3}))
        return StatefulDataLoader(ds, batch_size=2, num_workers=num_workers,
                                  persistent_workers=persistent)

    _two_epochs_resumed_at_every_batch(make)
