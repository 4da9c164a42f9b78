"""Tests of dataecho.TarShards: WebDataset interop, splits, order, exact resume, digests."""

from __future__ import annotations

import collections
import contextlib
import gc
import hashlib
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataecho import FetchError, Map, ShardError, Shuffle, TarShards
from dataecho.demo.remote import ShardServer, write_shards
from dataecho.tarformat import expand_urls
from helpers.checkpoint import assert_restores_everywhere
from helpers.threads import wait_until

wds = pytest.importorskip("webdataset", reason="interop tests need dataecho[webdataset]")
needs_pillow = pytest.mark.skipif(importlib.util.find_spec("PIL") is None,
                                  reason="write_shards encodes PNG with Pillow (dataecho[demo])")

# Every test must leave no server or download thread behind (fixture in conftest.py).
pytestmark = pytest.mark.usefixtures("no_thread_leak")

N, PER_SHARD = 23, 5  # five shards, the last one short


def payload(i: int) -> dict[str, bytes]:
    return {"bin": bytes([i % 251]) * (20_000 + i), "cls": str(i % 10).encode(),
            "meta.json": json.dumps({"i": i}).encode()}


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Five shards written by webdataset's TarWriter."""
    root = tmp_path_factory.mktemp("wds")
    urls = []
    for s in range(0, N, PER_SHARD):
        path = root / f"part-{s // PER_SHARD:06d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for i in range(s, min(s + PER_SHARD, N)):
                sink.write({"__key__": f"{i:06d}", **payload(i)})
        urls.append(str(path))
    return urls


@pytest.fixture(scope="module")
def served(local: list[str]) -> Iterator[tuple[ShardServer, list[str]]]:
    root = Path(local[0]).parent
    with ShardServer(root) as server:
        yield server, [f"{server.url}/{Path(u).name}" for u in local]


def fields(sample: dict[str, Any]) -> dict[str, Any]:
    """A sample's key and files, without webdataset's bookkeeping entries."""
    return {k: v for k, v in sample.items() if k == "__key__" or not k.startswith("__")}


def keys(stage: Any) -> list[str]:
    return [sample["__key__"] for sample in stage]


def test_reads_every_sample_of_webdataset_tarwriter_shards_with_its_bytes(local):
    samples = list(TarShards(local, shuffle=False))
    assert [fields(s) for s in samples] == [{"__key__": f"{i:06d}", **payload(i)}
                                            for i in range(N)]
    assert samples[0]["__url__"] == local[0] and samples[-1]["__url__"] == local[-1]


def test_reads_webdataset_shardwriter_output_through_a_brace_pattern(tmp_path):
    with wds.ShardWriter(str(tmp_path / "w-%06d.tar"), maxcount=4, verbose=0) as sink:
        for i in range(10):
            sink.write({"__key__": f"s{i}", "txt": f"text {i}".encode(), "cls": b"1"})
    reader = TarShards(str(tmp_path / "w-{000000..000002}.tar"), shuffle=False)
    assert [(s["__key__"], s["txt"]) for s in reader] == [
        (f"s{i}", f"text {i}".encode()) for i in range(10)]


def test_reads_the_same_samples_as_webdataset_does_local_file_url_and_http(local, served):
    _, urls = served
    theirs = [fields(s) for s in wds.WebDataset(local, shardshuffle=False)]
    assert len(theirs) == N
    assert [fields(s) for s in TarShards(local, shuffle=False)] == theirs
    assert [fields(s) for s in TarShards([f"file://{u}" for u in local], shuffle=False)] == theirs
    assert [fields(s) for s in TarShards(urls, shuffle=False, prefetch=2)] == theirs
    assert [fields(s) for s in wds.WebDataset(urls, shardshuffle=False)] == theirs


@needs_pillow
def test_webdataset_reads_shards_written_by_write_shards(tmp_path):
    images = (np.arange(7 * 16) % 251).astype(np.uint8).reshape(7, 4, 4)
    names = write_shards(images, np.arange(7) % 3, tmp_path, shard_size=3)
    urls = [str(tmp_path / name) for name in names]
    ours = [fields(s) for s in TarShards(urls, shuffle=False)]
    assert [fields(s) for s in wds.WebDataset(urls, shardshuffle=False)] == ours
    assert [s["cls"] for s in ours] == [b"0", b"1", b"2", b"0", b"1", b"2", b"0"]
    decoded = wds.WebDataset(urls, shardshuffle=False).decode("l8").to_tuple("png", "cls")
    assert [np.asarray(img).tolist() for img, _ in decoded] == images.tolist()


