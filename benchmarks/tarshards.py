"""µs per sample of reading tar shards: dataecho's tar reader against a ``tarfile`` walk.

Usage: python benchmarks/tarshards.py [--shards 8] [--repeats 7]

The shards are the demo's: Fashion-MNIST test images as 28x28 PNG plus a ``.cls``
label, 512 samples a shard, written by ``dataecho.demo.remote.write_shards`` (USTAR),
the same gzip-compressed, and the same samples written by ``webdataset.TarWriter``
(PAX: an extended header before every member). All sit in memory, so the table is
the reader's CPU alone. The ``tarfile`` walk is the reader dataecho used before its
own (the same grouping and checks, the headers parsed by ``tarfile``). Each repeat
times both readers on every kind, alternating which goes first; the table reports
medians over the repeats. A last column times the dataecho reader on the same shards
streamed over loopback HTTP (``dataecho.download.Stream``, default read-ahead) from a
``python -m http.server`` in another process: the transfer, one connection a shard and
the read-ahead thread included. Writes benchmarks/results/tarshards.json and .md.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import platform
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from dataecho.demo.remote import write_shards
from dataecho.download import Stream
from dataecho.tarformat import ShardError, iter_samples

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PER_SHARD = 512
KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
META = re.compile(r"__[^/]*__($|/)")


def tarfile_walk(fileobj: IO[bytes], shard: str, *, skip: int = 0) -> Iterator[dict[str, Any]]:
    """The samples of a shard as the ``tarfile``-based reader found them."""
    compressed = fileobj.read(2) == b"\x1f\x8b"
    if not compressed:
        size = fileobj.seek(0, 2)
        fileobj.seek(max(size - 1024, 0))
        if size < 1024 or fileobj.read(1024) != bytes(1024):
            raise ShardError(f"shard {shard!r} does not end with two zero blocks")
    fileobj.seek(0)
    key: str | None = None
    sample: dict[str, Any] = {}
    seen: set[str] = set()
    with tarfile.open(fileobj=fileobj, mode="r:gz" if compressed else "r:") as archive:
        for member in archive:
            match = KEY.match(member.name)
            if not member.isreg() or match is None or META.match(member.name):
                continue
            name, ext = match.group(1), match.group(2).lower()
            if name != key:
                if key is not None and skip <= 0:
                    yield sample
                skip -= key is not None
                if name in seen:
                    raise ShardError(f"members of sample {name!r} are not adjacent")
                key, sample = name, {"__key__": name, "__url__": shard}
                seen.add(name)
            if ext in sample:
                raise ShardError(f"sample {key!r} has two {ext!r} members")
            if skip <= 0:
                handle = archive.extractfile(member)
                sample[ext] = handle.read() if handle is not None else b""
            else:
                sample[ext] = b""
        stream = archive.fileobj
        if stream is not None:  # only zero padding may follow the last member
            stream.seek(archive.offset)
            while chunk := stream.read(1 << 20):
                if chunk.strip(b"\0"):
                    raise ShardError(f"shard {shard!r} has a damaged member header")
    if key is not None and skip <= 0:
        yield sample


Reader = Callable[..., Iterator[dict[str, Any]]]


def shards(count: int) -> tuple[dict[str, list[bytes]], str]:
    """The shards of each kind, and where the images came from."""
    try:
        from dataecho.datasets import load_fashion_mnist

        images, labels = load_fashion_mnist("test")
        source = "Fashion-MNIST test images"
    except (ImportError, FileNotFoundError, ValueError):
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (count * PER_SHARD, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, count * PER_SHARD)
        source = "random 28x28 images (Fashion-MNIST is not installed)"
    n = count * PER_SHARD
    images, labels = np.resize(images, (n, 28, 28)), np.resize(labels, n)
    with tempfile.TemporaryDirectory() as tmp:
        names = write_shards(images, labels, tmp, shard_size=PER_SHARD)
        plain = [(Path(tmp) / name).read_bytes() for name in names]
    kinds = {"write_shards (USTAR)": plain,
             "write_shards, gzip": [gzip.compress(data, 6) for data in plain]}
    try:
        import webdataset as wds
    except ImportError:
        return kinds, source
    written = []
    for data in plain:
        buffer = io.BytesIO()
        with wds.TarWriter(buffer) as sink:
            for sample in tarfile_walk(io.BytesIO(data), "s.tar"):
                sink.write({k: v for k, v in sample.items() if k != "__url__"})
        written.append(buffer.getvalue())
    kinds["webdataset.TarWriter (PAX)"] = written
    return kinds, source


def per_sample(reader: Reader, data: list[bytes]) -> float:
    """µs per sample of reading every shard (from memory) with ``reader``."""
    t0 = time.perf_counter()
    n = 0
    for i, shard in enumerate(data):
        for _ in reader(io.BytesIO(shard), f"s-{i}.tar"):
            n += 1
    return 1e6 * (time.perf_counter() - t0) / n


def streamed(urls: list[str]) -> float:
    """µs per sample of reading every shard as it arrives over HTTP."""
    t0 = time.perf_counter()
    n = 0
    for url in urls:
        with Stream(url) as body:
            for _ in iter_samples(body, url):  # type: ignore[arg-type]
                n += 1
    return 1e6 * (time.perf_counter() - t0) / n


def serve(root: str) -> tuple[subprocess.Popen[str], str]:
    """An HTTP server for ``root`` in another process (no GIL shared with the reader)."""
    server = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind",
                               "127.0.0.1", "--directory", root], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    # "Serving HTTP on 127.0.0.1 port N (http://127.0.0.1:N/) ..."
    line = server.stdout.readline() if server.stdout is not None else ""
    port = re.search(r"port (\d+)", line)
    if port is None:
        server.kill()
        raise SystemExit(f"http.server did not start: {line!r}")
    return server, f"http://127.0.0.1:{port.group(1)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    kinds, source = shards(args.shards)
    readers: dict[str, Reader] = {"tarfile walk": tarfile_walk, "dataecho reader": iter_samples}
    for kind, data in kinds.items():  # the same samples from both, before any timing
        for i, shard in enumerate(data):
            ours = list(iter_samples(io.BytesIO(shard), f"s-{i}.tar"))
            if ours != list(tarfile_walk(io.BytesIO(shard), f"s-{i}.tar")):
                raise SystemExit(f"{kind}: the readers differ on shard {i}")
    times: dict[str, dict[str, list[float]]] = {k: {r: [] for r in readers} for k in kinds}
    for repeat in range(args.repeats):
        for kind, data in kinds.items():
            order = list(readers) if repeat % 2 == 0 else list(readers)[::-1]
            for name in order:
                times[kind][name].append(per_sample(readers[name], data))
    with tempfile.TemporaryDirectory() as root:
        urls: dict[str, list[str]] = {}
        for k, (kind, data) in enumerate(kinds.items()):
            for i, shard in enumerate(data):
                (Path(root) / f"{k}-{i}.tar").write_bytes(shard)
            urls[kind] = [f"{k}-{i}.tar" for i in range(len(data))]
        server, base = serve(root)
        try:
            for _ in range(args.repeats):
                for kind in kinds:
                    times[kind].setdefault("streamed", []).append(
                        streamed([f"{base}/{name}" for name in urls[kind]]))
        finally:
            server.kill()
            server.wait()
    rows = []
    for kind in kinds:
        old, new = (statistics.median(times[kind][r]) for r in readers)
        ratios = [a / b for a, b in zip(*(times[kind][r] for r in readers), strict=True)]
        rows.append({"shards": kind, "tarfile_us": old, "dataecho_us": new,
                     "speedup": statistics.median(ratios),
                     "streamed_us": statistics.median(times[kind]["streamed"])})
    samples = args.shards * PER_SHARD
    result = {"machine": platform.platform(), "python": platform.python_version(),
              "source": source, "shards": args.shards, "samples": samples,
              "repeats": args.repeats, "rows": rows, "times_us": times}
    lines = [
        "# Tar shard reading: µs per sample",
        "",
        f"{args.shards} in-memory shards of {PER_SHARD} samples ({samples} in all: {source}, "
        f"PNG + .cls), read whole; medians of {args.repeats} repeats, both readers in each. "
        f"Python {result['python']} on {result['machine']}. "
        "The last column reads the same shards as they arrive over loopback HTTP from "
        "`python -m http.server` in another process (`dataecho.download.Stream`, the "
        "transfer and one connection a shard included), medians of as many repeats. "
        "Written by `benchmarks/tarshards.py`.",
        "",
        "| shards | tarfile walk (µs) | dataecho reader (µs) | speedup | dataecho, streamed "
        "over loopback HTTP (µs) |",
        "|---|---:|---:|---:|---:|",
        *(f"| {r['shards']} | {r['tarfile_us']:.1f} | {r['dataecho_us']:.1f} | "
          f"{r['speedup']:.2f}x | {r['streamed_us']:.1f} |" for r in rows),
        "",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tarshards.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "tarshards.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
