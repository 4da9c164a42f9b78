"""The WebDataset tar format: shard URL patterns, samples from a tar file, shard digests.

A WebDataset shard is a plain tar file. A sample is a run of consecutive members that
share a key: the member's path up to the first dot of its file name
(``train/00000007.seg.png`` has key ``train/00000007`` and extension ``seg.png``).
These rules are webdataset's own (``tariterators.base_plus_ext``, ``group_by_keys``),
so shards written by ``webdataset.TarWriter`` read here and the other way round.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import math
import re
import zlib
from collections.abc import Iterator, Mapping
from typing import IO, Any
from zlib import adler32

_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext
_META = re.compile(r"__[^/]*__($|/)")  # webdataset skips __*__ members (shard metadata)
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
_CHUNK = 1 << 20  # hashing reads 1 MiB at a time, so a large shard never sits in memory
_BLOCK = 512  # tar's unit: a header, or a member's data padded with zeros to a multiple
_ZERO = bytes(_BLOCK)  # two of them end the archive
_RECORD_SIZE = 20 * _BLOCK  # what tar and tarfile pad an archive to (tar's blocking factor 20)
# Type flags, as byte values: regular files (a NUL is pre-POSIX, "7" contiguous), the
# members whose data tarfile does not skip (links, devices, directories, FIFOs), the
# extension headers that describe the next member ("L", "K" GNU long name and link;
# "x", "X" PAX, "g" PAX global, whose records must not set a path or size) and GNU
# sparse files.
_REGULAR = frozenset(b"0\x007")
_NO_DATA = frozenset(b"123456")
_LONG_NAME, _SPARSE, _GLOBAL, _DIRECTORY = ord("L"), ord("S"), ord("g"), ord("5")
_PAX = frozenset(b"xX")
_EXTENSIONS = frozenset(b"LKxXg")
_GNU = frozenset(b"LKS")
# The numeric fields tarfile reads from every header (mode, uid, gid, size, mtime,
# checksum, device major and minor): a header where one is no number ends its walk.
_NUMBERS = ((100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (148, 156),
            (329, 337), (337, 345))
# The fast path: mode to checksum, and the device numbers, as tarfile and GNU tar write
# them (octal digits ended by a NUL or space); anything else goes field by field.
_FIELDS = re.compile(rb"(?:[0-7]{7}[\0 ]){3}([0-7]{11})[\0 ][0-7]{11}[\0 ]([0-7]{6})\0 "
                     rb".{173}(?:\0{8}|[0-7]{7}[\0 ]){2}", re.DOTALL)
_OCTAL = re.compile(rb"[0-7]*")
_RECORD = re.compile(rb"([0-9]{1,20}) ")  # a PAX record's length and its space

MAX_URLS = 1_000_000  # URLs one brace pattern may name (expanding 10**6 takes about 1 s)

Digest = tuple[int, str | None]


class ShardError(ValueError):
    """A shard whose bytes arrived but hold the wrong content; the message names the shard.

    Raised for a file that is not a tar file or is truncated, a sample whose members
    are damaged, and a shard whose size or SHA-256 differs from its recorded digest.

    Example:
        >>> import io
        >>> list(iter_samples(io.BytesIO(b"junk"), "train-00007.tar"))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        dataecho.tarformat.ShardError: shard 'train-00007.tar' is not a valid tar file ...
    """


def expand_urls(pattern: str) -> list[str]:
    """Expands webdataset's URL notation: ``{a,b}`` lists, ``{000..009}`` ranges, ``::``.

    Ranges keep the zero padding of their bounds; patterns may nest; ``::`` separates
    patterns whose expansions are joined, as ``webdataset.SimpleShardList`` does.

    At most :data:`MAX_URLS` (1,000,000) URLs: the count is taken before anything is
    expanded, so ``{0..9999}{0..9999}`` fails at once instead of filling memory.

    Raises:
        ValueError: a brace is never closed, or the pattern names more than ``MAX_URLS``.

    Example:
        >>> expand_urls("data-{00..02}.tar::extra-{a,b}.tar")
        ['data-00.tar', 'data-01.tar', 'data-02.tar', 'extra-a.tar', 'extra-b.tar']
    """
    count = sum(_count(part) for part in pattern.split("::"))
    if count > MAX_URLS:
        raise ValueError(f"urls: the pattern {pattern[:200]!r} names {count:,} shards, more than "
                         f"the {MAX_URLS:,} one reader expands (the rule keeps a typo such as "
                         "{0..9999}{0..9999} from filling memory); check the ranges, or split "
                         "the data set into several patterns or pass a list")
    return [url for part in pattern.split("::") for url in _expand(part)]


def _braces(pattern: str, start: int) -> tuple[int, list[int]]:
    """The end of the brace opened at ``start`` and its top-level commas."""
    depth, commas = 0, []
    for i in range(start, len(pattern)):
        depth += {"{": 1, "}": -1}.get(pattern[i], 0)
        if pattern[i] == "," and depth == 1:
            commas.append(i)
        if depth == 0:
            return i, commas
    raise ValueError(f"urls: the brace opened at character {start} of {pattern!r} is "
                     "never closed; write a list {a,b} or a range {000..009}")


def _count(pattern: str) -> int:
    """How many URLs ``_expand(pattern)`` returns, found without expanding them."""
    start = pattern.find("{")
    if start < 0:
        return 1
    end, commas = _braces(pattern, start)
    body, tails = pattern[start + 1 : end], _count(pattern[end + 1 :])
    match = _RANGE.match(body)
    if match and not commas:
        return (abs(int(match.group(2)) - int(match.group(1))) + 1) * tails
    if not commas:
        return tails
    bounds = [start, *commas, end]
    return sum(_count(pattern[a + 1 : b]) for a, b in itertools.pairwise(bounds)) * tails


def _expand(pattern: str) -> list[str]:
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    end, commas = _braces(pattern, start)
    head, body, tails = pattern[:start], pattern[start + 1 : end], _expand(pattern[end + 1 :])
    bounds = [start, *commas, end]
    options = [pattern[a + 1 : b] for a, b in itertools.pairwise(bounds)]
    match = _RANGE.match(body)
    if match and not commas:
        lo, hi = int(match.group(1)), int(match.group(2))
        width = max(map(len, match.groups())) if body.startswith(("0", "-0")) else 0
        step = 1 if hi >= lo else -1
        options = [f"{n:0{width}d}" for n in range(lo, hi + step, step)]
    elif not commas:  # a lone {x} is literal text, as in the shell and braceexpand
        return [head + "{" + body + "}" + tail for tail in tails]
    return [head + x + tail for option in options for x in _expand(option) for tail in tails]


def iter_samples(fileobj: IO[bytes], shard: str, *, skip: int = 0) -> Iterator[dict[str, Any]]:
    """Yields the samples of one tar shard in tar order, as webdataset groups them.

    Each sample is a dict with ``"__key__"``, ``"__url__"`` (``shard``) and one
    ``bytes`` value per extension, lower-cased. Members that are not regular files,
    lack a dot or are named ``__*__`` are skipped, as webdataset skips them.

    The tar headers are parsed here rather than by :mod:`tarfile`, which spends more
    time on a member's header than a small sample takes to decode. POSIX ustar (with
    its name prefix), PAX extended headers (``path`` and ``size``), GNU long names and
    base-256 numbers are read as :mod:`tarfile` reads them; gzip-compressed shards are
    streamed through :mod:`gzip`. The reader is at least as strict as :mod:`tarfile`:
    where ``tarfile`` would stop early or read garbage, this raises. A shard that ends
    before its end-of-archive marker (two zero blocks) is an error, so a shard cut at
    a member boundary is caught. No read goes past what the shard holds: a size field
    larger than the rest of a seekable shard is an error before anything is read. After
    the marker only the rest of its 10,240-byte record is read (it must be zeros), so an
    endless tail (``/dev/zero``, a pipe kept open) ends the shard instead of a hang; a
    gzip stream is read to its end, where gzip checks its CRC.

    Args:
        fileobj: the shard, opened for binary reading: a seekable file, or a stream
            read forward only (an HTTP body, a pipe; its ``seekable()`` says False).
        shard: its URL or path, for ``__url__`` and error messages.
        skip: samples to pass over first. Only their tar headers are parsed; the data
            of an uncompressed seekable shard is seeked past, a stream's read and dropped.

    Raises:
        ShardError: not a tar file; truncated (a member, a header, or the end-of-archive
            marker missing); a damaged member header (bad checksum, a number field that
            is neither octal nor base-256, a negative size); a malformed PAX record or a
            global PAX header that sets ``path`` or ``size``; a sparse member; a gzip
            error; data in the end-of-archive marker's record; a seekable file that
            reads on past its size (a device); a member of a sample appearing
            twice, or a sample's members not adjacent. The message names the shard and
            the byte offset (of the decompressed stream, for a gzip shard).

    Example:
        >>> import io, tarfile
        >>> buffer = io.BytesIO()
        >>> with tarfile.open(fileobj=buffer, mode="w") as tar:
        ...     for name, data in [("a.png", b"x"), ("a.cls", b"3")]:
        ...         info = tarfile.TarInfo(name); info.size = len(data)
        ...         tar.addfile(info, io.BytesIO(data))
        >>> _ = buffer.seek(0)
        >>> list(iter_samples(buffer, "s.tar"))
        [{'__key__': 'a', '__url__': 's.tar', 'png': b'x', 'cls': b'3'}]
    """
    seekable = fileobj.seekable()
    head = fileobj.read(2)
    compressed = head == b"\x1f\x8b"  # gzip checks its own length and CRC
    # The size of an uncompressed file bounds every size field before a read or seek;
    # a stream (an HTTP body, a pipe) is read forward only, its size unknown.
    end = fileobj.seek(0, 2) if seekable and not compressed else None
    stream: IO[bytes] | gzip.GzipFile | _Prefixed = fileobj
    if seekable:
        fileobj.seek(0)
    else:
        stream = _Prefixed(head, fileobj)
    if compressed:  # streamed, never seeked: gzip can only seek by decompressing
        stream = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[arg-type]
    read = stream.read
    key: str | None = None
    sample: dict[str, Any] = {}
    seen: set[str] = set()
    offset = 0  # where `header` starts in the (decompressed) tar stream
    long_name: str | None = None  # from a GNU long name or PAX header, for the next member
    pax_size: int | None = None
    extended = False  # an extension header waits for its member

    def where() -> str:
        return f" after sample {key!r}" if key is not None else ""

    def damaged(why: str) -> ShardError:
        if offset == 0:  # the first header: most likely not a tar file at all
            return ShardError(f"shard {shard!r} is not a valid tar file ({why} at byte 0); "
                              "fetch it again or rewrite it")
        return ShardError(f"shard {shard!r} has a damaged member header{where()} at byte "
                          f"{offset} ({why}); fetch it again or rewrite it")

    def truncated(raw: bytes | str, got: int, size: int) -> ShardError:
        name = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
        return ShardError(f"shard {shard!r} is not a valid tar file (member {name!r} at byte "
                          f"{offset} is truncated: {got} of its {size} bytes){where()}; "
                          "fetch it again or rewrite it")

    def fill(chunk: bytes, want: int) -> bytes:
        # Files and BytesIO return all that was asked for short of the end; a stream
        # that returns less is read until it has it or ends.
        while len(chunk) < want and (more := read(want - len(chunk))):
            chunk += more
        return chunk

    def take(size: int, name: bytes | str) -> tuple[bytes, bytes]:
        """The member's ``size`` data bytes and the next header, in one read if small."""
        # A size past the end of an uncompressed shard is refused before any read, so
        # a damaged size field never allocates more than the shard holds.
        if end is not None and offset + _BLOCK + size > end:
            raise truncated(name, max(end - offset - _BLOCK, 0), size)
        padded = -size & 511
        want = size + padded + _BLOCK
        if want <= _CHUNK:
            chunk = read(want)
            if len(chunk) < want:
                chunk = fill(chunk, want)
            data, header = chunk[:size], chunk[size + padded : want]
        elif end is not None:  # slicing a large member out of one read would copy it again
            data = fill(read(size), size)
            header = fill(read(padded + _BLOCK), padded + _BLOCK)[padded:]
        else:  # a gzip stream: its size is unknown, so read no more than it yields
            parts, got = [], 0
            while got < size and (part := read(min(size - got, _CHUNK))):
                parts.append(part)
                got += len(part)
            data = b"".join(parts)
            header = fill(read(padded + _BLOCK), padded + _BLOCK)[padded:]
        if len(data) < size:
            raise truncated(name, len(data), size)
        return data, header

    def past(size: int, name: bytes | str) -> bytes:
        """Passes over the member's data; returns the next header."""
        if end is not None:
            if offset + _BLOCK + size > end:
                raise truncated(name, max(end - offset - _BLOCK, 0), size)
            fileobj.seek(size + (-size & 511), 1)  # end is known: an uncompressed file
            return fill(read(_BLOCK), _BLOCK)
        done = 0  # a gzip stream cannot seek: decompress and drop, a chunk at a time
        while size - done > _CHUNK:
            got = len(fill(read(_CHUNK), _CHUNK))
            if got < _CHUNK:
                raise truncated(name, done + got, size)
            done += _CHUNK
        return take(size - done, name)[1]

    try:
        header = fill(read(_BLOCK), _BLOCK)
        while len(header) == _BLOCK and header != _ZERO:
            try:
                raw, size, kind = _header(header)
            except ValueError as error:
                raise damaged(str(error)) from None
            if kind in _EXTENSIONS:
                # tarfile reads an extension's padding too: a long name runs to its NUL.
                data, next_header = take(size + (-size & 511), raw)
                try:
                    if kind == _LONG_NAME and long_name is None:  # the first one applies
                        long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                    elif kind in _PAX:
                        long_name, pax_size = _pax(data, size, long_name, pax_size)
                    elif kind == _GLOBAL:
                        _pax(data, size, None, None, scope="global")
                except ValueError as error:
                    raise damaged(f"a bad extended header: {error}") from None
                offset += _BLOCK + size + (-size & 511)
                header, extended = next_header, True
                continue
            extended = False
            if long_name is not None:
                name, long_name = long_name, None
            else:
                name = raw.decode("utf-8", "surrogateescape")
            if pax_size is not None:
                size, pax_size = pax_size, None
            if kind == _SPARSE:
                raise ShardError(f"shard {shard!r} holds the sparse member {name!r} at byte "
                                 f"{offset}, which this reader does not expand; rewrite the "
                                 "shard without sparse files (tar without --sparse)")
            if kind in _NO_DATA:  # links, devices, directories, FIFOs: no data follows
                size = 0
            match = _KEY.match(name) if kind in _REGULAR else None
            if match is None or (name.startswith("__") and _META.match(name)):
                header = past(size, name)
                offset += _BLOCK + size + (-size & 511)
                continue
            base, ext = match.group(1), match.group(2).lower()
            if base != key:
                if key is not None and skip <= 0:
                    yield sample
                skip -= key is not None
                if base in seen:
                    raise ShardError(f"members of sample {base!r} in shard {shard!r} are "
                                     f"not adjacent (byte {offset}); write each sample's "
                                     "files together")
                key, sample = base, {"__key__": base, "__url__": shard}
                seen.add(base)
            if ext in sample:
                raise ShardError(f"sample {key!r} in shard {shard!r} has two {ext!r} "
                                 f"members (byte {offset}); give each file of a sample its "
                                 "own extension")
            if skip <= 0:
                sample[ext], header = take(size, name)
            else:
                sample[ext], header = b"", past(size, name)
            offset += _BLOCK + size + (-size & 511)
        if extended:
            raise damaged("an extended header with no member after it")
        if len(header) < _BLOCK:
            cut = "is cut short" if header else "is missing"
            raise ShardError(f"shard {shard!r} is not a valid tar file (the member header at "
                             f"byte {offset} {cut}: truncated, no end-of-archive marker)"
                             f"{where()}; fetch it again or rewrite it")
        # The archive ends with two zero blocks; only zero padding may follow them.
        second = fill(read(_BLOCK), _BLOCK)
        if second != _ZERO:
            if len(second) == _BLOCK:
                raise damaged("a zero block, then data: a zeroed member header, or data "
                              "after the end of the archive")
            raise ShardError(f"shard {shard!r} is not a valid tar file (it ends at byte "
                             f"{offset + _BLOCK + len(second)}, inside its end-of-archive "
                             f"marker of two zero blocks: truncated){where()}; fetch it again "
                             "or rewrite it")
        if end is not None and offset + 2 * _BLOCK > end:  # a device such as /dev/zero
            raise ShardError(f"shard {shard!r} is not a valid tar file (its size is {end} "
                             f"bytes, but it reads on past that: its end-of-archive marker at "
                             f"byte {offset} lies outside it){where()}; pass a tar file")
        offset += 2 * _BLOCK
        # Only zero padding may follow, up to the end of the record (the 10,240 bytes
        # writers pad an archive to). Nothing after that is read, as tarfile reads none
        # of it: an endless tail (/dev/zero, a pipe kept open) ends the shard too. A gzip
        # stream is read to its end, where gzip checks its CRC and length; its
        # compressed size bounds that read.
        tail = math.inf if compressed else -offset % _RECORD_SIZE
        while tail and (chunk := read(int(min(tail, _CHUNK)))):
            if chunk != bytes(len(chunk)):
                offset += len(chunk) - len(chunk.lstrip(b"\0"))
                raise damaged("data after the end of the archive")
            offset += len(chunk)
            tail -= len(chunk)
    # gzip's errors: bad data, cut short. A read error of the file or stream itself (a
    # disk's, a download's) is no fault of the shard's bytes and keeps its own type.
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise ShardError(f"shard {shard!r} is not a valid tar file (gzip: {error}, at byte "
                         f"{offset} of the decompressed tar){where()}; fetch it again or "
                         "rewrite it") from error
    if key is not None and skip <= 0:
        yield sample


