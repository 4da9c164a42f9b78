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
_USTAR = b"ustar\0"  # POSIX ustar's magic; GNU's ("ustar  \0") keeps other fields at 345:500
# Type flags, as byte values: regular files (a NUL is pre-POSIX, "7" contiguous), the
# members whose data tarfile does not skip (links, devices, directories, FIFOs), the
# extension headers that describe the next member ("L", "K" GNU long name and link;
# "x", "X" PAX, "g" PAX global, whose records we ignore) and GNU sparse files.
_REGULAR = frozenset(b"0\x007")
_NO_DATA = frozenset(b"123456")
_LONG_NAME, _SPARSE = ord("L"), ord("S")
_PAX = frozenset(b"xX")
_EXTENSIONS = frozenset(b"LKxXg")
_GNU = frozenset(b"LKS")

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

    Example:
        >>> expand_urls("data-{00..02}.tar::extra-{a,b}.tar")
        ['data-00.tar', 'data-01.tar', 'data-02.tar', 'extra-a.tar', 'extra-b.tar']
    """
    return [url for part in pattern.split("::") for url in _expand(part)]


def _expand(pattern: str) -> list[str]:
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth, end, commas = 0, -1, []
    for i in range(start, len(pattern)):
        depth += {"{": 1, "}": -1}.get(pattern[i], 0)
        if pattern[i] == "," and depth == 1:
            commas.append(i)
        if depth == 0:
            end = i
            break
    if end < 0:
        raise ValueError(f"urls: the brace opened at character {start} of {pattern!r} is "
                         "never closed; write a list {a,b} or a range {000..009}")
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
    its name prefix), PAX extended headers (``path`` and ``size``; global headers are
    ignored), GNU long names and base-256 sizes are read; gzip-compressed shards are
    streamed through :mod:`gzip`.

    Args:
        fileobj: the shard, opened for binary reading and seekable.
        shard: its URL or path, for ``__url__`` and error messages.
        skip: samples to pass over first. Only their tar headers are read; the data
            of an uncompressed shard is seeked past.

    Raises:
        ShardError: not a tar file, truncated, a damaged member header (bad checksum),
            a sparse member, a member of a sample appears twice, or a sample's members
            are not adjacent; the message names the shard and sample.

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
    compressed = fileobj.read(2) == b"\x1f\x8b"  # gzip checks its own length and CRC
    end: int | None = None  # the size of an uncompressed shard, to tell a seek past its end
    if not compressed:
        # A tar cut at a member boundary reads as a shorter valid one; every tar writer
        # ends the archive with two zero blocks, so their absence is the tell.
        end = fileobj.seek(0, 2)
        fileobj.seek(max(end - 1024, 0))
        if end < 1024 or fileobj.read(1024) != bytes(1024):
            raise ShardError(f"shard {shard!r} is not a valid tar file (it does not end with "
                             "two zero blocks: truncated?); fetch it again or rewrite it")
    fileobj.seek(0)
    stream: IO[bytes] | gzip.GzipFile = fileobj
    if compressed:  # streamed, never seeked: gzip can only seek by decompressing
        stream = gzip.GzipFile(fileobj=fileobj, mode="rb")
    read = stream.read
    key: str | None = None
    sample: dict[str, Any] = {}
    seen: set[str] = set()
    offset = 0  # where `header` starts in the (decompressed) tar stream
    long_name: str | None = None  # from a GNU long name or PAX header, for the next member
    pax_size: int | None = None

    def where() -> str:
        return f" after sample {key!r}" if key is not None else ""

    def damaged(why: str) -> ShardError:
        if offset == 0:  # the first header: most likely not a tar file at all
            return ShardError(f"shard {shard!r} is not a valid tar file ({why} at byte 0); "
                              "fetch it again or rewrite it")
        return ShardError(f"shard {shard!r} has a damaged member header{where()} at byte "
                          f"{offset} ({why}); fetch it again or rewrite it")

    def fill(chunk: bytes, want: int) -> bytes:
        # Files and BytesIO return all that was asked for short of the end; a stream
        # that returns less is read until it has it or ends.
        while len(chunk) < want and (more := read(want - len(chunk))):
            chunk += more
        return chunk

    def take(size: int, name: str, before: int = 0) -> tuple[bytes, bytes]:
        """The member's next ``size`` data bytes and the next header, in one read if small.

        ``before`` counts the member's bytes already read, for the error message.
        """
        padded = -size & 511
        if size < _CHUNK:
            want = size + padded + _BLOCK
            chunk = read(want)
            if len(chunk) < want:
                chunk = fill(chunk, want)
            data, header = chunk[:size], chunk[size + padded : want]
        else:  # slicing a large member out of one read would copy it once more
            data = fill(read(size), size)
            header = fill(read(padded + _BLOCK), padded + _BLOCK)[padded:]
        if len(data) < size:
            raise truncated(name, before + len(data), before + size)
        return data, header

    def past(size: int, name: str) -> bytes:
        """Passes over the member's data; returns the next header."""
        if end is not None:
            if offset + _BLOCK + size > end:
                raise truncated(name, max(end - offset - _BLOCK, 0), size)
            stream.seek(size + (-size & 511), 1)
            return fill(read(_BLOCK), _BLOCK)
        done = 0  # a gzip stream cannot seek: decompress and drop, a chunk at a time
        while size - done > _CHUNK:
            got = len(fill(read(_CHUNK), _CHUNK))
            if got < _CHUNK:
                raise truncated(name, done + got, size)
            done += _CHUNK
        return take(size - done, name, done)[1]

    def truncated(name: str, got: int, size: int) -> ShardError:
        return ShardError(f"shard {shard!r} is not a valid tar file (member {name!r} at byte "
                          f"{offset} is truncated: {got} of its {size} bytes){where()}; "
                          "fetch it again or rewrite it")

    try:
        header = fill(read(_BLOCK), _BLOCK)
        while len(header) == _BLOCK and header != _ZERO:
            try:
                name, size = _header(header)
            except ValueError as error:
                raise damaged(str(error)) from None
            kind = header[156]
            if kind in _EXTENSIONS:
                data, next_header = take(size, name)
                try:
                    if kind == _LONG_NAME and long_name is None:  # the first one applies
                        long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                    elif kind in _PAX:
                        long_name, pax_size = _pax(data, long_name, pax_size)
                except ValueError as error:
                    raise damaged(f"a bad extended header: {error}") from None
                offset += _BLOCK + size + (-size & 511)
                header = next_header
                continue
            if long_name is not None:
                name, long_name = long_name, None
            if pax_size is not None:
                size, pax_size = pax_size, None
            if kind == _SPARSE:
                raise ShardError(f"shard {shard!r} holds the sparse member {name!r} at byte "
                                 f"{offset}, which this reader does not expand; rewrite the "
                                 "shard without sparse files (tar without --sparse)")
            if kind in _NO_DATA:  # links, devices, directories, FIFOs: no data follows
                size = 0
            match = _KEY.match(name) if kind in _REGULAR else None
            if match is None or _META.match(name):
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
                                     "not adjacent; write each sample's files together")
                key, sample = base, {"__key__": base, "__url__": shard}
                seen.add(base)
            if ext in sample:
                raise ShardError(f"sample {key!r} in shard {shard!r} has two {ext!r} "
                                 "members; give each file of a sample its own extension")
            if skip <= 0:
                sample[ext], header = take(size, name)
            else:
                sample[ext], header = b"", past(size, name)
            offset += _BLOCK + size + (-size & 511)
        if long_name is not None or pax_size is not None:
            raise damaged("an extended header with no member after it")
        if header.strip(b"\0"):
            raise ShardError(f"shard {shard!r} is not a valid tar file (the member header at "
                             f"byte {offset} is cut short: truncated){where()}; fetch it "
                             "again or rewrite it")
        # The archive ends at its first zero block: only zero padding may follow it.
        while chunk := read(_CHUNK):
            if chunk.strip(b"\0"):
                raise damaged("data after the end of the archive")
    except (EOFError, OSError, zlib.error) as error:  # gzip's: bad data, cut short
        raise ShardError(f"shard {shard!r} is not a valid tar file ({error}){where()}; fetch "
                         "it again or rewrite it") from error
    if key is not None and skip <= 0:
        yield sample


