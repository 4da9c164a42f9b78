"""Tests of dataecho.demo.remote.shards and its image codec: writing and reading tar shards."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from dataecho.demo.remote import (
    ShardError,
    decode_image,
    encode_image,
    iter_shard,
    read_index,
    write_shards,
)

FMNIST = Path("/usr/share/datasets/fashion-mnist")
needs_pillow = pytest.mark.skipif(
    importlib.util.find_spec("PIL") is None,
    reason="the image codec needs Pillow (dataecho[demo])")


@pytest.fixture(scope="module")
def subset() -> tuple[np.ndarray, np.ndarray]:
    """300 real Fashion-MNIST test images, or random ones where the package is absent."""
    if (FMNIST / "t10k-images-idx3-ubyte.gz").is_file():
        from dataecho.datasets import read_idx

        images = read_idx(FMNIST / "t10k-images-idx3-ubyte.gz", ndim=3)[:300]
        labels = read_idx(FMNIST / "t10k-labels-idx1-ubyte.gz", ndim=1)[:300]
        return images, labels.astype(np.int64)
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (300, 28, 28), np.uint8), rng.integers(0, 10, 300)


def tar(*members: tuple[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


@needs_pillow
def test_every_image_and_label_survives_the_round_trip(
    subset: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    images, labels = subset
    names = write_shards(images, labels, tmp_path, shard_size=128)
    assert names == ["train-00000.tar", "train-00001.tar", "train-00002.tar"]
    index = json.loads((tmp_path / "train-index.json").read_bytes())
    assert [s["samples"] for s in index["shards"]] == [128, 128, 44]
    assert read_index((tmp_path / "train-index.json").read_bytes(), "i") == [
        (name, s["samples"]) for name, s in zip(names, index["shards"], strict=True)]  # fmt: skip
    samples = [s for name in names for s in iter_shard((tmp_path / name).read_bytes(), name)]
    assert [key for key, _, _ in samples] == [f"{i:08d}" for i in range(300)]
    assert [label for _, _, label in samples] == labels.tolist()
    decoded = np.stack([decode_image(data) for _, data, _ in samples])
    assert decoded.dtype == np.uint8 and np.array_equal(decoded, images)


@needs_pillow
def test_colour_png_is_lossless_and_jpeg_is_close(tmp_path: Path) -> None:
    rgb = np.random.default_rng(1).integers(0, 256, (4, 8, 8, 3), np.uint8)
    assert np.array_equal(decode_image(encode_image(rgb[0])), rgb[0])
    smooth = np.broadcast_to(np.linspace(0, 255, 32, dtype=np.uint8), (3, 32, 32)).copy()
    names = write_shards(smooth, np.arange(3), tmp_path, fmt="jpg", prefix="val")
    (key, data, label), *_ = iter_shard((tmp_path / names[0]).read_bytes(), names[0])
    assert (key, label) == ("00000000", 0) and data[:3] == b"\xff\xd8\xff"  # JPEG magic
    assert np.abs(decode_image(data).astype(int) - smooth[0]).max() <= 4


@needs_pillow
def test_writing_the_same_arrays_again_writes_nothing(tmp_path: Path) -> None:
    images, labels = np.zeros((5, 4, 4), np.uint8), np.arange(5)
    names = write_shards(images, labels, tmp_path, shard_size=2)
    stamps = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    assert write_shards(images, labels, tmp_path, shard_size=2) == names
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == stamps


@needs_pillow
def test_new_arrays_replace_the_shards_and_remove_stale_ones(tmp_path: Path) -> None:
    write_shards(np.zeros((5, 4, 4), np.uint8), np.arange(5), tmp_path, shard_size=2)
    names = write_shards(np.ones((3, 4, 4), np.uint8), np.arange(3), tmp_path, shard_size=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names, "train-index.json"])
    _, data, label = next(iter_shard((tmp_path / names[1]).read_bytes(), names[1]))
    assert label == 2 and decode_image(data).max() == 1


@needs_pillow
@pytest.mark.parametrize("damage", [b"{", b"[1, 2]", b'{"shards": [{"name": 3}]}'])
def test_a_damaged_index_is_rewritten(damage: bytes, tmp_path: Path) -> None:
    images, labels = np.zeros((3, 4, 4), np.uint8), np.arange(3)
    names = write_shards(images, labels, tmp_path, shard_size=2)
    (tmp_path / "train-index.json").write_bytes(damage)
    assert write_shards(images, labels, tmp_path, shard_size=2) == names
    assert read_index((tmp_path / "train-index.json").read_bytes(), "i") == [(names[0], 2),
                                                                              (names[1], 1)]


@pytest.mark.parametrize(
    ("images", "labels", "options", "error", "message"),
    [
        (np.zeros((2, 4, 4)), np.arange(2), {}, TypeError, "images must be uint8, got float64"),
        (np.zeros((2, 4), np.uint8), np.arange(2), {}, ValueError, r"\[N, H, W\] or \[N, H, W, 3"),
        (np.zeros((2, 4, 4), np.uint8), np.arange(3), {}, ValueError, "labels must be 2 integers"),
        (np.zeros((2, 4, 4), np.uint8), np.array([0, -1]), {}, ValueError, "labels must be >= 0"),
        (np.zeros((2, 4, 4), np.uint8), np.arange(2), {"shard_size": 0}, ValueError,
         "shard_size must be >= 1, got 0"),
        (np.zeros((2, 4, 4), np.uint8), np.arange(2), {"shard_size": 2.0}, TypeError,
         "shard_size must be an int, got 2.0"),
        (np.zeros((2, 4, 4), np.uint8), np.arange(2), {"fmt": "gif"}, ValueError,
         "fmt must be 'png' or 'jpg', got 'gif'"),
    ],
)
def test_write_shards_rejects_bad_input(
    images: np.ndarray, labels: np.ndarray, options: dict[str, object],
    error: type[Exception], message: str, tmp_path: Path,
) -> None:
    with pytest.raises(error, match=message):
        write_shards(images, labels, tmp_path, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("shard", "message"),
    [
        (b"this is not a tar file" * 30, r"shard 'bad\.tar' is not a valid tar file"),
        (tar(("a.png", b"x"), ("a.cls", b"1"), ("b.png", b"y")),
         r"sample 'b' in shard 'bad\.tar' has no label \(\.cls\)"),
        (tar(("a.cls", b"1")), r"sample 'a' in shard 'bad\.tar' has no image"),
        (tar(("a.png", b"x"), ("a.cls", b"one")), r"label of sample 'a' in shard 'bad\.tar'"),
        (tar(("a.png", b"x"), ("b.cls", b"1"), ("a.cls", b"1")), "has no label"),
        (tar(("a.png", b"x"), ("a.cls", b"1"), ("b.png", b"x"), ("b.cls", b"1"), ("a.json", b"")),
         r"members of sample 'a' in shard 'bad\.tar' are not adjacent"),
        (tar(), r"shard 'bad\.tar' holds no samples"),
    ],
)
def test_corrupt_shard_error_names_the_shard(shard: bytes, message: str) -> None:
    with pytest.raises(ShardError, match=message):
        list(iter_shard(shard, "bad.tar"))


@needs_pillow
@pytest.mark.parametrize("cut", [0.1, 1 / 3, 0.5, 0.9, 1.0])
def test_truncated_shard_error_names_the_shard(cut: float, tmp_path: Path) -> None:
    name = write_shards(np.zeros((4, 16, 16), np.uint8), np.arange(4), tmp_path)[0]
    data = (tmp_path / name).read_bytes()
    end = len(data.rstrip(b"\0"))  # the last byte of content, before the zero padding
    with pytest.raises(ShardError, match=r"shard 'train-00000\.tar' is not a valid tar .*trunc"):
        list(iter_shard(data[: int(end * cut)], name))


def test_shard_cut_at_a_sample_boundary_is_still_detected() -> None:
    whole = tar(("a.png", b"x"), ("a.cls", b"1"), ("b.png", b"y"), ("b.cls", b"2"))
    with pytest.raises(ShardError, match="truncated"):
        list(iter_shard(whole[: 512 * 4], "cut.tar"))  # two members of header + one block


def test_unknown_members_are_skipped_like_webdataset_does() -> None:
    shard = tar(("a.png", b"x"), ("a.json", b"{}"), ("a.cls", b" 7\n"))
    assert list(iter_shard(shard, "s.tar")) == [("a", b"x", 7)]


def test_codec_without_pillow_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)  # makes `from PIL import Image` fail
    with pytest.raises(ImportError, match=r"needs Pillow: `pip install pillow`"):
        decode_image(b"")


def test_shard_error_is_a_value_error() -> None:
    assert issubclass(ShardError, ValueError)


@needs_pillow
def test_undecodable_image_and_bad_index_are_reported() -> None:
    with pytest.raises(ValueError, match=r"data must be a PNG or JPEG image, got 4 bytes"):
        decode_image(b"GIF8")
    with pytest.raises(ShardError, match=r"x-index\.json must be a dataecho-shards/1 index"):
        read_index(b'{"format": "other"}', "x-index.json")
    with pytest.raises(ValueError, match="fmt must be 'png' or 'jpg', got 'bmp'"):
        encode_image(np.zeros((2, 2), np.uint8), "bmp")
