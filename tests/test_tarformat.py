"""Tests of dataecho.tarformat's own tar reader against tarfile, on what real writers produce."""

from __future__ import annotations

import gzip
import io
import re
import tarfile
from typing import Any

import pytest

from dataecho import ShardError
from dataecho.tarformat import iter_samples, tar_number

# webdataset's rules for a member's key and extension, and for shard metadata members
KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
META = re.compile(r"__[^/]*__($|/)")
LONG = "d" * 70 + "/" + "e" * 60 + "/" + "f" * 40  # 173 characters: past ustar's 100-byte name


def reference(data: bytes, shard: str = "s.tar") -> list[dict[str, Any]]:
    """The samples as a walk with tarfile finds them (webdataset's grouping)."""
    samples: list[dict[str, Any]] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
        for member in archive:
            match = KEY.match(member.name)
            if not member.isreg() or match is None or META.match(member.name):
                continue
            key, ext = match.group(1), match.group(2).lower()
            if not samples or samples[-1]["__key__"] != key:
                samples.append({"__key__": key, "__url__": shard})
            handle = archive.extractfile(member)
            samples[-1][ext] = handle.read() if handle is not None else b""
    return samples


def read(data: bytes, shard: str = "s.tar", skip: int = 0) -> list[dict[str, Any]]:
    return list(iter_samples(io.BytesIO(data), shard, skip=skip))