def tar_number(field: bytes) -> int:
    r"""The value of a numeric field of a tar header: octal digits, or base-256.

    Writers store a number as octal ASCII digits ended by a NUL or a space; one too
    large for them (a size of 8 GiB or more) as a big-endian two's-complement number
    whose first byte has its high bit set (GNU tar, POSIX ``star``, Python's ``tarfile``).

    Raises:
        ValueError: the field is neither octal digits nor base-256; its header is damaged.

    Example:
        >>> tar_number(b"00000000012\x00")
        10
        >>> tar_number(b"\x80" + (9 << 30).to_bytes(11, "big"))  # 9 GiB, past octal's 8 GiB
        9663676416
    """
    if field and field[0] & 0x80:
        value = int.from_bytes(field, "big") & ~(1 << (8 * len(field) - 1))
        # The remaining bits are a two's-complement number: 0xff... starts a negative one.
        return value - (1 << (8 * len(field) - 1)) if field[0] & 0x40 else value
    digits = field.split(b"\0", 1)[0].strip()
    try:
        return int(digits, 8) if digits else 0
    except ValueError:
        raise ValueError(f"the number field {bytes(field)!r} is neither octal digits nor "
                         "base-256 (high bit set)") from None


def _header(block: bytes) -> tuple[str, int]:
    """The name and size of a 512-byte header, after checking its checksum."""
    # The checksum is the byte sum of the header with its own field read as spaces.
    # adler32's low half is 1 + the byte sum mod 65521; a 256-byte half sums to at most
    # 65280, so two halves give the exact sum without a Python loop over the bytes.
    total = (adler32(block[:256]) & 0xFFFF) + (adler32(block[256:]) & 0xFFFF) - 2
    total += 256 - sum(block[148:156])
    stored = tar_number(block[148:156])
    if stored != total and stored != total - 256 * sum(
            b >= 128 for b in block[:148] + block[156:]):  # old writers summed signed bytes
        raise ValueError("bad checksum")
    size = tar_number(block[124:136])
    if size < 0:
        raise ValueError(f"a negative size {size}")
    end = block.find(0, 0, 100)
    name = block[: end if end >= 0 else 100]
    if block[257:263] == _USTAR and block[345] and block[156] not in _GNU:
        end = block.find(0, 345, 500)
        name = block[345 : end if end >= 0 else 500] + b"/" + name
    return name.decode("utf-8", "surrogateescape"), size


def _pax(data: bytes, name: str | None, size: int | None) -> tuple[str | None, int | None]:
    """The ``path`` and ``size`` records of a PAX extended header, where not set before.

    A record is ``"<length> <keyword>=<value>\\n"``, its length counting itself.
    """
    pos = 0
    while pos < len(data) and data[pos]:  # the data may end with NUL padding
        space = data.index(b" ", pos)
        stop = pos + int(data[pos:space])
        keyword, equals, value = data[space + 1 : stop - 1].partition(b"=")
        if not equals or stop > len(data) or data[stop - 1] != 0x0A:
            raise ValueError(f"a malformed record {pos} bytes into its data")
        if keyword == b"path" and name is None:
            name = value.decode("utf-8", "surrogateescape").rstrip("/")
        elif keyword == b"size" and size is None:
            size = int(value)
        elif keyword.startswith(b"GNU.sparse."):
            raise ValueError("a sparse member, which this reader does not expand")
        pos = stop
    return name, size


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
