"""The WebDataset tar format: shard URL patterns, samples from a tar file, shard digests.

A WebDataset shard is a plain tar file. A sample is a run of consecutive members that
share a key: the member's path up to the first dot of its file name
(``train/00000007.seg.png`` has key ``train/00000007`` and extension ``seg.png``).
These rules are webdataset's own (``tariterators.base_plus_ext``, ``group_by_keys``),
so shards written by ``webdataset.TarWriter`` read here and the other way round.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import tarfile
from collections.abc import Iterator, Mapping
from typing import IO, Any, cast

_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext
_META = re.compile(r"__[^/]*__($|/)")  # webdataset skips __*__ members (shard metadata)
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
_CHUNK = 1 << 20  # hashing reads 1 MiB at a time, so a large shard never sits in memory

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

    Args:
        fileobj: the shard, opened for binary reading and seekable.
        shard: its URL or path, for ``__url__`` and error messages.
        skip: samples to pass over first. Only their tar headers are read; the data
            of an uncompressed shard is seeked past.

    Raises:
        ShardError: not a tar file, truncated, a member of a sample appears twice, or
            a sample's members are not adjacent; the message names the shard and sample.

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
    if not compressed:
        # tarfile reads a tar cut at a member boundary as a shorter valid one; every tar
        # writer ends the archive with two zero blocks, so their absence is the tell.
        size = fileobj.seek(0, 2)
        fileobj.seek(max(size - 1024, 0))
        if size < 1024 or fileobj.read(1024) != bytes(1024):
            raise ShardError(f"shard {shard!r} is not a valid tar file (it does not end with "
                             "two zero blocks: truncated?); fetch it again or rewrite it")
    fileobj.seek(0)
    key: str | None = None
    sample: dict[str, Any] = {}
    seen: set[str] = set()
    try:
        with tarfile.open(fileobj=fileobj, mode="r:gz" if compressed else "r:") as archive:
            for member in archive:
                match = _KEY.match(member.name)
                if not member.isreg() or match is None or _META.match(member.name):
                    continue
                name, ext = match.group(1), match.group(2).lower()
                if name != key:
                    if key is not None and skip <= 0:
                        yield sample
                    skip -= key is not None
                    if name in seen:
                        raise ShardError(f"members of sample {name!r} in shard {shard!r} are "
                                         "not adjacent; write each sample's files together")
                    key, sample = name, {"__key__": name, "__url__": shard}
                    seen.add(name)
                if ext in sample:
                    raise ShardError(f"sample {key!r} in shard {shard!r} has two {ext!r} "
                                     "members; give each file of a sample its own extension")
                if skip <= 0:
                    handle = archive.extractfile(member)
                    sample[ext] = handle.read() if handle is not None else b""
                else:
                    sample[ext] = b""
            # tarfile ends the walk quietly at a zeroed header past the first one: only
            # zero padding may follow the archive's last member.
            stream = cast(IO[bytes], archive.fileobj)  # set: the archive was opened on one
            stream.seek(archive.offset)
            while chunk := stream.read(_CHUNK):
                if chunk.strip(b"\0"):
                    break
            if chunk:
                where = f" after sample {key!r}" if key is not None else ""
                raise ShardError(f"shard {shard!r} has a damaged member header{where} at "
                                 f"byte {archive.offset}; fetch it again or rewrite it")
    except (tarfile.TarError, EOFError, OSError) as error:
        where = f" after sample {key!r}" if key is not None else ""
        raise ShardError(f"shard {shard!r} is not a valid tar file ({error}){where}; fetch "
                         "it again or rewrite it") from error
    if key is not None and skip <= 0:
        yield sample


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
