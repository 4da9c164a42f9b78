"""The tar shard reader: WebDataset-format shards, local, streamed over HTTP or through fsspec."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import tempfile
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from . import _rng
from ._checks import (
    check_bool,
    check_epochs,
    check_positive_int,
    check_seed,
    check_shard,
    state_int,
)
from .download import DEFAULT_DEADLINE, DEFAULT_READAHEAD, Stream, check_max_bytes
from .stage import Stage, State
from .tarformat import (
    Digest,
    ShardError,
    check_digest,
    expand_urls,
    iter_samples,
    parse_digests,
)

Sample = dict[str, Any]
_INDEX_FORMAT = "dataecho-shards/1"  # what write_shards writes beside its shards
_HTTP = ("http://", "https://")
_FSSPEC = "pip install 'dataecho[fsspec]'"


class TarShards(Stage[Sample]):
    """Reads the samples of WebDataset-format tar shards, shard by shard, checkpointably.

    Samples come as webdataset yields them: a dict with ``"__key__"``, ``"__url__"``
    and one ``bytes`` value per file extension (``"png"``, ``"cls"``, ...), undecoded:
    decode with :class:`dataecho.Map`. Shards written by ``webdataset.TarWriter`` or
    ``ShardWriter`` read here, and ``webdataset.WebDataset`` reads the same files.

    The shard order of epoch ``e`` is a permutation keyed by ``(seed, e)``; reader
    ``k`` of ``n`` takes positions ``k, k + n, ...`` of it, so DataLoader workers and
    DDP ranks (``shard_index = rank * num_workers + worker``) read disjoint shards that
    together cover the epoch. Within a shard samples come in tar order: put a
    :class:`dataecho.Shuffle` downstream.

    The checkpoint holds (epoch, shard position, sample offset), never bytes. Restoring
    opens the current shard again and skips ``offset`` samples; earlier shards are not
    read. A local shard's skipped samples cost only their tar headers (the data is
    seeked past); a streamed shard's skipped samples are received again and dropped, up
    to one shard's transfer per restore. A shard with a digest (``digests``, or by
    default the index ``write_shards`` leaves beside local shards) is read whole to
    check it before its first sample (a remote one into a temporary file that holds
    ``readahead`` bytes in memory and the rest on disk).

    ``http(s)://`` shards are streamed: the tar reader reads the body as it arrives,
    through a read-ahead buffer of ``readahead`` bytes filled by a daemon thread, so
    memory is bounded by ``prefetch + 1`` read-aheads (each ``readahead`` bytes and a
    piece of at most a MiB waiting for room), not by a shard. The next
    ``prefetch`` shards start arriving (up to ``readahead`` bytes each) while the
    current one is read. A connection that breaks mid-shard is resumed with a ``Range``
    request (see :class:`dataecho.download.Stream`); ``close()``, ``with``, the end of
    the last epoch or garbage collection stop the threads, and a download's error is
    raised by ``next()`` with its own type. Other URLs with a scheme (``s3://``,
    ``gs://``, ``memory://``, ...) are opened with fsspec (``pip install
    'dataecho[fsspec]'`` and the store's package, e.g. s3fs), which reads ``readahead``
    bytes at a time. Local files are read in the caller's thread (the operating system
    reads ahead).

    Args:
        urls: local paths, ``file:``, ``http(s)://`` or fsspec URLs, as a list or one
            string in webdataset's brace notation (``"data-{000000..000009}.tar"``).
        shuffle: permute the shards each epoch (else read them in the given order).
        seed: seed of the per-epoch shard order.
        num_epochs: epochs to read; None reads forever.
        epoch: the first epoch (e.g. from ``set_epoch``).
        shard_index: this reader, in ``[0, num_shards)``.
        num_shards: how many readers share the shards; at most ``len(urls)``.
        prefetch: ``http(s)`` shards whose transfer starts ahead of their turn; 0 starts
            each when it is needed.
        retries: retries per download (see :func:`dataecho.fetch`).
        digests: ``{shard URL or file name: (size, sha256 hex)}``, or a shard index
            dict with a ``"shards"`` list of ``{"name", "bytes", "sha256"}``; each
            shard is checked before its first sample, and a mismatch raises
            :class:`ShardError` naming the shard. ``"auto"`` (the default) uses the
            ``*-index.json`` files that ``write_shards`` leaves beside local shards
            (format ``dataecho-shards/1``; others are ignored) for the shards they
            list; None checks nothing. A shard with no digest is not checked: a damaged
            byte inside a sample's data then goes undetected, as tar keeps no checksum
            over member data.
        max_bytes: the largest ``http(s)`` shard accepted, in bytes; None takes the
            size ``digests`` lists for the shard, else ``DEFAULT_MAX_BYTES`` (2 GiB).
        deadline: seconds one ``http(s)`` shard's transfer may spend waiting for the
            server, retries included (default 900; time paused on a full read-ahead does
            not count); None sets none.
        readahead: bytes of a streamed shard held ahead of the reader (default 8 MiB),
            and the block size fsspec reads with.

    Example:
        >>> import io, tarfile, tempfile
        >>> path = tempfile.mkdtemp() + "/part-0.tar"
        >>> with tarfile.open(path, "w") as tar:
        ...     for name, data in [("a.txt", b"hi"), ("a.cls", b"1"), ("b.txt", b"yo")]:
        ...         info = tarfile.TarInfo(name); info.size = len(data)
        ...         tar.addfile(info, io.BytesIO(data))
        >>> [(s["__key__"], s["txt"]) for s in TarShards([path])]
        [('a', b'hi'), ('b', b'yo')]
    """

    def __init__(self, urls: str | Sequence[str | os.PathLike[str]], *, shuffle: bool = True,
                 seed: int = 0, num_epochs: int | None = 1, epoch: int = 0,
                 shard_index: int = 0, num_shards: int = 1, prefetch: int = 1,
                 retries: int = 5, digests: Mapping[str, Any] | str | None = "auto",
                 max_bytes: int | None = None, deadline: float | None = DEFAULT_DEADLINE,
                 readahead: int = DEFAULT_READAHEAD) -> None:
        self.pattern = urls if isinstance(urls, str) else None
        self.urls = _check_urls(urls)
        self.shuffle = check_bool(shuffle, "shuffle")
        self.seed = check_seed(seed)
        self.num_epochs, self.first_epoch = check_epochs(num_epochs, epoch)
        self.shard_index, self.num_shards = check_shard(shard_index, num_shards)
        if self.num_shards > len(self.urls):
            raise ValueError(
                f"num_shards={self.num_shards} readers need at least as many shards, but "
                f"urls lists {len(self.urls)}: some readers would read nothing; use fewer "
                "workers or ranks, or write the data into more shards")
        self.prefetch = check_positive_int(prefetch, "prefetch", minimum=0)
        self.retries = check_positive_int(retries, "retries", minimum=0)
        if isinstance(digests, str):
            if digests != "auto":
                raise ValueError(f"digests must be a dict, 'auto' or None, got {digests!r}; "
                                 "pass 'auto' to use write_shards's index beside local shards")
            self._digests = _beside(self.urls)
        else:
            self._digests = {} if digests is None else parse_digests(digests, self.urls)
        self.max_bytes = None if max_bytes is None else check_max_bytes(max_bytes, "TarShards")
        self.deadline = _check_deadline(deadline)
        self.readahead = check_positive_int(readahead, "readahead")
        names = "\n".join(u.rsplit("/", 1)[-1] for u in self.urls)
        self._params = {"num_urls": len(self.urls),
                     "names_sha256": hashlib.sha256(names.encode()).hexdigest()[:16],
                     "shuffle": self.shuffle, "seed": self.seed, "num_epochs": self.num_epochs,
                     "epoch": self.first_epoch, "shard_index": self.shard_index,
                     "num_shards": self.num_shards}  # fmt: skip
        self._epoch, self._pos, self._offset, self.items_read = self.first_epoch, 0, 0, 0
        self._empty = 0  # shards in a row that held no sample
        self.bytes_read = 0  # shard bytes received or opened, for throughput reports
        self._orders: dict[int, list[int]] = {}
        self._file: IO[bytes] | None = None
        self._opened_at = 0  # the offset the open shard was opened at
        self._cursor: Iterator[Sample] | None = None
        self._pending: dict[tuple[int, int], Stream] = {}  # the current and next streams

    def with_reader(self, shard_index: int, num_shards: int, epoch: int) -> TarShards:
        """The same shards read for one epoch by reader ``shard_index`` of ``num_shards``.

        How ``EchoDataset`` gives each DataLoader worker of each rank its own whole
        shards (``shard_index = rank * num_workers + worker``).

        Example:
            >>> TarShards(["a.tar", "b.tar"]).with_reader(1, 2, epoch=3).shard_index
            1
        """
        return TarShards(self.pattern if self.pattern is not None else self.urls,
                         shuffle=self.shuffle, seed=self.seed, num_epochs=1, epoch=epoch,
                         shard_index=shard_index, num_shards=num_shards,
                         prefetch=self.prefetch, retries=self.retries,
                         digests=self._digests or None, max_bytes=self.max_bytes,
                         deadline=self.deadline, readahead=self.readahead)

    @property
    def epoch(self) -> int:
        """The epoch of the sample returned last (the first epoch before any)."""
        return self._epoch

    def order(self, epoch: int) -> list[int]:
        """Indices into ``urls`` that this reader reads in ``epoch``, in order."""
        if epoch not in self._orders:
            if len(self._orders) > 2:
                self._orders.clear()
            n = len(self.urls)
            perm = (_rng.rng(self.seed, _rng.SHARD_ORDER, epoch).permutation(n) if self.shuffle
                    else np.arange(n))  # fmt: skip
            self._orders[epoch] = perm[self.shard_index :: self.num_shards].tolist()
        return self._orders[epoch]

    def _finished(self) -> bool:
        return self.num_epochs is not None and self._epoch >= self.first_epoch + self.num_epochs

    def __next__(self) -> Sample:
        while True:
            if self._finished():
                self.close()  # the download thread ends with the last shard
                raise StopIteration
            cursor = self._cursor if self._cursor is not None else self._open()
            try:
                sample = next(cursor, None)
            except BaseException:
                self._close_shard()  # next() opens the shard again at the same sample
                raise
            if sample is not None:
                break
            if self._offset and self._opened_at == self._offset:
                self._check_offset()  # a restored offset no sample followed
            self._close_shard()
            self._empty = self._empty + 1 if self._offset == 0 else 0
            if self._empty > len(self.urls):  # else an endless run would spin forever
                raise ShardError(f"TarShards: {self._empty} shards in a row held no samples; "
                                 "every shard of this reader is empty: check urls")
            self._offset, self._pos = 0, self._pos + 1
            if self._pos >= len(self.order(self._epoch)):
                self._epoch, self._pos = self._epoch + 1, 0
        self._offset += 1
        self.items_read += 1
        return sample

    def _open(self) -> Iterator[Sample]:
        url = self.urls[self.order(self._epoch)[self._pos]]
        self._file = fileobj = self._source(url)
        try:
            if url in self._digests:
                if fileobj.seekable() and not _remote(url):
                    check_digest(fileobj, url, self._digests[url])
                else:  # checked before its first sample: held on disk, not in memory
                    self._file = fileobj = _spooled(fileobj, self._digests[url][0],
                                                    self.readahead)
                    check_digest(fileobj, url, self._digests[url])
            if fileobj.seekable():
                self.bytes_read += fileobj.seek(0, 2)
                fileobj.seek(0)
                self._cursor = cursor = iter_samples(fileobj, url, skip=self._offset)
            elif self._offset:  # a stream cannot be read twice: check the offset on the way
                cursor = iter_samples(fileobj, url, skip=self._offset - 1)
                if next(cursor, None) is None:
                    raise self._past_end(url)
                self._cursor = cursor
            else:
                self._cursor = cursor = iter_samples(fileobj, url)
            self._opened_at = self._offset
        except BaseException:
            self._close_shard()
            raise
        return cursor

    def _source(self, url: str) -> IO[bytes]:
        """The shard at ``url`` opened: a stream, an fsspec file or a local file."""
        if url.startswith(_HTTP):
            return cast(IO[bytes], self._stream(url))
        if _remote(url):
            opened = importlib.import_module("fsspec").open(url, "rb", block_size=self.readahead)
            return cast(IO[bytes], opened.open())
        return open(_local_path(url), "rb")  # closed by _close_shard

    def _check_offset(self) -> None:
        """Refuses an offset past the end of its shard instead of skipping the shard."""
        url = self.urls[self.order(self._epoch)[self._pos]]
        if self._file is None or not self._file.seekable():
            return  # a stream's offset was checked when it was opened
        self._file.seek(0)
        if next(iter_samples(self._file, url, skip=self._offset - 1), None) is None:
            self._close_shard()
            raise self._past_end(url)

    def _past_end(self, url: str) -> ValueError:
        return ValueError(
            f"state of TarShards has offset={self._offset}, but shard {url!r} (position "
            f"{self._pos} of epoch {self._epoch}) holds fewer samples; the rule: offset "
            "counts the samples read of the current shard, at most its sample count. The "
            "checkpoint does not belong to these shards (were they rewritten?): restore "
            "one saved with them, or start without it")

    def _stream(self, url: str) -> Stream:
        # The current shard and the next `prefetch` ones arrive at once, each into its
        # own read-ahead; their first requests go out in reading order.
        keys = self._next_keys()
        for key in [k for k in self._pending if k not in keys]:
            self._pending.pop(key).close()
        current = (self._epoch, self._pos)
        stream = self._pending.pop(current, None) or Stream(url, **self._how(url))
        before = stream
        for key in keys:
            if key != current and key not in self._pending:
                later = self.urls[self.order(key[0])[key[1]]]
                self._pending[key] = Stream(later, after=before, **self._how(later))
            before = self._pending.get(key, before)
        return stream

    def _how(self, url: str) -> dict[str, Any]:
        # A shard the digests list is refused as soon as it outgrows its listed size.
        limit = self.max_bytes
        if limit is None and url in self._digests:
            limit = self._digests[url][0]
        return {"retries": self.retries, "deadline": self.deadline, "max_bytes": limit,
                "readahead": self.readahead}

    def _next_keys(self) -> list[tuple[int, int]]:
        keys: list[tuple[int, int]] = []
        epoch, pos = self._epoch, self._pos
        for _ in range(min(self.prefetch + 1, 1 << 16)):
            if pos >= len(self.order(epoch)):
                epoch, pos = epoch + 1, 0
            if self.num_epochs is not None and epoch >= self.first_epoch + self.num_epochs:
                break
            if self.urls[self.order(epoch)[pos]].startswith(_HTTP):
                keys.append((epoch, pos))
            pos += 1
        return keys

    def _close_shard(self) -> None:
        if isinstance(self._file, Stream):
            self.bytes_read += self._file.received
        if self._file is not None:
            self._file.close()
        self._file = self._cursor = None

    def close(self) -> None:
        """Closes the open shard and stops every transfer, waiting for its thread to end."""
        self._close_shard()
        for stream in self._pending.values():
            stream.close()
        self._pending = {}

    def _config(self) -> dict[str, Any]:
        return self._params

    def _snapshot(self) -> Any:
        return (self._epoch, self._pos, self._offset, self.items_read)

    def _state(self, token: Any) -> State:
        return {"epoch": token[0], "position": token[1], "offset": token[2], "read": token[3]}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        last = None if self.num_epochs is None else self.first_epoch + self.num_epochs
        epoch = state_int(state, "epoch", "TarShards", minimum=self.first_epoch, maximum=last,
                          rule="the epochs this reader reads, or the one after the last "
                          "when it ended")
        shards = len(self.order(epoch))
        position = state_int(state, "position", "TarShards", maximum=shards - 1,
                             rule=f"a position in this reader's {shards} shards per epoch")
        read = state_int(state, "read", "TarShards", rule="samples read so far")
        offset = state_int(state, "offset", "TarShards", maximum=read,
                           rule="samples read of the current shard, at most 'read' (and at "
                           "most the shard's sample count, checked when it is opened)")
        self.close()
        self._epoch, self._pos, self._offset, self.items_read = epoch, position, offset, read

    def _repr_args(self) -> dict[str, Any]:
        args = {k: v for k, v in self._params.items() if k not in ("num_urls", "names_sha256")}
        if self.num_shards == 1:
            del args["shard_index"], args["num_shards"]
        if self.first_epoch == 0:
            del args["epoch"]
        args["prefetch"] = self.prefetch
        if self.readahead != DEFAULT_READAHEAD:
            args["readahead"] = self.readahead
        return args

    def _repr_head(self) -> str:
        return (repr(self.pattern) if self.pattern is not None
                else f"<{len(self.urls)} urls: {self.urls[0]!r}, ...>")


def _check_urls(urls: object) -> list[str]:
    if isinstance(urls, str):
        found = expand_urls(urls)
    elif isinstance(urls, Sequence) and all(isinstance(u, (str, os.PathLike)) for u in urls):
        found = [os.fspath(u) for u in urls]
    else:
        raise TypeError(f"urls must be a list of paths or URLs, or one string in brace "
                        f"notation, got {type(urls).__name__}; pass e.g. "
                        "'data-{000000..000009}.tar'")
    if not found:
        raise ValueError("urls is empty: pass at least one shard path or URL")
    schemes: set[str] = set()
    for url in found:
        scheme = urllib.parse.urlsplit(url).scheme
        if _remote(url) and not url.startswith(_HTTP) and scheme not in schemes:
            _check_fsspec(url, scheme)
            schemes.add(scheme)
        host = urllib.parse.urlsplit(url).netloc if scheme == "file" else ""
        if host not in ("", "localhost"):
            raise ValueError(f"urls: {url!r} names the host {host!r}, but a file: URL is read "
                             "from this machine, so its host must be empty or 'localhost'; "
                             "write file:///path, or an http(s):// URL for another machine")
    return found


def _check_fsspec(url: str, scheme: str) -> None:
    """Refuses a URL that fsspec cannot open here, naming what to install."""
    try:
        fsspec = importlib.import_module("fsspec")
    except ImportError:
        raise ImportError(f"urls: {url!r} has scheme {scheme!r}, which TarShards opens with "
                          f"fsspec, but fsspec is not installed; {_FSSPEC}") from None
    try:
        fsspec.get_filesystem_class(scheme)
    except ImportError as error:  # fsspec knows the store, its package is missing
        raise ImportError(f"urls: {url!r} has scheme {scheme!r}, whose fsspec filesystem "
                          f"needs a package that is not installed: {error}") from None
    except ValueError:
        raise ValueError(f"urls: {url!r} has scheme {scheme!r}, which neither TarShards nor "
                         "fsspec knows; pass local paths, file:, http(s):// or fsspec URLs "
                         "(s3://, gs://, ...)") from None


def _remote(url: str) -> bool:
    """Whether ``url`` names another machine's file (not a path, a drive letter or file:)."""
    scheme = urllib.parse.urlsplit(url).scheme
    return len(scheme) > 1 and scheme != "file"