class _Prefixed:
    """A forward-only stream with its first bytes, read to sniff gzip, put back in front."""

    def __init__(self, head: bytes, stream: IO[bytes]) -> None:
        self.head, self.stream = head, stream

    def read(self, size: int = -1) -> bytes:
        head = self.head
        if not head:
            return self.stream.read(size)
        if 0 <= size <= len(head):
            self.head = head[size:]
            return head[:size]
        self.head = b""
        return head + self.stream.read(size - len(head) if size >= 0 else -1)


def tar_number(field: bytes) -> int:
    r"""The value of a numeric field of a tar header: octal digits, or base-256.

    Writers store a number as octal ASCII digits ended by a NUL or a space; one too
    large for them (a size of 8 GiB or more) as a big-endian two's-complement number
    after a first byte of 0x80 (positive) or 0xff (negative), as GNU tar, POSIX
    ``star`` and Python's ``tarfile`` do. Spaces may pad the digits; whatever follows
    the first NUL is ignored, as :mod:`tarfile` ignores it.

    Raises:
        ValueError: the field is neither octal digits nor base-256; its header is damaged.

    Example:
        >>> tar_number(b"00000000012\x00")
        10
        >>> tar_number(b"\x80" + (9 << 30).to_bytes(11, "big"))  # 9 GiB, past octal's 8 GiB
        9663676416
    """
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    if field[:1] == b"\xff":
        return int.from_bytes(field[1:], "big") - (1 << 8 * (len(field) - 1))
    digits = field.split(b"\0", 1)[0].strip(b" ")
    if _OCTAL.fullmatch(digits) is None:
        raise ValueError(f"the number field {bytes(field)!r} is neither octal digits (padded "
                         "with spaces, ended by a NUL) nor base-256 (first byte 0x80 or 0xff)")
    return int(digits, 8) if digits else 0