@pytest.mark.parametrize("num_shards", [1, 2, 3, 5])
def test_readers_split_the_shards_disjoint_and_complete(local, num_shards):
    parts = []
    for k in range(num_shards):
        reader = TarShards(local, seed=1, num_epochs=2, shard_index=k, num_shards=num_shards)
        parts.append([(reader.epoch, s["__key__"]) for s in reader])
    every = sorted(x for part in parts for x in part)
    assert every == sorted((e, f"{i:06d}") for e in (0, 1) for i in range(N))


def test_each_epoch_permutes_the_shards_from_seed_and_epoch(local):
    reader = TarShards(local, seed=5)
    assert reader.order(0) != reader.order(1)
    assert reader.order(0) == TarShards(local, seed=5).order(0) != TarShards(local, seed=6).order(0)
    assert sorted(reader.order(0)) == list(range(len(local)))
    assert TarShards(local, shuffle=False).order(3) == list(range(len(local)))
    first = keys(TarShards(local, seed=5, num_epochs=2))
    assert first == keys(TarShards(local, seed=5, num_epochs=2))
    assert first[:N] != first[N:] and sorted(first[:N]) == sorted(first[N:])
    assert keys(TarShards(local, seed=5, epoch=1)) == first[N:]


def test_restore_at_every_sample_over_two_epochs_local(local):
    def make() -> Shuffle[Any]:
        return Shuffle(TarShards(local, seed=2, num_epochs=2), 4, seed=3)

    assert len(assert_restores_everywhere(make)) == 2 * N


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_restore_at_every_sample_over_two_epochs_http(served, prefetch):
    _, urls = served
    outputs = assert_restores_everywhere(
        lambda: TarShards(urls, seed=2, num_epochs=2, shard_index=1, num_shards=2,
                          prefetch=prefetch), every=2)
    assert len(outputs) == len(list(TarShards(urls, seed=2, num_epochs=2, shard_index=1,
                                              num_shards=2)))


def test_restore_reads_no_earlier_shard_and_seeks_past_skipped_data(local, monkeypatch):
    reader = TarShards(local, seed=0)
    for _ in range(PER_SHARD * 2 + 3):  # two whole shards and three samples of the third
        next(reader)
    state = json.loads(json.dumps(reader.state_dict()))
    want = list(reader)
    opened: list[tuple[str, Counting]] = []

    def counting_open(path: str, mode: str = "r") -> Counting:
        opened.append((path, Counting(path)))
        return opened[-1][1]

    monkeypatch.setattr("dataecho.tarshards.open", counting_open, raising=False)
    restored = TarShards(local, seed=0)
    restored.load_state_dict(state)
    first = next(restored)
    current = local[reader.order(0)[2]]
    assert [path for path, _ in opened] == [current]
    # The tar headers (a pax header, its data and the header proper: 1.5 kB a member)
    # and sample 3 itself, but not the 60 kB of data of the three samples skipped.
    assert opened[0][1].data_read < 20_100 + 5 * 3 * 1536 + 1024
    assert [first, *restored] == want
    assert [path for path, _ in opened] == [local[k] for k in reader.order(0)[2:]]


def test_restore_over_http_downloads_the_current_shard_and_later_ones_only(local):
    with ShardServer(Path(local[0]).parent) as server:
        urls = [f"{server.url}/{Path(u).name}" for u in local]
        reader = TarShards(urls, seed=0, prefetch=0)
        for _ in range(PER_SHARD * 3 + 1):
            next(reader)
        state, before = reader.state_dict(), server.requests
        restored = TarShards(urls, seed=0, prefetch=0)
        restored.load_state_dict(state)
        assert list(restored) == list(reader)
        # The restored reader downloads shards 4 and 5; the first one had 4 already.
        assert server.requests - before == 3


class Counting(io.FileIO):
    """A file that counts the bytes read from it, headers included."""

    data_read = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.data_read += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        n = super().readinto(buffer) or 0
        self.data_read += n
        return n


