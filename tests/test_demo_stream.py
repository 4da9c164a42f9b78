"""The demo's shard stream: exact checkpoints, disjoint readers, per-epoch order."""

import runpy
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the demo's augmentation (CropFlip) needs torch")

from dataecho import Echo, Map, Shuffle
from dataecho.demo.augment import CropFlip
from dataecho.demo.remote import ShardServer, write_shards
from dataecho.demo.stream import Sample, ShardStream
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


def uids(stream):
    return [sample.uid for sample in stream]


def test_reads_every_sample_once_per_epoch_with_labels_and_pixels(url):
    samples = list(ShardStream(url, num_epochs=2, seed=3))
    first, second = samples[:N], samples[N:]
    assert sorted(s.uid for s in first) == list(range(N))
    assert sorted(s.uid for s in second) == list(range(N, 2 * N))
    for s in first:
        assert s.label == s.uid % 10
        want = np.arange(s.uid * 16, s.uid * 16 + 16).reshape(4, 4) % 251
        assert s.image.tolist() == want.tolist()


def test_each_epoch_permutes_the_shards_from_seed_and_epoch(url):
    stream = ShardStream(url, seed=5)
    assert stream.order(0) != stream.order(1)
    assert stream.order(0) == ShardStream(url, seed=5).order(0)
    assert sorted(stream.order(0)) == list(range(len(stream.shards)))


@pytest.mark.parametrize("num_shards", [1, 2, 3, 6])
def test_readers_split_the_shards_without_loss_or_duplication(url, num_shards):
    parts = [uids(ShardStream(url, num_epochs=2, seed=1, shard_index=k, num_shards=num_shards))
             for k in range(num_shards)]
    every = sorted(u for part in parts for u in part)
    assert every == list(range(2 * N))


def test_restore_at_every_step_yields_the_rest(url):
    assert_restores_everywhere(lambda: ShardStream(url, num_epochs=2, seed=2, prefetch=1))


def test_restore_of_a_worker_shard_yields_the_rest(url):
    assert_restores_everywhere(
        lambda: ShardStream(url, num_epochs=2, seed=2, shard_index=1, num_shards=2))


def test_restore_inside_echo_augment_shuffle_yields_the_rest(url):
    def make():
        stream = ShardStream(url, num_epochs=1, seed=4)
        return Shuffle(Map(Echo(stream, 2.5, seed=1), CropFlip(pad=1), seed=2), 7, seed=3)

    outputs = assert_restores_everywhere(make, every=3)
    assert len({uid for _, _, uid in outputs}) == N


def test_more_readers_than_shards_is_refused_with_the_remedy(url):
    with pytest.raises(ValueError, match="use fewer workers"):
        ShardStream(url, shard_index=0, num_shards=7)


def test_repr_shows_the_parameters(url):
    assert "ShardStream(url=" in repr(ShardStream(url, seed=9))
    assert "seed=9" in repr(ShardStream(url, seed=9))


def test_crop_flip_keeps_pixels_label_and_uid_and_varies_with_the_generator():
    image = np.arange(1, 37, dtype=np.uint8).reshape(6, 6)
    augment = CropFlip(pad=2)
    views = [augment(Sample(image, 3, 7), np.random.default_rng(k)) for k in range(20)]
    assert all(x.shape == (6, 6) and x.dtype == np.uint8 and (y, u) == (3, 7)
               for x, y, u in views)
    assert len({x.tobytes() for x, _, _ in views}) > 5
    assert all(set(x.ravel()) <= set(image.ravel()) | {0} for x, _, _ in views)
    with pytest.raises(ValueError, match="pad must be"):
        CropFlip(pad=-1)


def test_the_remote_shards_example_resumes_without_losing_an_image_and_leaves_no_shards(
        capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where its temporary shards go
    example = Path(__file__).parent.parent / "examples" / "remote_shards.py"
    runpy.run_path(str(example), run_name="__main__")
    assert "fresh images: 2000 of 2000" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # the shard folder is removed, every run


def _damage_one_image(root, victim):
    """Replaces the PNG bytes of sample ``victim`` by garbage, index digests updated."""
    import hashlib
    import io
    import json
    import tarfile

    index_path = Path(root) / "train-index.json"
    index = json.loads(index_path.read_text())
    for entry in index["shards"]:
        path = Path(root) / entry["name"]
        with tarfile.open(path) as tar:
            members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
        if f"{victim:08d}.png" not in [m.name for m, _ in members]:
            continue
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for member, data in members:
                if member.name == f"{victim:08d}.png":
                    data = b"\x89PNG\r\n\x1a\n" + b"not an image" * 4
                    member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
        path.write_bytes(buffer.getvalue())
        entry["bytes"] = len(buffer.getvalue())
        entry["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
        index_path.write_text(json.dumps(index))
        return entry["name"]
    raise AssertionError(f"no sample {victim}")


def test_a_corrupt_image_names_the_shard_and_the_sample(tmp_path):
    images = (np.arange(N * 16) % 251).astype(np.uint8).reshape(N, 4, 4)
    write_shards(images, np.arange(N) % 10, tmp_path, shard_size=SHARD)
    shard = _damage_one_image(tmp_path, victim=9)
    with ShardServer(tmp_path) as server, ShardStream(server.url, num_epochs=1) as stream:
        message = (rf"the image of sample '00000009' in shard '{server.url}/{shard}' cannot "
                   r"be decoded: decode_image: data must be a PNG or JPEG")
        with pytest.raises(ValueError, match=message) as e:
            list(stream)
    assert "write it again with write_shards" in str(e.value)
