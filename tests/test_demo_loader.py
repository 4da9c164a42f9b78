"""The demo's stream and arms: TarShards + decode_sample, EchoDataset, EchoBatches."""

import runpy
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the demo's loaders are DataLoaders")

from dataecho import Echo, Map, Shuffle, TarShards
from dataecho.demo.augment import PaddedDecode, crop_flip
from dataecho.demo.remote import ShardError, ShardServer, decode_sample, read_shards, write_shards
from helpers.checkpoint import assert_restores_everywhere

pytestmark = pytest.mark.torch

N, SHARD = 22, 4  # six shards, the last one short


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    images = (np.arange(N * 16) % 251).astype(np.uint8).reshape(N, 4, 4)
    write_shards(images, np.arange(N) % 10, root, shard_size=SHARD)
    with ShardServer(root) as server:
        yield server.url


def stream(url, **kwargs):
    shards = read_shards(url)
    return Map(TarShards(shards.urls, digests=shards.digests, **kwargs), decode_sample)


def test_the_stream_reads_every_sample_once_per_epoch_with_labels_pixels_and_index(url):
    shards = read_shards(url)
    assert shards.num_samples == N and len(shards.urls) == 6
    samples = list(stream(url, num_epochs=2, seed=3))
    for epoch in (samples[:N], samples[N:]):
        assert sorted(index for _, _, index in epoch) == list(range(N))
    for image, label, index in samples:
        assert label == index % 10
        want = np.arange(index * 16, index * 16 + 16).reshape(4, 4) % 251
        assert image.tolist() == want.tolist()


def test_restore_inside_echo_augment_shuffle_yields_the_rest(url):
    def make():
        return Shuffle(Map(Echo(stream(url, seed=4), 2.5, seed=1), crop_flip(pad=0), seed=2), 7,
                       seed=3)

    outputs = assert_restores_everywhere(make, every=3)
    assert len({index for _, _, index in outputs}) == N


def test_an_image_that_does_not_decode_names_its_sample_and_shard():
    sample = {"__key__": "00000004", "__url__": "http://host/train-00001.tar",
              "png": b"not a png", "cls": b"4"}
    with pytest.raises(ShardError, match=r"sample '00000004' in shard "
                                         r"'http://host/train-00001\.tar' does not decode"):
        decode_sample(sample)


@pytest.mark.parametrize("factor, variant", [(1.0, "before_augmentation"),
                                             (2.0, "before_augmentation"),
                                             (2.0, "after_augmentation"), (2.0, "batch"),
                                             (2.0, "device")])
def test_two_workers_train_on_every_example_of_an_epoch_factor_times(url, factor, variant):
    from dataecho.demo.loader import make_loader
    from dataecho.demo.train import EpochBatches

    # Each worker reads three of the six shards: 12 or 10 examples, whole batches of 2.
    arm = make_loader(url, factor=factor, variant=variant, batch_size=2, buffer_size=4,
                      num_workers=2)
    assert arm.num_samples == N
    epochs = EpochBatches(arm.loader, arm.num_samples)
    uids = []
    while epochs.epoch < 2:
        _, got = next(epochs)
        assert len(got) == 2  # every batch full
        uids += got
    epochs.close()
    per_epoch = int(factor * N)
    assert len(uids) == 2 * per_epoch + 2  # and the first batch of epoch 2
    counts = np.bincount(uids[: 2 * per_epoch], minlength=2 * N)
    assert counts.tolist() == [factor] * (2 * N)  # every fresh example, factor times
    del arm, epochs


def test_the_arms_show_the_public_objects_they_are_made_of(url):
    from dataecho.demo.loader import make_loader

    baseline = make_loader(url, batch_size=2, buffer_size=4, num_workers=0).pipeline
    auto = make_loader(url, factor="auto", batch_size=2, buffer_size=4, num_workers=0).pipeline
    batches = make_loader(url, factor="auto", variant="batch", batch_size=2, buffer_size=8,
                          num_workers=0).pipeline
    assert baseline.startswith("DataLoader(EchoDataset(Map(TarShards(<6 urls: ")
    assert "fn=PaddedDecode(pad=2)), echo='before_augmentation', factor=1.0, " in baseline
    assert "augment=CropFlip(size=None, pad=2, flip=True)" in baseline
    assert "drop_last=True" in baseline
    assert "factor=Auto(buffer_size=4)" in auto  # the cap: Auto's default, 8 here
    capped = make_loader(url, factor="auto", batch_size=2, buffer_size=4, num_workers=0,
                         max_factor=8).pipeline
    assert "factor=Auto(max_factor=8, buffer_size=4)" in capped
    assert batches.startswith("EchoBatches(DataLoader(EchoDataset(") and batches.endswith(
        "factor=Auto(buffer_size=8), seed=0, clone=False)")