def flipped(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert data.count(old) == 1
    path.write_bytes(data.replace(old, new))


@needs_pillow
def test_a_flipped_label_digit_fails_the_digest_check_naming_the_shard(tmp_path):
    from dataecho.demo.remote import read_shards

    names = write_shards(np.zeros((6, 2, 2), np.uint8), np.arange(6), tmp_path, shard_size=3)
    index = json.loads((tmp_path / "train-index.json").read_bytes())
    sha = index["shards"][1]["sha256"]
    # Sample 4's label "4" sits alone in its 512-byte block: flip it to "5".
    flipped(tmp_path / names[1], b"4" + bytes(511), b"5" + bytes(511))
    urls = [str(tmp_path / name) for name in names]
    # the tar structure survives: without a digest the damage goes unseen
    assert len(list(TarShards(urls, shuffle=False, digests=None))) == 6
    message = (rf"shard '.*train-00001\.tar' has \d+ bytes and sha256 [0-9a-f]{{64}}, but the "
               rf"digests list \d+ bytes and sha256 {sha}")
    with pytest.raises(ShardError, match=message):
        list(TarShards(urls, shuffle=False, digests=index))
    with pytest.raises(ShardError, match=message):  # the index beside the shards, by default
        list(TarShards(urls, shuffle=False))
    with pytest.raises(ShardError, match=message):  # and in every worker's reader
        list(TarShards(urls, shuffle=False).with_reader(0, 1, epoch=0))
    assert len(list(TarShards(urls, digests=None).with_reader(0, 1, epoch=0))) == 6
    with ShardServer(tmp_path) as server, pytest.raises(ShardError, match=r"train-00001\.tar"):
        shards = read_shards(server.url)  # the digests come with the served index
        list(TarShards(shards.urls, digests=shards.digests))


def test_digests_by_name_or_url_check_size_and_sha256(local):
    table = {Path(u).name: (Path(u).stat().st_size, hashlib.sha256(Path(u).read_bytes())
                            .hexdigest()) for u in local}  # fmt: skip
    assert len(list(TarShards(local, digests=table))) == N
    wrong = {**table, Path(local[2]).name: (1, None)}
    with pytest.raises(ShardError, match=r"part-000002\.tar' has \d+ bytes, but the digests "
                                         r"list 1 bytes"):
        list(TarShards(local, shuffle=False, digests=wrong))
    with pytest.raises(ValueError, match=r"digests has no entry for shard .*part-000004\.tar"):
        TarShards(local, digests={Path(u).name: table[Path(u).name] for u in local[:4]})
    with pytest.raises(ValueError, match="digests must map each shard to"):
        TarShards(local, digests={"x": 3})


def test_a_corrupt_tar_names_the_shard_and_the_sample(local, tmp_path):
    data = bytearray(Path(local[0]).read_bytes())
    bad = tmp_path / "bad.tar"
    header = data.index(b"000002.bin")  # the first member of the third sample
    data[header + 148 : header + 156] = b"garbage!"  # its header checksum
    bad.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=r"shard '.*bad\.tar' .*after sample '000001'"):
        list(TarShards([str(bad)]))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name, data in [("a.bin", b"x" * 512), ("a.cls", b"1"), ("b.bin", b"y"),
                           ("b.cls", b"2")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    zeroed = bytearray(buffer.getvalue())
    zeroed[2048:2560] = bytes(512)  # b.bin's header: tarfile alone would stop quietly here
    bad.write_bytes(bytes(zeroed))
    with pytest.raises(ShardError, match=r"shard '.*bad\.tar' has a damaged member header "
                                         r"after sample 'a' at byte 2048"):
        list(TarShards([str(bad)]))
    bad.write_bytes(Path(local[1]).read_bytes()[:30_000])
    with pytest.raises(ShardError, match=r"shard '.*bad\.tar' is not a valid tar file .*trunc"):
        list(TarShards([str(bad)]))


def test_a_shard_error_leaves_the_position_so_next_retries_it(served):
    server, urls = served
    reader = TarShards(urls[:2], shuffle=False, retries=0)
    server.fail_next(1, status=503)
    with pytest.raises(FetchError, match="gave up"):
        next(reader)
    assert keys(reader) == [f"{i:06d}" for i in range(2 * PER_SHARD)]


@pytest.mark.parametrize(
    ("urls", "options", "error", "message"),
    [
        ([], {}, ValueError, "urls is empty"),
        ("none-{a,b}.tar", {"num_shards": 3}, ValueError,
         r"num_shards=3 readers need at least as many shards, but urls lists 2"),
        (["a.tar"], {"shard_index": 1}, ValueError, r"shard_index must be in \[0, num_shards=1\)"),
        (["nosuch://bucket/a.tar"], {}, ValueError, r"has scheme 'nosuch', which neither"),
        (3, {}, TypeError, "urls must be a list of paths or URLs"),
        (["a.tar"], {"prefetch": -1}, ValueError, "prefetch"),
        ("a-{0..2.tar", {}, ValueError, "never closed"),
        ("d-{0..9999}{0..9999}.tar", {}, ValueError,
         r"urls: the pattern 'd-\{0..9999\}\{0..9999\}.tar' names 100,000,000 shards, more than "
         r"the 1,000,000 one reader expands .*check the ranges, or split"),
        ("x{0000000..9999999}", {}, ValueError, r"names 10,000,000 shards"),
        (["file://otherhost/data/a.tar"], {}, ValueError,
         r"urls: 'file://otherhost/data/a.tar' names the host 'otherhost', but a file: URL is "
         r"read from this machine, so its host must be empty or 'localhost'; write file:///path"),
        (["a.tar"], {"max_bytes": 0}, ValueError, r"TarShards: max_bytes must be >= 1 byte"),
        (["a.tar"], {"max_bytes": "1"}, TypeError, r"TarShards: max_bytes must be an int"),
        (["a.tar"], {"deadline": -1}, ValueError, r"TarShards: deadline must be > 0 seconds"),
        (["a.tar"], {"deadline": "1"}, TypeError, r"TarShards: deadline must be a number"),
        (["a.tar"], {"readahead": 0}, ValueError, r"readahead must be an int >= 1, got 0"),
    ],
)
def test_bad_arguments_are_refused_with_the_remedy(urls, options, error, message):
    with pytest.raises(error, match=message):
        TarShards(urls, **options)


@pytest.mark.parametrize("pattern", ["d-{000000..000011}.tar", "x{a,b{1..3}}y{0..1}", "{x}.tar",
                                     "{9..11}-{3..1}", "a{,b}c", "p-{01..3}::q-{a,b}"])
def test_brace_notation_expands_as_webdataset_does(pattern):
    from braceexpand import braceexpand

    want = [url for part in pattern.split("::") for url in braceexpand(part)]
    assert expand_urls(pattern) == want


def test_download_thread_stops_on_close_and_on_garbage_collection(served):
    _, urls = served

    def live() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "dataecho-downloads"]

    with TarShards(urls, prefetch=2) as reader:
        next(reader)
        assert live()
    wait_until(lambda: not live())
    reader = TarShards(urls, prefetch=2)
    next(reader)
    del reader
    gc.collect()
    wait_until(lambda: not live())


