"""Tests of dataecho.tarformat's own tar reader against tarfile, on what real writers produce."""

from __future__ import annotations

import collections
import gzip
import io
import os
import re
import signal
import tarfile
from typing import Any

import numpy as np
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
    with pytest.raises(ValueError, match=r"number field b'12x9' is neither octal digits \(padded "
                                         r"with spaces, ended by a NUL\) nor base-256"):
        tar_number(b"12x9")
    for field in (b"-0000012\0", b"0o17\0", b"1_2\0", b"\xc0" + bytes(7)):  # tarfile: no number
        with pytest.raises(ValueError, match="neither octal digits"):
            tar_number(field)


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
                                         r"\(a zero block, then data: a zeroed member header, "
                                         r"or data after the end of the archive\)"):
        read(trailing)
    with pytest.raises(ShardError, match=r"damaged member header after sample 'a' at byte 3072 "
                                         r"\(data after the end of the archive\)"):
        read(data[:2048] + bytes(1024) + b"junk" + bytes(512))


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
    with pytest.raises(ShardError, match=r"not a valid tar file \(the member header at byte 0 is "
                                         r"cut short: truncated"):
        read(b"junk")
    with pytest.raises(ShardError, match=r"not a valid tar file \(the member header at byte 0 is "
                                         r"missing: truncated, no end-of-archive marker\)"):
        read(b"")
    with pytest.raises(ShardError, match=r"'s\.tar' is not a valid tar file .*fetch it again"):
        read(gzip.compress(b"junk" * 100))