@pytest.mark.parametrize("factor, window", [(1, 4), (2, 8), (4, 16), (2.5, 10)])
def test_the_window_after_a_fixed_echo_holds_buffer_size_distinct_examples(url, factor, window):
    from dataecho.demo.loader import make_loader

    arm = make_loader(url, factor=factor, batch_size=2, buffer_size=4, num_workers=0)
    assert f"buffer_size={window}," in arm.pipeline
    after = make_loader(url, factor=factor, variant="after_augmentation", batch_size=2,
                        buffer_size=4, num_workers=0)
    assert f"buffer_size={window}," in after.pipeline


def test_crop_flip_keeps_pixels_label_and_index_and_varies_with_the_generator():
    image = np.pad(np.arange(1, 37, dtype=np.uint8).reshape(6, 6), 2)  # as PaddedDecode pads
    augment = crop_flip(pad=2)
    views = [augment((image, 3, 7), np.random.default_rng(k)) for k in range(20)]
    assert all(x.shape == (6, 6) and x.dtype == np.uint8 and (y, u) == (3, 7) for x, y, u in views)
    assert len({x.tobytes() for x, _, _ in views}) > 5
    assert all(set(x.ravel()) <= set(image.ravel()) for x, _, _ in views)
    with pytest.raises(ValueError, match="pad must be"):
        PaddedDecode(pad=-1)


def test_the_remote_shards_example_resumes_without_losing_an_image_and_leaves_no_shards(
        capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where its temporary shards go
    example = Path(__file__).parent.parent / "examples" / "remote_shards.py"
    runpy.run_path(str(example), run_name="__main__")
    assert "fresh images: 2000 of 2000" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # the shard folder is removed, every run


def test_worker_memory_is_read_from_the_fork_servers_workers(url):
    import multiprocessing

    from dataecho.demo.loader import make_loader
    from dataecho.demo.train import EpochBatches, worker_peak_mb

    def peak(pid):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:  # ended
            return None
        return max(int(line.split()[1]) / 1024 for line in status.splitlines()
                   if line.startswith("VmHWM:"))

    for variant in ("before_augmentation", "batch"):  # EchoBatches hides its workers
        before = set(multiprocessing.active_children())  # other tests' workers, stopping
        arm = make_loader(url, factor=2.0, variant=variant, batch_size=2, buffer_size=4,
                          num_workers=1)
        epochs = EpochBatches(arm.loader, arm.num_samples)
        next(epochs)
        # Workers are children of the fork server, not of this process; the Process
        # objects are still this process's.
        workers = [p.pid for p in set(multiprocessing.active_children()) - before]
        assert workers and not set(workers) & _child_pids()
        own = getattr(epochs.it, "_workers", None)
        if own is not None:  # not a process another test left starting meanwhile
            assert {w.pid for w in own} <= set(workers)
            workers = [w.pid for w in own]
        before_read = {pid: peak(pid) for pid in workers}  # a peak only grows
        before_read = {pid: mb for pid, mb in before_read.items() if mb is not None}
        got = worker_peak_mb(epochs.it)
        # Read over the processes alive before and after it (another test's process
        # may have ended meanwhile).
        alive = [pid for pid in before_read if Path(f"/proc/{pid}/status").exists()]
        assert alive and got is not None and got >= max(before_read[pid] for pid in alive)
        epochs.close()
        del arm, epochs


def _child_pids():
    return {int(pid) for path in Path("/proc/self/task").glob("*/children")
            for pid in path.read_text().split()}


def test_the_device_arm_crops_each_copy_where_the_trainer_runs(url):
    import torch

    from dataecho.demo.loader import make_loader

    arm = make_loader(url, factor=2, variant="device", batch_size=2, buffer_size=4,
                      num_workers=0, pad=1)
    assert arm.pipeline.startswith("DeviceEcho(DataLoader(EchoDataset(Map(TarShards(")
    assert "augment=BatchCropFlip(pad=1), factor=2" in arm.pipeline
    batches = list(arm.loader)
    images = torch.cat([b[0] for b in batches])
    indices = torch.cat([b[2] for b in batches]).tolist()
    assert images.shape[1:] == (4, 4)  # the decode's 6x6 padded images, cropped back
    assert sorted(indices) == sorted(2 * list(range(N - N % 2)))  # whole batches of 2
    firsts = {}
    differ = 0
    for image, index in zip(images, indices, strict=True):
        differ += index in firsts and not torch.equal(firsts[index], image)
        firsts.setdefault(index, image)
    assert differ > 0  # copies cropped and flipped anew