def test_gzipped_shards_read_too(tmp_path):
    with wds.TarWriter(str(tmp_path / "z.tar.gz")) as sink:
        sink.write({"__key__": "a", "txt": b"zipped"})
    assert [s["txt"] for s in TarShards([str(tmp_path / "z.tar.gz")])] == [b"zipped"]


def test_decode_with_map_and_repr_shows_the_parameters(local):
    reader = TarShards("part-{000000..000004}.tar", seed=9, num_shards=5, shard_index=2)
    assert repr(reader) == ("TarShards('part-{000000..000004}.tar', shuffle=True, seed=9, "
                            "num_epochs=1, shard_index=2, num_shards=5, prefetch=1)")
    labels = Map(TarShards(local, shuffle=False), lambda s: int(s["cls"]))
    assert list(labels) == [i % 10 for i in range(N)]
    assert repr(TarShards(local)).startswith(f"TarShards(<5 urls: {local[0]!r}, ...>")
    assert repr(TarShards(local, readahead=1 << 16)).endswith("prefetch=1, readahead=65536)")


@pytest.mark.parametrize("key, value, words", [
    ("epoch", 2, "TarShards has epoch=2, but it must be an int in [0, 1]"),
    ("position", 5, "TarShards has position=5, but it must be an int in [0, 4]"),
    ("offset", -1, "TarShards has offset=-1"),
    ("read", "9", "TarShards has read='9' of type str"),
])
def test_load_state_dict_refuses_damaged_positions_naming_the_key_and_the_rule(
        local, key, value, words):
    stage = TarShards(local, seed=1, num_epochs=1)
    next(stage)
    state = {**stage.state_dict(), key: value}
    with pytest.raises((ValueError, TypeError), match="checkpoint") as error:
        TarShards(local, seed=1, num_epochs=1).load_state_dict(state)
    stage.close()
    assert f"state of {words}" in str(error.value)