def pax_header(records: bytes, kind: bytes = b"x") -> bytes:
    """A PAX header block (type ``kind``) and its data, the records as given."""
    block = rewritten(write([("x", b"")], tarfile.USTAR_FORMAT)[:512], slice(0, 100),
                      b"././@PaxHeader".ljust(100, b"\0"))
    block = rewritten(block, slice(124, 136), f"{len(records):011o}\0".encode())
    block = rewritten(block, slice(156, 157), kind)
    return block + records.ljust(-(-len(records) // 512) * 512, b"\0")


@pytest.mark.parametrize(
    ("records", "kind", "message"),
    [
        (b"0 path=a\n", b"x", r"a malformed record 0 bytes into its data"),  # looped forever
        (b"11 size=-1\n", b"x", r"a size record b'-1' that is not a decimal number"),
        (b"11 size=+5\n", b"x", r"a size record b'\+5' that is not a decimal number"),
        (b"9 size=5\n\n", b"x", r"a malformed record 9 bytes into its data"),
        (b"12 path=a.b\n", b"g", r"a global header that sets 'path' or 'size'"),
        (b"21 GNU.sparse.size=1\n", b"x", r"a sparse member"),
        (b"16 hdrcharset=\xff\n", b"x", r"a hdrcharset record b'\\xff' that is not UTF-8"),
    ],
)
def test_a_malformed_pax_header_is_an_error_naming_shard_and_byte(records, kind, message):
    data = write([("a.bin", b"abc"), ("b.bin", b"xyz" * 400)], tarfile.USTAR_FORMAT)
    shard = data[:1024] + pax_header(records, kind) + data[1024:]
    with pytest.raises(ShardError, match=r"shard 's\.tar' has a damaged member header after "
                                         r"sample 'a' at byte 1024 \(a bad extended header: "
                                         + message):
        read(shard)
    with pytest.raises(ShardError, match=r"after sample 'a' at byte 1024 \(a bad extended"):
        read(gzip.compress(shard))


def test_a_huge_size_is_refused_before_any_read_from_a_file_or_a_gzip_stream(tmp_path):
    data = write([("a.bin", b"abc"), ("b.bin", b"xyz")], tarfile.USTAR_FORMAT)
    for size in (b"\x80" + (1 << 80).to_bytes(11, "big"), b"77777777777\0"):
        shard = data[:1024] + rewritten(data[1024:1536], slice(124, 136), size) + data[1536:]
        path = tmp_path / "huge.tar"
        path.write_bytes(shard)
        with open(path, "rb") as handle, pytest.raises(
                ShardError, match=r"member 'b\.bin' at byte 1024 is truncated: \d+ of its "):
            list(iter_samples(handle, "huge.tar"))
        with pytest.raises(ShardError, match=r"'b\.bin' at byte 1024 is truncated: \d+ of its"):
            read(gzip.compress(shard))  # read a chunk at a time, never all at once
    negative = data[:1024] + rewritten(data[1024:1536], slice(124, 136), b"\xff" * 12)
    with pytest.raises(ShardError, match=r"at byte 1024 \(a negative size -1\)"):
        read(negative + data[1536:])


def test_a_shard_cut_at_a_member_boundary_is_truncated_plain_or_gzip():
    # The last member ends in 1,024 zero bytes: cut after it, the file still ends in zeros.
    data = write([("a.bin", b"x"), ("b.bin", b"y" + bytes(1535))], tarfile.USTAR_FORMAT)
    cut = data[: 1024 + 512 + 1536]
    with pytest.raises(ShardError, match=r"'s\.tar' is not a valid tar file \(the member header "
                                         r"at byte 3072 is missing: truncated, no end-of-archive "
                                         r"marker\) after sample 'b'"):
        read(cut)
    # A multi-member gzip cut between its members decompresses without an error.
    with pytest.raises(ShardError, match=r"at byte 1024 is missing: truncated"):
        read(gzip.compress(data[:1024]) + b"")
    with pytest.raises(ShardError, match=r"it ends at byte 3584, inside its end-of-archive "
                                         r"marker of two zero blocks: truncated"):
        read(gzip.compress(data[:3072]) + gzip.compress(bytes(512)))


def test_a_pre_posix_directory_and_a_prefix_read_as_tarfile_reads_them():
    data = write([("a.bin", b"abc" * 200), ("b.bin", b"y")], tarfile.USTAR_FORMAT)
    # type NUL with a name ending in "/" is a directory: tarfile skips no data after it
    directory = rewritten(rewritten(data[:512], slice(0, 6), b"a.bin/"), slice(156, 157), b"\0")
    shard = directory + data[512:]
    with pytest.raises(ShardError):  # the data block now reads as a header
        read(shard)
    # a prefix joins the name whatever the magic, as tarfile joins it
    prefixed = rewritten(rewritten(data[:512], slice(257, 265), b"ustar  \0"),
                         slice(345, 349), b"dir\0")
    shard = prefixed + data[512:]
    assert read(shard) == reference(shard)
    assert read(shard)[0]["__key__"] == "dir/a"


# The property test: mutated shards, with tarfile (and webdataset's grouping) as the
# oracle. Each case's outcome must be tarfile's samples, or a ShardError that names the
# shard and a byte offset; never another exception, a hang, or other samples.
CASES = int(os.environ.get("DATAECHO_TAR_CASES", "2400"))
FIELDS = [(0, 100), (100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (156, 157),
          (257, 265), (329, 337), (337, 345), (345, 500)]
SIZES = [b"\x80" + (1 << 80).to_bytes(11, "big"), b"\xff" * 12, b"\x80" + bytes(10) + b"\x07",
         b"77777777777\0", b"-0000000001\0", b"0o000000012\0", b" 1_2\0", b"\0" * 12,
         b"00000001000\0", b"\xc0" + bytes(11), b"+0000000012\0", b"0000000 12\0\0",
         b"12\x0012345678"]
PAX_EDITS = [b"0", b"-5", b"999999", b"1", b"00", b"5 size=-1\n", b"\n", b"=", b" size=0\n",
             b"9 size=99999999999\n"]
RECORDS = [b"10 size=0\n", b"0 path=a\n", b"11 size=-1\n", b"8 path=\n", b"12 path=z.x\n",
           b"21 GNU.sparse.size=1\n", b"20 size=100000000\n", b"9 size=\n",
           b"16 hdrcharset=\xff\n", b"6 a=b\n\0\0x", b"13 size=1024\n", b"11 path=z/\n"]


def checksummed(data: bytes, at: int) -> bytes:
    """``data`` with the checksum of the header block at ``at`` made right again."""
    block = data[at : at + 148] + b" " * 8 + data[at + 156 : at + 512]
    return data[: at + 148] + f"{sum(block):06o}\0 ".encode() + data[at + 156 :]


def header_offsets(data: bytes) -> list[int]:
    """Where the member headers of an intact tar start (a walk by size fields)."""
    found, at = [], 0
    while at + 512 <= len(data) and data[at : at + 512] != bytes(512):
        found.append(at)
        try:
            size = tar_number(data[at + 124 : at + 136]) if data[at + 156] not in b"123456" else 0
        except ValueError:
            break
        at += 512 + -(-size // 512) * 512
    return found


def mutated(data: bytes, rng: Any) -> bytes:
    """One random damage of the kinds an adversary or a bad disk or network makes."""
    at = int(rng.choice(header_offsets(data)))
    choice = int(rng.integers(0, 9))
    if choice == 0:  # bit flips anywhere
        flipped = bytearray(data)
        for i in rng.integers(0, len(data), int(rng.integers(1, 3))):
            flipped[i] ^= 1 << int(rng.integers(0, 8))
        return bytes(flipped)
    if choice == 1:  # a bit flip in a header whose checksum is made right again
        i = at + int(rng.choice([*range(148), *range(156, 512)]))
        return checksummed(data[:i] + bytes([data[i] ^ 1 << int(rng.integers(0, 8))])
                           + data[i + 1 :], at)
    if choice == 2:  # truncation, at and around header boundaries or anywhere
        if rng.random() < 0.6:
            return data[: at + int(rng.choice([0, 1, 100, 511, 512, 513, 1024]))]
        return data[: int(rng.integers(0, len(data)))]
    if choice == 3:  # a huge, negative, base-256 or malformed size
        size = SIZES[int(rng.integers(0, len(SIZES)))]
        return checksummed(data[: at + 124] + size + data[at + 136 :], at)
    if choice == 4:  # any header field rewritten, the checksum made right again
        a, z = FIELDS[int(rng.integers(0, len(FIELDS)))]
        value = [bytes(rng.integers(0, 256, z - a, dtype=np.uint8)), bytes(z - a),
                 (b"x/" * (z - a))[: z - a],
                 bytes([int(rng.choice(list(b"0123456789LKxXgSV\0 ")))]) * (z - a)]
        return checksummed(data[: at + a] + value[int(rng.integers(0, 4))] + data[at + z :], at)
    if choice == 5:  # a PAX record's text edited in place
        i = data.find(b" path=" if rng.random() < 0.5 else b" mtime=")
        i = max(i if i >= 0 else data.find(b"="), 3) - 3
        edit = PAX_EDITS[int(rng.integers(0, len(PAX_EDITS)))]
        return data[:i] + edit + data[i + len(edit) :]
    if choice == 6:  # a hand-made extension header inserted before a member
        record = RECORDS[int(rng.integers(0, len(RECORDS)))]
        return data[:at] + pax_header(record, bytes([rng.choice(list(b"xXgL"))])) + data[at:]
    if choice == 7:  # a header zeroed, or a header repeated
        if rng.random() < 0.5:
            return data[:at] + bytes(512) + data[at + 512 :]
        return data[: at + 512] + data[at:]
    if rng.random() < 0.5:  # junk after the end, or the end-of-archive marker cut
        return data + bytes(rng.integers(0, 256, 600, dtype=np.uint8))
    end = -(-len(data.rstrip(b"\0")) // 512) * 512
    return data[: end + int(rng.choice([0, 512, 1023, 1024]))]


def gzipped(data: bytes, rng: Any) -> bytes:
    """``data`` gzip-compressed, then cut, flipped, split into members or given a tail."""
    packed = gzip.compress(data, 1)
    choice = int(rng.integers(0, 5))
    if choice == 1:
        return packed[: int(rng.integers(0, len(packed)))]
    if choice == 2:
        flipped = bytearray(packed)
        flipped[int(rng.integers(0, len(packed)))] ^= 1 << int(rng.integers(0, 8))
        return bytes(flipped)
    if choice == 3:  # a multi-member gzip cut at a member boundary (at a tar header)
        cut = int(rng.choice([*header_offsets(data), len(data)]))
        return gzip.compress(data[:cut], 1)
    if choice == 4:
        return packed + (bytes(10) if rng.random() < 0.5 else b"junk")
    return packed


def originals(tmp_path: Any) -> list[bytes]:
    """Valid shards: ustar, GNU and PAX by tarfile, and webdataset's ShardWriter's."""
    small = [m for m in MEMBERS if not m[0].startswith(("d", "train/h", "__i"))]
    shards = [write([m for m in small if len(m[0]) < 100], tarfile.USTAR_FORMAT),
              write(small, tarfile.GNU_FORMAT),
              write(small, tarfile.PAX_FORMAT, pax_headers={"comment": "global"})]
    wds = pytest.importorskip("webdataset", reason="interop tests need dataecho[webdataset]")
    with wds.ShardWriter(str(tmp_path / "w-%02d.tar"), maxcount=4, verbose=0) as sink:
        for i in range(4):
            sink.write({"__key__": f"s{i:03d}", "png": bytes([i]) * (i * 300),
                        "cls": str(i).encode()})
    return [*shards, (tmp_path / "w-00.tar").read_bytes()]


def outcome(read_all: Any, data: bytes, shard: str) -> tuple[str, Any]:
    try:
        return "samples", read_all(data, shard)
    except ShardError as error:
        return "ShardError", str(error)
    except Exception as error:
        return type(error).__name__, str(error)


class Hang(Exception):
    pass


def test_mutated_shards_read_as_tarfile_reads_them_or_raise_a_shard_error(tmp_path):
    if not hasattr(signal, "setitimer"):
        pytest.skip("the hang guard needs signal.setitimer (POSIX)")
    shards = originals(tmp_path)

    def hang(*_: Any) -> None:
        raise Hang

    previous = signal.signal(signal.SIGALRM, hang)
    wrong, kinds = [], collections.Counter()
    try:
        for case in range(CASES):
            rng = np.random.default_rng((24, case))
            data = mutated(shards[case % len(shards)], rng)
            if rng.random() < 0.3:
                data = gzipped(data if rng.random() < 0.5 else shards[case % 4], rng)
            shard = f"case-{case}.tar"
            signal.setitimer(signal.ITIMER_REAL, 5.0)  # a loop is a failure, not a hang
            try:
                ours = outcome(read, data, shard)
            except Hang:
                ours = ("a hang", "")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            theirs = outcome(reference, data, shard)
            kinds[ours[0], theirs[0] if theirs[0] == "samples" else "error"] += 1
            if ours[0] == "ShardError":
                if f"shard '{shard}'" not in ours[1] or not re.search(r"\bbyte \d+", ours[1]):
                    wrong.append((case, "an error naming no shard or byte", ours[1]))
            elif ours != theirs:
                wrong.append((case, ours[0], theirs[0], str(ours[1])[:200]))
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert not wrong, f"{len(wrong)} of {CASES} cases differ from tarfile: {wrong[:5]}"
    assert kinds["samples", "samples"] > CASES // 5 and kinds["ShardError", "error"] > 0, kinds


class Forward(io.RawIOBase):
    """A stream read forward only that returns at most ``most`` bytes a read, as a
    socket or a pipe does."""

    def __init__(self, data: bytes, most: int = 700) -> None:
        self.data, self.at, self.most = data, 0, most

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        size = len(self.data) if size is None or size < 0 else size
        piece = self.data[self.at : self.at + min(size, self.most)]
        self.at += len(piece)
        return piece


@pytest.mark.parametrize("skip", [0, 1, 3])
@pytest.mark.parametrize("gz", [False, True])
def test_a_stream_read_forward_only_yields_what_a_file_yields(skip, gz):
    data = write([*MEMBERS, ("big.bin", bytes(range(256)) * 9000)], tarfile.PAX_FORMAT)
    data = gzip.compress(data) if gz else data
    stream = Forward(data)
    assert list(iter_samples(stream, "s.tar", skip=skip)) == read(data, skip=skip)
    # the archive's record is read, and nothing after it
    assert stream.at == len(data) or gz


def test_an_endless_zero_tail_is_read_to_the_end_of_the_record_only():
    data = write([("a.bin", b"x"), ("a.cls", b"1")], tarfile.USTAR_FORMAT)
    stream = Forward(data + bytes(1 << 20))  # a long tail: not read
    assert read(data) == list(iter_samples(stream, "s.tar"))
    assert stream.at == len(data) == 10240
    junk = data[:2048] + bytes(1024) + bytes(4000) + b"junk" + bytes(10240)
    with pytest.raises(ShardError, match=r"at byte 7072 \(data after the end of the archive"):
        list(iter_samples(Forward(junk), "s.tar"))
    assert read(data + b"junk") == read(data)  # past the record: not read, as tarfile


def test_a_gzip_shard_is_read_to_its_end_so_its_crc_is_checked():
    packed = bytearray(gzip.compress(write([("a.bin", b"x")], tarfile.USTAR_FORMAT)))
    packed[-8] ^= 1  # the CRC-32 of the trailer
    with pytest.raises(ShardError, match=r"gzip: CRC check failed"):
        read(bytes(packed))