def _spooled(source: IO[bytes], size: int, memory: int) -> IO[bytes]:
    """``source`` copied (at most ``size + 1`` bytes) into a file: ``memory`` bytes in RAM."""
    try:
        copy = tempfile.SpooledTemporaryFile(max_size=memory)  # noqa: SIM115 (returned)
        left = size + 1  # one byte past the listed size shows the shard outgrew it
        while left > 0 and (piece := source.read(min(left, 1 << 20))):
            copy.write(piece)
            left -= len(piece)
    finally:
        source.close()
    copy.seek(0)
    return cast(IO[bytes], copy)


def _beside(urls: list[str]) -> dict[str, Digest]:
    """Digests of local shards from the ``write_shards`` index files in their folders."""
    tables: dict[str, dict[str, Digest]] = {}
    found: dict[str, Digest] = {}
    for url in urls:
        if _remote(url):
            continue
        path = Path(_local_path(url))
        folder = str(path.parent)
        if folder not in tables:
            tables[folder] = _indexes(path.parent)
        if path.name in tables[folder]:
            found[url] = tables[folder][path.name]
    return found


def _indexes(folder: Path) -> dict[str, Digest]:
    # Only files in write_shards's format count: any other *-index.json is not ours.
    table: dict[str, Digest] = {}
    with contextlib.suppress(OSError):
        for index_path in sorted(folder.glob("*-index.json")):
            try:
                index = json.loads(index_path.read_bytes())
                if isinstance(index, dict) and index.get("format") == _INDEX_FORMAT:
                    table.update({str(s["name"]): (int(s["bytes"]), str(s["sha256"]))
                                  for s in index["shards"]})  # fmt: skip
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return table


def _check_deadline(deadline: object) -> float | None:
    if deadline is None:
        return None
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)):
        raise TypeError(f"TarShards: deadline must be a number of seconds or None, got "
                        f"{type(deadline).__name__}")
    if not 0 < deadline < float("inf"):
        raise ValueError(f"TarShards: deadline must be > 0 seconds and finite, got {deadline!r};"
                         " pass None for no deadline")
    return float(deadline)


def _local_path(url: str) -> str:
    if url.startswith("file:"):
        return urllib.parse.unquote(urllib.parse.urlsplit(url).path)
    return url