def _header(block: bytes) -> tuple[bytes, int, int]:
    """The name, size and type flag of a 512-byte header, after checking its fields."""
    fields = _FIELDS.match(block, 100)  # what tarfile and GNU tar write: octal digits
    if fields is not None:
        digits, checksum = fields.group(1, 2)
        size, stored = int(digits, 8), int(checksum, 8)
    else:  # other writers, base-256 numbers, or damage: each field as tarfile reads it
        numbers = [tar_number(block[a:b]) for a, b in _NUMBERS]
        size, stored = numbers[3], numbers[5]
    # The checksum is the byte sum of the header with its own field read as spaces.
    # adler32's low half is 1 + the byte sum mod 65521; a 256-byte half sums to at most
    # 65280, so two halves give the exact sum without a Python loop over the bytes.
    total = (adler32(block[:256]) & 0xFFFF) + (adler32(block[256:]) & 0xFFFF) - 2
    total += 256 - sum(block[148:156])
    if stored != total and stored != total - 256 * sum(
            b >= 128 for b in block[:148] + block[156:]):  # old writers summed signed bytes
        raise ValueError("bad checksum")
    if size < 0:
        raise ValueError(f"a negative size {size}")
    kind = block[156]
    end = block.find(0, 0, 100)
    name = block[: end if end >= 0 else 100]
    if kind == 0 and name.endswith(b"/"):  # a pre-POSIX directory, as tarfile reads it
        kind = _DIRECTORY
    if block[345] and kind not in _GNU:  # tarfile joins a prefix whatever the magic
        end = block.find(0, 345, 500)
        name = block[345 : end if end >= 0 else 500] + b"/" + name
    return name, size, kind