def test_file_urls_with_an_empty_host_or_localhost_read_the_local_file(local):
    for url in (f"file://{local[0]}", f"file://localhost{local[0]}"):
        assert len(list(TarShards([url]))) == PER_SHARD


def test_a_restored_offset_past_its_shards_end_is_refused_not_skipped(local):
    reader = TarShards(local, shuffle=False)
    next(reader)
    state = {**reader.state_dict(), "offset": PER_SHARD + 1, "read": 99}
    reader.close()
    restored = TarShards(local, shuffle=False)
    restored.load_state_dict(state)
    with pytest.raises(ValueError, match=rf"state of TarShards has offset={PER_SHARD + 1}, but "
                                         rf"shard '.*part-000000\.tar' \(position 0 of epoch 0\) "
                                         r"holds fewer samples; the rule: offset counts"):
        next(restored)
    restored.close()
    at_end = TarShards(local, shuffle=False)  # an offset at the shard's end is valid
    at_end.load_state_dict({**state, "offset": PER_SHARD})
    assert next(at_end)["__key__"] == f"{PER_SHARD:06d}"
    at_end.close()
    with pytest.raises(ValueError, match=r"state of TarShards has offset=3, but it must be an int "
                                         r"in \[0, 2\].*at most 'read'"):
        TarShards(local, shuffle=False).load_state_dict({**state, "offset": 3, "read": 2})


def test_an_http_shard_larger_than_its_digest_is_cut_off_at_the_listed_size(served):
    server, urls = served
    sizes = {u.rsplit("/", 1)[-1]: (100, None) for u in urls}
    before = server.requests
    with pytest.raises(FetchError, match=r"announces \d+ bytes \(Content-Length\), more than "
                                         r"max_bytes=100"):
        next(TarShards(urls, shuffle=False, prefetch=0, digests=sizes))
    assert server.requests - before == 1  # refused, not retried
    with pytest.raises(FetchError, match=r"more than max_bytes=1000"):
        next(TarShards(urls, shuffle=False, max_bytes=1000))


@needs_pillow
def test_only_write_shards_indexes_beside_local_shards_are_used_by_default(tmp_path):
    names = write_shards(np.zeros((4, 2, 2), np.uint8), np.arange(4), tmp_path, shard_size=2)
    urls = [str(tmp_path / name) for name in names]
    (tmp_path / "other-index.json").write_text('{"shards": [{"name": "train-00000.tar", '
                                              '"bytes": 1, "sha256": "00"}]}')  # not ours
    (tmp_path / "junk-index.json").write_text("{not json")
    assert len(list(TarShards(urls))) == 4
    with ShardServer(tmp_path) as server:  # no index is looked for over http
        flipped(tmp_path / names[0], b"1" + bytes(511), b"7" + bytes(511))
        assert len(list(TarShards([f"{server.url}/{n}" for n in names], prefetch=0))) == 4
    with pytest.raises(ShardError, match=r"train-00000\.tar' has \d+ bytes and sha256"):
        list(TarShards(urls, shuffle=False))
    with pytest.raises(ValueError, match=r"digests must be a dict, 'auto' or None, got 'yes'"):
        TarShards(urls, digests="yes")


# Streamed shards: a loopback server that writes a tar as it goes (no file, no copy in
# memory), answers Range requests, and can hang up mid-body.

BIG = 1 << 20  # bytes of each sample's .bin member in the generated shards