def write(members: list[tuple[str, Any]], fmt: int, **options: Any) -> bytes:
    """A tar of ``(name, bytes)`` files, ``(name, "dir")`` and ``(name, ("link", target))``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt, **options) as archive:
        for name, what in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if what == "dir":
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            elif isinstance(what, tuple):
                info.type = tarfile.SYMTYPE if what[0] == "link" else tarfile.LNKTYPE
                info.linkname = what[1]
                archive.addfile(info)
            else:
                info.size = len(what)
                archive.addfile(info, io.BytesIO(what))
    return buffer.getvalue()


MEMBERS: list[tuple[str, Any]] = [
    ("__meta__", b"{\"shard\": 0}"),  # shard metadata: skipped
    ("train", "dir"),
    ("train/000000.png", b"\x89PNG" + bytes(600)),
    ("train/000000.cls", b"3"),
    ("train/000000.seg.PNG", b"mask" * 200),  # a multi-dot extension, upper case
    ("train/000001.png", b"p" * 512),  # exactly one block
    ("train/000001.cls", b""),  # zero size
    ("train/000001.json", b"{}"),
    ("train/link.png", ("link", "000000.png")),  # a symlink: skipped
    ("train/hard.png", ("hard", "train/000000.png")),  # a hard link: skipped
    ("train/README", b"no dot: skipped"),
    (LONG + ".png", b"long name"),
    (LONG + ".cls", b"7"),
    ("données/échantillon-ü.txt", "ünïcödé".encode()),
    ("données/échantillon-ü.cls", b"1"),
    ("__index__/y.txt", b"skipped too"),
    ("last.bin", bytes(range(256)) * 9),
]
FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}


@pytest.fixture(params=list(FORMATS))
def shard(request: pytest.FixtureRequest) -> bytes:
    fmt = FORMATS[request.param]
    if fmt == tarfile.PAX_FORMAT:  # and a global header, which the reader ignores
        return write(MEMBERS, fmt, pax_headers={"comment": "written for a test"})
    return write(MEMBERS, fmt)


def test_reads_what_tarfile_reads_in_ustar_gnu_and_pax_format(shard):
    want = reference(shard)
    assert [s["__key__"] for s in want] == [
        "train/000000", "train/000001", LONG, "données/échantillon-ü", "last"]
    assert want[0]["seg.png"] == b"mask" * 200 and want[1]["cls"] == b""
    assert read(shard) == want


def test_reads_gzip_compressed_shards(shard):
    packed = gzip.compress(shard)
    assert read(packed, "s.tar.gz") == reference(packed, "s.tar.gz") == read(shard, "s.tar.gz")


@pytest.mark.parametrize("gz", [False, True])
def test_skip_k_drops_the_first_k_samples(shard, gz):
    data = gzip.compress(shard) if gz else shard
    every = read(data)
    for k in range(len(every) + 2):
        skipped = read(data, skip=k)
        assert skipped == every[k:], k


def test_skip_seeks_past_the_data_of_an_uncompressed_shard():
    big = [(f"{i:03d}.bin", bytes([i]) * 100_000) for i in range(4)]
    data = write(big, tarfile.USTAR_FORMAT)

    class Counting(io.BytesIO):
        read_bytes = 0

        def read(self, size: int | None = -1) -> bytes:
            chunk = super().read(size)
            self.read_bytes += len(chunk)
            return chunk

    counting = Counting(data)
    assert [s["__key__"] for s in iter_samples(counting, "s.tar", skip=3)] == ["003"]
    assert counting.read_bytes < 100_000 + 4 * 512 + 2048 + 10240


def test_reads_webdataset_tarwriter_and_shardwriter_shards(tmp_path):
    wds = pytest.importorskip("webdataset", reason="interop tests need dataecho[webdataset]")
    with wds.ShardWriter(str(tmp_path / "w-%02d.tar"), maxcount=3, verbose=0) as sink:
        for i in range(7):
            sink.write({"__key__": f"sample{i:04d}", "png": bytes([i]) * (i * 300),
                        "cls": str(i).encode(), "meta.json": b"{}", "TXT": "ü".encode()})
    shards = sorted(tmp_path.glob("w-*.tar"))
    assert len(shards) == 3
    for path in shards:
        data = path.read_bytes()
        assert read(data, path.name) == reference(data, path.name)
    ours = [s for path in shards for s in read(path.read_bytes())]
    assert [s["__key__"] for s in ours] == [f"sample{i:04d}" for i in range(7)]
    assert ours[5]["png"] == bytes([5]) * 1500 and ours[5]["txt"] == "ü".encode()


def test_reads_what_webdataset_reads(tmp_path):
    wds = pytest.importorskip("webdataset", reason="interop tests need dataecho[webdataset]")
    path = tmp_path / "w.tar"
    path.write_bytes(write(MEMBERS, tarfile.PAX_FORMAT))
    theirs = [{k: v for k, v in s.items() if not k.startswith("__") or k == "__key__"}
              for s in wds.WebDataset(str(path), shardshuffle=False)]
    ours = [{k: v for k, v in s.items() if k != "__url__"} for s in read(path.read_bytes())]
    assert ours == theirs


def rewritten(block: bytes, field: slice, value: bytes) -> bytes:
    """A header block with one field replaced and its checksum made right again."""
    block = block[: field.start] + value + block[field.stop :]
    total = sum(block[:148]) + 256 + sum(block[156:])
    return block[:148] + f"{total:06o}\0 ".encode() + block[156:]


def test_a_base_256_size_field_reads_as_tarfile_reads_it():
    data = write([("a.bin", b"xyz"), ("a.cls", b"1")], tarfile.USTAR_FORMAT)
    base256 = b"\x80" + (3).to_bytes(11, "big")
    shard = rewritten(data[:512], slice(124, 136), base256) + data[512:]
    with tarfile.open(fileobj=io.BytesIO(shard)) as archive:
        assert archive.getmembers()[0].size == 3
    assert read(shard) == reference(shard) == [
        {"__key__": "a", "__url__": "s.tar", "bin": b"xyz", "cls": b"1"}]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (b"00000000012\0", 10),
        (b"0000012 \0\0\0\0", 10),  # space, then NUL padding
        (b" 17\0", 15),
        (b"\0" * 12, 0),
        (b"", 0),
        (b"\x80" + (9 << 30).to_bytes(11, "big"), 9 << 30),  # 9 GiB: past 11 octal digits
        (b"\x80" + bytes(10) + b"\x05", 5),
        (b"\xff" * 12, -1),
        (b"\xff" * 11 + b"\xfe", -2),
        (b"\x80\x00\x00\x00\x00\x00\x00\x00", 0),  # 8-byte fields too (uid, checksum)
    ],
)
def test_tar_number_reads_octal_and_base_256_fields(field, value):
    assert tar_number(field) == value
    if len(field) == 12 and field[0] & 0x80:  # tarfile's reading agrees
        assert tarfile.nti(field) == value


def test_tar_number_refuses_a_field_that_is_no_number():
    with pytest.raises(ValueError, match=r"number field b'12x9' is neither octal digits nor "
                                         r"base-256"):
        tar_number(b"12x9")


def test_a_pax_size_record_overrides_the_header_size():
    data = write([("a.bin", b"abcdef"), ("a.cls", b"1")], tarfile.PAX_FORMAT)
    # a hand-made PAX header "size=6" before a ustar header whose size field says 0
    record = b"10 size=6\n"
    pax = rewritten(rewritten(data[:512], slice(0, 14), b"././@PaxHeader"),
                    slice(156, 157), b"x")
    pax = rewritten(pax, slice(124, 136), f"{len(record):011o}\0".encode())
    member = rewritten(data[:512], slice(124, 136), b"00000000000\0")
    shard = pax + record.ljust(512, b"\0") + member + data[512:]
    assert read(shard) == reference(shard) == [
        {"__key__": "a", "__url__": "s.tar", "bin": b"abcdef", "cls": b"1"}]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_damaged_header_byte_names_the_shard_the_sample_and_the_byte(fmt):
    data = bytearray(write(MEMBERS, FORMATS[fmt]))
    at = data.index(b"train/000001.png")
    at -= at % 512  # the header that holds the name (a GNU or PAX one for long names)
    data[at + 3] ^= 0x01
    with pytest.raises(ShardError, match=rf"shard 'bad\.tar' has a damaged member header after "
                                         rf"sample 'train/000000' at byte {at} \(bad checksum\)"):
        read(bytes(data), "bad.tar")
    first = bytearray(data)
    first[0] ^= 0x01
    with pytest.raises(ShardError, match=r"shard 'bad\.tar' is not a valid tar file \(bad "
                                         r"checksum at byte 0\)"):
        read(bytes(first), "bad.tar")


def test_a_number_field_that_is_no_number_is_a_damaged_header():
    data = write([("a.bin", b"x"), ("b.bin", b"y")], tarfile.USTAR_FORMAT)
    shard = data[:1024] + rewritten(data[1024:1536], slice(124, 136), b"0000000001x\0") \
        + data[1536:]
    with pytest.raises(ShardError, match=r"damaged member header after sample 'a' at byte 1024 "
                                         r"\(the number field"):
        read(shard)


def test_data_cut_short_is_reported_as_truncated():
    # The last member's data is zeros, so a cut inside it still ends in two zero blocks.
    data = write([("a.bin", b"x"), ("b.bin", bytes(8192))], tarfile.USTAR_FORMAT)
    cut = data[: 1024 + 512 + 4096]
    message = (r"shard 'cut\.tar' is not a valid tar file \(member 'b\.bin' at byte 1024 is "
               r"truncated: 4096 of its 8192 bytes\) after sample 'b'")
    with pytest.raises(ShardError, match=message):
        read(cut, "cut.tar")
    with pytest.raises(ShardError, match=message):
        read(cut, "cut.tar", skip=1)  # a seek past the end is caught too
    with pytest.raises(ShardError, match=r"is truncated: 4096 of its 8192 bytes\) after sample"):
        read(gzip.compress(cut), "cut.tar")
    with pytest.raises(ShardError, match=r"cut\.tar' is not a valid tar file .*after sample 'a'"):
        read(gzip.compress(data)[:-30], "cut.tar")  # gzip's own check
    big = write([("a.bin", b"x"), ("b.bin", bytes(3 << 20))], tarfile.USTAR_FORMAT)
    with pytest.raises(ShardError, match=r"truncated: 2097152 of its 3145728 bytes\)"):
        read(gzip.compress(big[: 1536 + (2 << 20)]), skip=1)  # skipped in chunks
    with pytest.raises(ShardError, match=r"truncated: 2097152 of its 3145728 bytes\)"):
        read(big[: 1536 + (2 << 20)])  # read in one piece


def test_a_header_cut_short_and_data_after_the_end_are_reported():
    data = write([("a.bin", b"x"), ("a.cls", b"1")], tarfile.USTAR_FORMAT)
    with pytest.raises(ShardError, match=r"the member header at byte 1024 is cut short"):
        read(gzip.compress(data[:1024 + 100]))
    trailing = data[:2048] + bytes(512) + b"junk".ljust(512, b"\0") + bytes(10240)
    with pytest.raises(ShardError, match=r"damaged member header after sample 'a' at byte 2048 "
                                         r"\(data after the end of the archive\)"):
        read(trailing)


def test_a_sparse_member_is_refused_naming_it():
    data = write([("a.bin", b"x"), ("a.cls", b"1")], tarfile.GNU_FORMAT)
    shard = rewritten(data[:512], slice(156, 157), b"S") + data[512:]
    with pytest.raises(ShardError, match=r"holds the sparse member 'a\.bin' at byte 0"):
        read(shard)


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([("a.png", b"x"), ("a.png", b"y")], r"sample 'a' in shard 's\.tar' has two 'png' members"),
        ([("a.png", b"x"), ("a.PNG", b"y")], r"sample 'a' in shard 's\.tar' has two 'png' members"),
        ([("a.png", b"x"), ("b.png", b"y"), ("a.cls", b"1")],
         r"members of sample 'a' in shard 's\.tar' are not adjacent"),
    ],
)
def test_samples_must_be_adjacent_with_one_member_per_extension(members, message):
    data = write(members, tarfile.USTAR_FORMAT)
    with pytest.raises(ShardError, match=message):
        read(data)
    with pytest.raises(ShardError, match=message):
        read(data, skip=5)  # skipped samples are checked too


def test_an_empty_archive_has_no_samples_and_junk_is_no_tar():
    assert read(write([], tarfile.USTAR_FORMAT)) == []
    assert read(gzip.compress(write([], tarfile.PAX_FORMAT))) == []
    with pytest.raises(ShardError, match=r"not a valid tar file \(it does not end with two zero"):
        read(b"junk")
    with pytest.raises(ShardError, match=r"'s\.tar' is not a valid tar file .*fetch it again"):
        read(gzip.compress(b"junk" * 100))