def _pax(data: bytes, size: int, name: str | None, length: int | None, *,
         scope: str = "extended") -> tuple[str | None, int | None]:
    """The ``path`` and ``size`` records of a PAX header, where not set before.

    ``data`` is the header's data with its padding, ``size`` bytes of records. A record
    is ``"<length> <keyword>=<value>\\n"``, its length counting itself; within a header
    the last record of a keyword wins, as in :mod:`tarfile`.
    """
    path = value = None
    pos = 0
    while pos < size:
        match = _RECORD.match(data, pos, size)
        stop = pos + int(match.group(1)) if match else pos
        equals = data.find(b"=", match.end(), stop) if match else -1
        if match is None or equals <= match.end() or stop > size or data[stop - 1] != 0x0A:
            if data[pos:size] == bytes(size - pos):
                break  # NUL padding inside the size, as some writers leave it
            raise ValueError(f"a malformed record {pos} bytes into its data")
        keyword = data[match.end() : equals]
        if keyword == b"path":
            path = data[equals + 1 : stop - 1]
        elif keyword == b"size":
            value = data[equals + 1 : stop - 1]
        elif keyword == b"hdrcharset":
            charset = data[equals + 1 : stop - 1]
            try:  # tarfile fails on anything else
                charset.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"a hdrcharset record {charset[:30]!r} that is not UTF-8"
                                 ) from None
        elif keyword.startswith(b"GNU.sparse."):
            raise ValueError("a sparse member, which this reader does not expand")
        pos = stop
    if not data.endswith(_ZERO[: len(data) - size]):
        raise ValueError("bytes other than NUL in the padding after its records")
    if scope == "global" and (path is not None or value is not None):
        raise ValueError("a global header that sets 'path' or 'size' for every later "
                         "member, which this reader does not apply")
    if name is None and path is not None:
        name = path.decode("utf-8", "surrogateescape").rstrip("/")
    if length is None and value is not None:
        if not value.isdigit() or len(value) > 20:
            raise ValueError(f"a size record {value[:30]!r} that is not a decimal number")
        length = int(value)
    return name, length