def member(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 0
    return info.tobuf(tarfile.USTAR_FORMAT) + data + bytes(-len(data) % 512)


def generated(count: int | None, size: int) -> Iterator[bytes]:
    """A tar shard of ``count`` samples (None: without end), a sample at a time."""
    i = 0
    while count is None or i < count:
        yield member(f"{i:06d}.bin", bytes([i % 251]) * size) + member(f"{i:06d}.cls",
                                                                     str(i).encode())
        i += 1
    yield bytes(10240 - (count * (size + (-size % 512) + 1536)) % 10240)  # the end marker


def generated_size(count: int, size: int) -> int:
    return sum(len(piece) for piece in generated(count, 0)) + count * (size + (-size % 512))


class Generated(BaseHTTPRequestHandler):
    """``/N-S.tar``: a shard of N samples with S-byte .bin members; ``/endless-S.tar``
    without end; ``/zeros``: zero bytes without end. ``drop_after`` bytes into the
    next answers, it hangs up; ``ranges`` says whether Range requests are answered."""

    requests: list[str | None]
    drops: list[int]
    ranges = True

    def do_GET(self) -> None:
        self.requests.append(self.headers.get("Range"))
        name = self.path.strip("/").removesuffix(".tar")
        if name == "zeros":
            pieces, total = iter(lambda: bytes(1 << 16), None), None
        else:
            count_text, size_text = name.split("-")
            count = None if count_text == "endless" else int(count_text)
            pieces = generated(count, int(size_text))
            total = None if count is None else generated_size(count, int(size_text))
        start = 0
        wanted = self.headers.get("Range")
        if wanted and self.ranges and total is not None:
            start = int(wanted.removeprefix("bytes=").removesuffix("-"))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{total - 1}/{total}")
        else:
            self.send_response(200)
        if total is not None:
            self.send_header("Content-Length", str(total - start))
        self.send_header("ETag", '"v1"')
        self.end_headers()
        drop = self.drops.pop(0) if self.drops else None
        sent = skipped = 0
        with contextlib.suppress(OSError):  # the client hung up: a reader that has enough
            for piece in pieces:
                if skipped < start:
                    skipped += len(piece)
                    piece = piece[len(piece) - (skipped - start):] if skipped > start else b""
                if drop is not None and sent + len(piece) > drop:
                    self.wfile.write(piece[: drop - sent])
                    return
                self.wfile.write(piece)
                sent += len(piece)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Server(ThreadingHTTPServer):
    """Joins its request threads on close (a loaded machine may need more than a moment)."""

    block_on_close, daemon_threads = True, False


@pytest.fixture
def generator() -> Iterator[tuple[str, type[Generated]]]:
    handler = type("Handler", (Generated,), {"requests": [], "drops": []})
    server = Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


RSS_SCRIPT = """
import json, resource, sys, time
from dataecho import FetchError, TarShards

def rss(field):  # kB, from Linux's accounting; the peak is the high-water mark
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])

base = rss("VmRSS:")
url, size = sys.argv[1], int(sys.argv[2])
start = time.monotonic()
samples = sizes = 0
for sample in TarShards([url + f"/200-{size}.tar"], shuffle=False):
    samples += 1
    sizes += len(sample["bin"])
seconds = time.monotonic() - start
try:
    for sample in TarShards([url + f"/endless-{size}.tar"], max_bytes=64 << 20):
        pass
    endless = "ended"
except FetchError as error:
    endless = str(error)
zeros = len(list(TarShards([url + "/zeros"])))
print(json.dumps({"base_kb": base, "peak_kb": rss("VmHWM:"), "samples": samples,
                  "bytes": sizes, "seconds": seconds, "endless": endless, "zeros": zeros}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc")
def test_a_200_mb_shard_streams_through_a_bounded_read_ahead(generator):
    url, _ = generator
    run = subprocess.run([sys.executable, "-c", RSS_SCRIPT, url, str(BIG)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    assert (found["samples"], found["bytes"]) == (200, 200 * BIG)
    # the process's peak over its baseline (after imports), with prefetch 1 and the
    # default 8 MiB read-ahead: a shard held whole would add 200 MB
    grown_mb = (found["peak_kb"] - found["base_kb"]) / 1024
    assert grown_mb < 100, found
    # an endless body of samples is cut at max_bytes, one of zeros ends at its record
    assert "sent more than max_bytes=67108864 bytes" in found["endless"], found
    assert found["zeros"] == 0
    print(f"200 MB streamed in {found['seconds']:.2f} s, peak RSS +{grown_mb:.0f} MB")


def test_a_shard_cut_mid_body_resumes_with_a_range_request(generator):
    url, handler = generator
    size = generated_size(6, 50_000)
    handler.drops = [size // 3, size // 2]  # two hang-ups, each after part of the answer
    samples = list(TarShards([url + "/6-50000.tar"], shuffle=False, readahead=1 << 16))
    assert [s["__key__"] for s in samples] == [f"{i:06d}" for i in range(6)]
    assert [s["bin"] for s in samples] == [bytes([i]) * 50_000 for i in range(6)]
    assert handler.requests == [None, f"bytes={size // 3}-", f"bytes={size // 3 + size // 2}-"]


def test_restore_at_every_sample_while_every_answer_is_cut_and_resumed(generator):
    url, handler = generator
    handler.drops = [200_000] * 10_000  # every answer hangs up 200 kB in
    urls = [url + "/6-50000.tar", url + "/5-70000.tar"]
    outputs = assert_restores_everywhere(lambda: TarShards(urls, seed=1, num_epochs=2), every=3)
    # each sample once an epoch, whole (the helper compared every restore with this run)
    names = collections.Counter((s["__url__"], s["__key__"]) for s in outputs)
    assert len(names) == 6 + 5 and set(names.values()) == {2}
    assert all(s["bin"] == bytes([int(s["cls"])]) * len(s["bin"]) for s in outputs)
    assert any(r is not None for r in handler.requests)  # resumed with Range requests


def test_without_range_support_a_cut_shard_restarts_and_passes_over_what_it_read(generator):
    url, handler = generator
    handler.ranges, handler.drops = False, [300_000]
    samples = list(TarShards([url + "/6-50000.tar"], shuffle=False))
    assert [s["cls"] for s in samples] == [str(i).encode() for i in range(6)]
    assert handler.requests == [None, "bytes=300000-"]  # answered with the whole body


def test_an_endless_zero_tail_ends_the_shard_at_its_record():
    # /dev/zero says its size is 0 and reads zeros for ever: refused at once, not a spin
    with alarm(10), pytest.raises(ShardError, match=r"shard '/dev/zero' is not a valid tar "
                                                    r"file \(its size is 0 bytes, but it reads"):
        list(TarShards(["/dev/zero"]))


@pytest.mark.parametrize("tail", ["zeros for ever", "nothing, held open"])
def test_a_pipe_that_never_closes_ends_at_the_archives_record(tmp_path, tail):
    fifo = tmp_path / "shard.tar"
    os.mkfifo(fifo)
    archive = b"".join(generated(3, 1000))
    done = threading.Event()

    def write() -> None:
        with contextlib.suppress(OSError), open(fifo, "wb") as sink:
            sink.write(archive)
            sink.flush()
            while not done.is_set():
                if tail == "zeros for ever":
                    sink.write(bytes(1 << 16))
                else:
                    done.wait(0.01)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        with alarm(10):
            samples = list(TarShards([str(fifo)]))
        assert [s["cls"] for s in samples] == [b"0", b"1", b"2"]
    finally:
        done.set()
        with contextlib.suppress(OSError):  # a writer still waiting for a reader
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(5)


def test_a_restored_offset_past_a_streamed_shards_end_is_refused(served):
    _, urls = served
    reader = TarShards(urls, shuffle=False)
    next(reader)
    state = {**reader.state_dict(), "offset": PER_SHARD + 1, "read": 99}
    reader.close()
    restored = TarShards(urls, shuffle=False)
    restored.load_state_dict(state)
    with pytest.raises(ValueError, match=rf"offset={PER_SHARD + 1}, but shard '.*part-000000"):
        next(restored)
    restored.load_state_dict({**state, "offset": PER_SHARD})  # the shard's end is valid
    assert next(restored)["__key__"] == f"{PER_SHARD:06d}"
    restored.close()


def test_fsspec_urls_read_through_fsspec(local):
    fsspec = pytest.importorskip("fsspec", reason="dataecho[test] installs fsspec")
    memory = fsspec.filesystem("memory")
    try:
        for path in local:
            memory.pipe(f"/shards/{Path(path).name}", Path(path).read_bytes())
        urls = [f"memory://shards/{Path(path).name}" for path in local]
        assert keys(TarShards(urls, shuffle=False)) == keys(TarShards(local, shuffle=False))
        outputs = assert_restores_everywhere(lambda: TarShards(urls, seed=3), every=3)
        assert len(outputs) == N
    finally:
        memory.rm("/shards", recursive=True)


def test_fsspec_urls_without_fsspec_or_its_store_name_what_to_install(monkeypatch):
    with pytest.raises(ImportError, match=r"urls: 's3://b/a.tar' has scheme 's3', whose fsspec "
                                          r"filesystem needs a package .*s3fs"):
        TarShards(["s3://b/a.tar"])
    monkeypatch.setitem(sys.modules, "fsspec", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"urls: 'gs://b/a.tar' has scheme 'gs', which "
                                          r"TarShards opens with fsspec, but fsspec is not "
                                          r"installed; pip install 'dataecho\[fsspec\]'"):
        TarShards(["gs://b/a.tar"])


@contextlib.contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Fails the test with TimeoutError after ``seconds``, instead of a hang."""

    def hang(*_: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