def sha256(fileobj: IO[bytes]) -> Digest:
    """The size and SHA-256 hex digest of a file, read from its start in 1 MiB chunks.

    Example:
        >>> import io
        >>> size, digest = sha256(io.BytesIO(b"abc"))
        >>> size, digest[:12]
        (3, 'ba7816bf8f01')
    """
    fileobj.seek(0)
    digest, size = hashlib.sha256(), 0
    while chunk := fileobj.read(_CHUNK):
        digest.update(chunk)
        size += len(chunk)
    fileobj.seek(0)
    return size, digest.hexdigest()


def check_digest(fileobj: IO[bytes], shard: str, expected: Digest) -> None:
    """Raises :class:`ShardError` when the file's size or SHA-256 differs from ``expected``.

    ``expected`` is ``(size, sha256_hex)``; a None digest checks the size only.

    Example:
        >>> import io
        >>> check_digest(io.BytesIO(b"abc"), "s.tar", (4, None))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        dataecho.tarformat.ShardError: shard 's.tar' has 3 bytes, but the digests list 4 bytes; ...
    """
    size, want = expected
    if want is None:
        found: Digest = (fileobj.seek(0, 2), None)
        fileobj.seek(0)
    else:
        found = sha256(fileobj)
    if found != (size, want):
        raise ShardError(
            f"shard {shard!r} has {found[0]} bytes"
            + (f" and sha256 {found[1]}" if want is not None else "")
            + f", but the digests list {size} bytes"
            + (f" and sha256 {want}" if want is not None else "")
            + "; the shard changed since its digest was taken: fetch it again, or rewrite "
            "it and its digest")


def parse_digests(digests: Mapping[str, Any], urls: list[str]) -> dict[str, Digest]:
    """Each URL's digest from ``{url or file name: (size, sha256)}`` or a shard index.

    A shard index is a dict with a ``"shards"`` list of ``{"name", "bytes", "sha256"}``
    entries, as ``dataecho.demo.remote.write_shards`` writes it.

    Raises:
        ValueError: ``digests`` is malformed or has no entry for one of ``urls``.

    Example:
        >>> parse_digests({"shards": [{"name": "a.tar", "bytes": 3, "sha256": "ab"}]},
        ...               ["http://host/a.tar"])
        {'http://host/a.tar': (3, 'ab')}
    """
    if not isinstance(digests, Mapping):
        raise TypeError(f"digests must be a dict {{shard: (size, sha256 hex)}} or a shard "
                        f"index with a 'shards' list, got {type(digests).__name__}")
    try:
        if "shards" in digests and not isinstance(digests["shards"], (tuple, str)):
            table = {str(s["name"]): (int(s["bytes"]), s.get("sha256"))
                     for s in digests["shards"]}  # fmt: skip
        else:
            table = {str(k): (int(v[0]), None if v[1] is None else str(v[1]))
                     for k, v in digests.items()}  # fmt: skip
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise ValueError(f"digests must map each shard to (size in bytes, sha256 hex) or be a "
                         f"shard index whose 'shards' entries have 'name' and 'bytes', but "
                         f"reading it failed ({error!r}); build it as {{name: (size, hex)}}"
                         ) from error
    found: dict[str, Digest] = {}
    for url in urls:
        name = url.rsplit("/", 1)[-1]
        if url not in table and name not in table:
            raise ValueError(f"digests has no entry for shard {url!r} (by URL or by file "
                             f"name {name!r}); add one, or pass digests=None")
        found[url] = table[url] if url in table else table[name]
    return found
