"""Downloads over HTTP: :func:`fetch` for a whole body, :class:`Stream` for one read as it arrives.

Object stores fail transiently (503s, reset connections, bodies cut short), so both
retry those with exponential backoff, resume a body cut short with a ``Range``
request where the server supports it, and fail at once on client errors, which no
retry can fix. :class:`dataecho.TarShards` streams every ``http(s)://`` shard through
a :class:`Stream`. Standard library only.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import math
import numbers
import queue
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

# 408 and 429 are client-side codes that still mean "try again later", and object
# stores (GCS, S3) document them as retryable; every other 4xx is final.
_RETRY_STATUS = frozenset({408, 429})
_MAX_DELAY = 10.0  # caps the backoff so a large `retries` never sleeps for hours
# A proxy from $http_proxy cannot reach this machine's loopback: loopback URLs
# (ShardServer's) go direct, so tests pass on CI hosts that set a proxy.
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_DIGITS = re.compile(r"[0-9]{1,20}")  # a Content-Length: ASCII digits only (str.isdigit takes "²")
_RANGE = re.compile(r"bytes ([0-9]{1,20})-([0-9]{1,20})/([0-9]{1,20}|\*)")


class FetchError(OSError):
    """A URL that could not be fetched: a client error, or retries exhausted.

    Attributes:
        url: The URL.
        attempts: Requests made.
        status: The last HTTP status, or None when no response arrived.

    Example:
        >>> try:
        ...     fetch("http://127.0.0.1:9/x", retries=0)  # port 9 (discard): nothing listens
        ... except FetchError as error:
        ...     print(error.attempts, error.status)
        1 None
    """

    def __init__(self, message: str, *, url: str, attempts: int, status: int | None) -> None:
        super().__init__(message)
        self.url, self.attempts, self.status = url, attempts, status


DEFAULT_MAX_BYTES = 1 << 31  # 2 GiB: no more than this is read of a body of unknown size
DEFAULT_DEADLINE = 900.0  # seconds for a whole fetch, retries and waits included
DEFAULT_READAHEAD = 8 << 20  # bytes a Stream holds ahead of its reader
_PIECE = 1 << 20  # bytes per read of a body: size, deadline and cancel are checked between


def fetch(url: str, *, retries: int = 5, backoff: float = 0.05, timeout: float = 30.0,
          max_bytes: int | None = None, deadline: float | None = DEFAULT_DEADLINE,
          cancel: threading.Event | None = None) -> bytes:
    """Downloads ``url``, retrying transient failures, within a size and a time limit.

    The whole body is returned, so it is held in memory (up to ``max_bytes``); a large
    body is better read as it arrives through a :class:`Stream`, as
    :class:`dataecho.TarShards` reads its shards.

    Retried: HTTP 5xx, 408 and 429, refused or reset connections, timeouts, and
    bodies shorter than their ``Content-Length``. Attempt ``k`` (from 1) after a
    failure waits ``backoff * 2**(k - 1)`` seconds, at most 10. A body cut short is
    resumed where it broke off with a ``Range`` request; a server that answers it with
    the whole body again (no range support) has the bytes already read passed over,
    and one whose ``ETag`` or ``Last-Modified`` changed meanwhile is refused.

    Never retried: a body larger than ``max_bytes`` (refused from its
    ``Content-Length`` before any of it is read, or as soon as it has read past the
    limit), a fetch still running at its ``deadline``, and a ``Content-Length`` that is
    not one number of ASCII digits (``+20480``, ``20480, 20480``): the end of such a
    body cannot be checked, so it is not trusted (RFC 9112, section 6.3). The body is
    read a MiB at a time, so a server that sends without end is cut off at the limit,
    and a slow one at the deadline (one read blocks at most ``timeout`` seconds past it).

    Args:
        url: An ``http://`` or ``https://`` URL.
        retries: Extra attempts after the first; 0 tries once.
        backoff: Seconds before the first retry; doubles for each further retry.
        timeout: Seconds a connect or a read may block.
        max_bytes: The largest body accepted, in bytes; None means
            ``DEFAULT_MAX_BYTES`` (2 GiB). :class:`dataecho.TarShards` passes the
            size its ``digests`` list for the shard.
        deadline: Seconds the whole fetch may take, retries and waits included
            (``DEFAULT_DEADLINE``, 900); None sets no deadline.
        cancel: An event that, once set, ends the fetch between two reads with a
            :class:`FetchError` (how :class:`Downloads` stops on ``close()``).

    Raises:
        TypeError, ValueError: An argument has the wrong type or is out of range.
        FetchError: A 4xx answer (at once), a body over ``max_bytes``, a malformed
            ``Content-Length``, the deadline passed or the fetch cancelled (at once),
            or every attempt failed.

    Example:
        >>> import tempfile; from pathlib import Path; from dataecho.demo.remote import ShardServer
        >>> root = tempfile.mkdtemp(); _ = Path(root, "x.bin").write_bytes(b"abc")
        >>> with ShardServer(root) as server:
        ...     server.fail_next(2)  # two 503s, then the file
        ...     fetch(server.url + "/x.bin", backoff=0.001)
        b'abc'
    """
    limit = _check(url, retries, backoff, timeout, max_bytes, deadline, "fetch")
    transfer = _Transfer(url, retries, backoff, timeout, limit, deadline,
                         cancel if cancel is not None else threading.Event())
    return b"".join(transfer.pieces())


def check_max_bytes(max_bytes: object, where: str) -> int:
    """``max_bytes`` checked: a positive int, or None for ``DEFAULT_MAX_BYTES``."""
    if max_bytes is None:
        return DEFAULT_MAX_BYTES
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
        raise TypeError(f"{where}: max_bytes must be an int (bytes) or None, got "
                        f"{type(max_bytes).__name__}")
    if max_bytes < 1:
        raise ValueError(f"{where}: max_bytes must be >= 1 byte (the largest body accepted), "
                         f"got {max_bytes}; pass None for the default of {DEFAULT_MAX_BYTES}")
    return max_bytes


def _check(url: str, retries: int, backoff: float, timeout: float, max_bytes: int | None,
           deadline: float | None, where: str) -> int:
    """The arguments of a download checked; returns its size limit."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"{where}: url must start with http:// or https://, got {url!r}")
    if isinstance(retries, bool) or not isinstance(retries, int):
        raise TypeError(f"{where}: retries must be an int, got {type(retries).__name__}")
    if retries < 0:
        raise ValueError(f"{where}: retries must be >= 0 (0 tries once), got {retries}")
    for name, value in (("backoff", backoff), ("timeout", timeout), ("deadline", deadline)):
        if (isinstance(value, bool) or not isinstance(value, numbers.Real)) and not (
                name == "deadline" and value is None):
            raise TypeError(f"{where}: {name} must be a number of seconds, got {value!r}")
    if not (0 <= backoff < math.inf and 0 < timeout < math.inf):
        raise ValueError(f"{where}: backoff must be >= 0 and timeout > 0 seconds, both "
                         f"finite, got backoff={backoff!r}, timeout={timeout!r}")
    if deadline is not None and not 0 < deadline < math.inf:
        raise ValueError(f"{where}: deadline must be > 0 seconds and finite, got "
                         f"{deadline!r}; pass None for no deadline")
    return check_max_bytes(max_bytes, where)


class _Sockets:
    """The sockets a transfer connected, so that closing it wakes a read blocked on one."""

    def __init__(self) -> None:
        self.open: list[socket.socket] = []
        self.shut = False

    def add(self, sock: socket.socket) -> None:
        self.open = [*self.open[-1:], sock]  # the current connection and the one before
        if self.shut:
            self.close()

    def close(self) -> None:
        self.shut = True
        for sock in self.open:
            # The socket's own method: an SSLSocket's would drop its TLS state under the
            # reader. OSError: already closed, so nothing is blocked on it.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Connection(http.client.HTTPConnection):
    """A connection that records its socket, so a close can shut it down under a read."""

    def __init__(self, *args: Any, sockets: _Sockets, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sockets = sockets

    def connect(self) -> None:
        super().connect()  # HTTPSConnection's, in _SecureConnection: TLS wraps it first
        self.sockets.add(self.sock)


class _SecureConnection(_Connection, http.client.HTTPSConnection):
    """The same, over TLS."""


class _Handler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """urllib's HTTP and HTTPS handling (redirects, proxies), keeping the sockets."""

    def __init__(self, sockets: _Sockets) -> None:
        urllib.request.HTTPHandler.__init__(self)
        self.sockets = sockets

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_Connection, sockets=self.sockets), req)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_SecureConnection, sockets=self.sockets), req)


class _Transfer:
    """One body's bytes, a piece at a time, across as many requests as it takes.

    A failed request is retried; once part of the body has arrived, the retry asks
    for the rest only (``Range: bytes=N-``, ``If-Range`` with the first response's
    validator), and a ``200`` answer (no range support) has its first N bytes passed
    over, so each byte is handed out once, in order.
    """

    def __init__(self, url: str, retries: int, backoff: float, timeout: float, limit: int,
                 deadline: float | None, cancel: threading.Event) -> None:
        self.url, self.retries, self.backoff, self.timeout = url, retries, backoff, timeout
        self.limit, self.deadline, self.cancel = limit, deadline, cancel
        self.sockets = _Sockets()
        direct = urllib.parse.urlsplit(url).hostname in _LOOPBACK
        handlers: list[Any] = [_Handler(self.sockets)]
        if direct:
            handlers.append(urllib.request.ProxyHandler({}))
        self.opener = urllib.request.build_opener(*handlers)
        self.received = 0  # body bytes handed out
        self.total: int | None = None  # the whole body's size, once a response says it
        self.validator: tuple[str, str] | None = None  # ("ETag", value) of the first answer
        self.status: int | None = None
        self.attempts = 0
        self.piece = _PIECE  # bytes per read of the body

    def fail(self, why: str, message: str | None = None) -> FetchError:
        return FetchError(message or f"fetch: {self.url} {why}", url=self.url,
                          attempts=self.attempts, status=self.status)

    def pieces(self, begun: Callable[[], object] = lambda: None) -> Iterator[bytes]:
        """The body, piece by piece; ``begun()`` is called at the first good answer.

        Time the caller spends between two pieces is not counted against the deadline.
        """
        stop = math.inf if self.deadline is None else time.monotonic() + self.deadline
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                wait = min(self.backoff * 2 ** (attempt - 1), _MAX_DELAY)
                if time.monotonic() + wait >= stop:
                    break
                if self.cancel.wait(wait):
                    raise self.fail("was cancelled (its download was closed)")
            left = stop - time.monotonic()
            if left <= 0:
                break
            self.attempts = attempt + 1
            try:
                with self._open(min(self.timeout, left)) as response:
                    self.status = response.status
                    skip = self._begin(response)
                    begun()
                    while piece := response.read1(min(self.piece, skip or self.piece)):
                        if skip:  # a restart: these bytes were handed out before
                            skip -= len(piece)
                            continue
                        self.received += len(piece)
                        self._within(stop)
                        paused = time.monotonic()
                        yield piece
                        stop += time.monotonic() - paused
                    if skip or (self.total is not None and self.received < self.total):
                        raise http.client.IncompleteRead(b"", (self.total or 0) - self.received)
                    return
            except urllib.error.HTTPError as error:
                error.close()
                self.status, last = error.code, f"HTTP {error.code} {error.reason}"
                if error.code < 500 and error.code not in _RETRY_STATUS:
                    raise self.fail(f"answered {last}; client errors are not retried: check "
                                    "the URL (server address, prefix, shard name)") from None
            except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
                if isinstance(error, FetchError):
                    raise
                self.status, last = None, f"{type(error).__name__}: {error}"
            if self.cancel.is_set():
                raise self.fail("was cancelled (its download was closed)")
        else:
            raise self.fail("", (
                f"fetch: gave up on {self.url} after {self.retries + 1} attempts (retries="
                f"{self.retries}; {self.received} bytes received); last error: {last}; check "
                "that the server is up, or pass a larger retries or timeout"))
        raise self.fail(
            f"did not arrive within deadline={self.deadline} seconds (retries and waits "
            f"included; last error: {last or 'none'}); pass a larger deadline, or None for "
            "none")

    def _open(self, timeout: float) -> Any:
        request = urllib.request.Request(self.url)
        if self.received:
            request.add_header("Range", f"bytes={self.received}-")
            if self.validator is not None:  # the rest of this version, else all of the new
                request.add_header("If-Range", self.validator[1])
        return self.opener.open(request, timeout=timeout)

    def _begin(self, response: Any) -> int:
        """Checks an answer's headers; returns the bytes of its body to pass over."""
        try:
            length = _length(response)
        except ValueError as error:
            raise self.fail(f"sent {error}, which is not one number of ASCII digits, so where "
                            "its body ends cannot be checked (RFC 9112, section 6.3); not "
                            "retried: fix the server or proxy that writes it") from None
        if response.status == 206:
            found = response.headers.get("Content-Range", "")
            match = _RANGE.fullmatch(found.strip())
            whole = None if match is None or match[3] == "*" else int(match[3])
            if (not self.received or match is None or int(match[1]) != self.received
                    or (None not in (whole, self.total) and whole != self.total)):
                raise self.fail(f"answered a request for bytes {self.received}- of "
                                f"{self.total or 'unknown'} with Content-Range {found!r}; not "
                                "retried: the server's range support is broken")
            if self.total is None and whole is not None:
                self._announced(whole, "Content-Range")
            return 0
        validator = _validator(response)
        if not self.received:
            self.validator = validator
            if length is not None:
                self._announced(length, "Content-Length")
            return 0
        if (None not in (validator, self.validator) and validator != self.validator) or (
                None not in (length, self.total) and length != self.total):
            raise self.fail(f"changed while it was read ({self.received} bytes in; now "
                            f"{validator or length}, before {self.validator or self.total}); "
                            "not retried: read it again from its start")
        return self.received  # no range support: the whole body again, its start passed over

    def _announced(self, size: int, header: str) -> None:
        if size > self.limit:
            raise self.fail(f"announces {size} bytes ({header}), more than max_bytes="
                            f"{self.limit}; pass a larger max_bytes if the file is meant to "
                            "be this big")
        self.total = size

    def _within(self, stop: float) -> None:
        if self.received > self.limit:
            raise self.fail(f"sent more than max_bytes={self.limit} bytes; not retried: pass a "
                            "larger max_bytes if the file is meant to be this big")
        if time.monotonic() > stop:
            raise self.fail(f"was still arriving at its deadline (after {self.received} "
                            "bytes); not retried: pass a larger deadline, or None")
        if self.cancel.is_set():
            raise self.fail("was cancelled (its download was closed)")


def _length(response: Any) -> int | None:
    """The body's size from ``Content-Length``: one value, ASCII digits only; None if absent.

    Raises:
        ValueError: the header is there but holds anything else (its text is the message).
    """
    values = response.headers.get_all("Content-Length") or []
    if not values or getattr(response, "chunked", False):
        return None  # chunked framing marks the body's end; a length beside it is ignored
    if len(values) != 1 or not _DIGITS.fullmatch(values[0].strip(" \t")):
        raise ValueError(f"Content-Length {', '.join(values)!r}")
    return int(values[0])


def _validator(response: Any) -> tuple[str, str] | None:
    """The strong ``ETag`` of an answer, else its ``Last-Modified``: what ``If-Range`` takes."""
    tag = response.headers.get("ETag")
    if tag is not None and not tag.startswith("W/"):
        return ("ETag", tag)
    modified = response.headers.get("Last-Modified")
    return None if modified is None else ("Last-Modified", modified)


class Stream(io.BufferedIOBase):
    """An ``http(s)://`` body read as it arrives, at most ``readahead`` bytes ahead.

    A daemon thread (named ``dataecho-downloads``) receives the body into a buffer of
    ``readahead`` bytes, and pauses while the buffer is full, so memory stays bounded
    by twice ``readahead`` (the buffer, and the piece of at most ``readahead`` or a MiB
    that waits for room) whatever the body's size.
    Failures are retried as :func:`fetch` retries them, resuming with a ``Range``
    request where the body broke off, and limited as it limits them, except that the
    ``deadline`` counts only time spent waiting for the server (not time paused on a
    full buffer). A failure that retries cannot fix is raised by the ``read`` that
    reaches it, after every byte that arrived before it, and by every ``read`` after.

    ``close()`` (or garbage collection, or ``with``) stops the thread: a read blocked
    on the server is woken (its socket is shut down), and ``close()`` waits for the
    thread to end (a connect under way ends within ``timeout``). Not seekable.

    Args:
        url: An ``http://`` or ``https://`` URL.
        readahead: The bytes held ahead of the reader (default 8 MiB).
        after: Another stream whose first answer this one's first request waits for,
            so that requests go out in the order the bodies are read.
        retries, backoff, timeout, max_bytes, deadline: as for :func:`fetch`.

    Example:
        >>> import tempfile; from pathlib import Path; from dataecho.demo.remote import ShardServer
        >>> root = tempfile.mkdtemp(); _ = Path(root, "x.bin").write_bytes(b"abc" * 1000)
        >>> with ShardServer(root) as server, Stream(server.url + "/x.bin") as body:
        ...     first, rest = body.read(3), body.read()
        >>> first, len(rest), body.received
        (b'abc', 2997, 3000)
    """

    def __init__(self, url: str, *, readahead: int = DEFAULT_READAHEAD, retries: int = 5,
                 backoff: float = 0.05, timeout: float = 30.0, max_bytes: int | None = None,
                 deadline: float | None = DEFAULT_DEADLINE, after: Stream | None = None) -> None:
        limit = _check(url, retries, backoff, timeout, max_bytes, deadline, "Stream")
        if isinstance(readahead, bool) or not isinstance(readahead, int):
            raise TypeError(f"Stream: readahead must be an int (bytes), got "
                            f"{type(readahead).__name__}; pass e.g. {DEFAULT_READAHEAD}")
        if readahead < 1:
            raise ValueError(f"Stream: readahead must be an int >= 1 (bytes held ahead of the "
                             f"reader), got {readahead!r}; pass e.g. {DEFAULT_READAHEAD}")
        super().__init__()
        self.url = url
        self._pipe = pipe = _Pipe(readahead)
        self._transfer = _Transfer(url, retries, backoff, timeout, limit, deadline, pipe.cancel)
        self._transfer.piece = min(_PIECE, readahead)
        turn = None if after is None else after._pipe.begun
        self._thread = threading.Thread(target=_receive, args=(self._transfer, pipe, turn),
                                        name="dataecho-downloads", daemon=True)
        self._thread.start()
        # The thread holds the pipe and the transfer, never this object, so that
        # collecting a stream nobody closed stops its thread.
        self._stop = weakref.finalize(self, _halt, pipe, self._transfer.sockets)

    @property
    def received(self) -> int:
        """Body bytes received so far (read or waiting in the buffer)."""
        return self._transfer.received

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1, /) -> bytes:
        """``size`` bytes, fewer only at the end (b"" there); ``-1`` reads to the end.

        A failure after some of them arrived returns those; the next read raises it.
        """
        pipe = self._pipe
        if size is not None and size > 0 and not self.closed:
            with pipe.lock:  # the usual case, one sample's bytes in the oldest piece: a slice
                if pipe.pieces and pipe.start + size < len(pipe.pieces[0]):
                    start = pipe.start
                    pipe.start, pipe.size = start + size, pipe.size - size
                    if pipe.full:
                        pipe.lock.notify_all()
                    return pipe.pieces[0][start : start + size]
        parts, want = [], math.inf if size is None or size < 0 else size
        try:
            while want > 0 and (part := self.read1(int(min(want, _PIECE)))):
                parts.append(part)
                want -= len(part)
        except Exception:
            if not parts:
                raise
        return b"".join(parts)

    def read1(self, size: int | None = -1, /) -> bytes:
        """What has arrived, at most ``size`` bytes (-1: all of it); b"" at the end.

        Blocks until at least one byte has arrived, the body ended or the download failed.
        """
        if self.closed:
            raise ValueError(f"Stream: read from {self.url} after close()")
        if size == 0:
            return b""
        pipe = self._pipe
        with pipe.lock:
            while not pipe.pieces and not pipe.done:
                pipe.lock.wait()
            if not pipe.pieces:
                if pipe.error is not None:
                    raise pipe.error  # sticks: every later read raises it too
                return b""
            out, want, taken = [], pipe.size if size is None or size < 0 else size, 0
            while pipe.pieces and taken < want:
                piece, start = pipe.pieces[0], pipe.start
                end = min(len(piece), start + want - taken)
                out.append(piece if start == 0 and end == len(piece) else piece[start:end])
                taken += end - start
                if end == len(piece):
                    pipe.pieces.popleft()
                    pipe.start = 0
                else:
                    pipe.start = end
            pipe.size -= taken
            if pipe.full:
                pipe.lock.notify_all()
        return out[0] if len(out) == 1 else b"".join(out)

    def readinto(self, buffer: Any, /) -> int:
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)

    def close(self) -> None:
        """Stops the download and waits for its thread to end; idempotent."""
        self._stop()
        if self._thread is not threading.current_thread():
            self._thread.join()
        super().close()


class _Pipe:
    """The buffer between a stream's thread and its reader, and their signals."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.pieces: deque[bytes] = deque()
        self.start = 0  # bytes of pieces[0] already read
        self.size = 0  # bytes held, less those of pieces[0] already read
        self.lock = threading.Condition()
        self.done = False
        self.full = False  # the thread waits for the reader to make room
        self.error: BaseException | None = None
        self.cancel = threading.Event()
        self.begun = threading.Event()  # the first good answer arrived, or the thread ended


def _receive(transfer: _Transfer, pipe: _Pipe, after: threading.Event | None) -> None:
    try:
        while after is not None and not after.wait(0.05):
            if pipe.cancel.is_set():
                return
        for piece in transfer.pieces(pipe.begun.set):
            with pipe.lock:
                # An empty buffer takes any piece, so a read-ahead below a piece still runs.
                while (pipe.size and pipe.size + len(piece) > pipe.capacity
                       and not pipe.cancel.is_set()):
                    pipe.full = True  # the reader wakes this thread only when it waits
                    pipe.lock.wait()
                pipe.full = False
                if pipe.cancel.is_set():
                    return
                pipe.pieces.append(piece)
                pipe.size += len(piece)
                pipe.lock.notify_all()
    except BaseException as error:  # raised again by the reader's read()
        with pipe.lock:
            pipe.error = error
    finally:
        with pipe.lock:
            pipe.done = True
            pipe.lock.notify_all()
        pipe.begun.set()


def _halt(pipe: _Pipe, sockets: _Sockets) -> None:
    pipe.cancel.set()
    with pipe.lock:
        pipe.lock.notify_all()
    sockets.close()


_Job = tuple[str, int | None, "Future[bytes]"] | None


class Downloads:
    """One daemon thread that runs :func:`fetch` on queued URLs, in order.

    ``submit`` returns a ``Future``; its ``result()`` is the bytes, or raises the
    download's error with its own type. A cancelled future is skipped. ``close()`` or
    garbage collection cancels the transfer under way (it ends at its next read, within
    ``timeout`` seconds) and ends the thread: the thread holds the queue and an event,
    never this object.

    Args:
        retries, timeout, deadline: as for :func:`fetch`, for every download.

    Example:
        >>> import tempfile; from pathlib import Path; from dataecho.demo.remote import ShardServer
        >>> root = tempfile.mkdtemp(); _ = Path(root, "x.bin").write_bytes(b"abc")
        >>> with ShardServer(root) as server:
        ...     downloads = Downloads()
        ...     data = downloads.submit(server.url + "/x.bin").result()
        ...     downloads.close()
        >>> data
        b'abc'
    """

    def __init__(self, *, retries: int = 5, timeout: float = 30.0,
                 deadline: float | None = DEFAULT_DEADLINE) -> None:
        self.retries, self.timeout, self.deadline = retries, timeout, deadline
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._cancel = threading.Event()
        self._thread = threading.Thread(
            target=_work, args=(self._jobs, self._cancel, retries, timeout, deadline),
            name="dataecho-downloads", daemon=True)
        self._thread.start()
        self._stop = weakref.finalize(self, _stop, self._jobs, self._cancel)

    def submit(self, url: str, *, max_bytes: int | None = None) -> Future[bytes]:
        """Queues ``url``; the future completes when its download ends.

        ``max_bytes`` is the largest body accepted (see :func:`fetch`).
        """
        future: Future[bytes] = Future()
        self._jobs.put((url, max_bytes, future))
        return future

    def close(self, wait: float = 0.0) -> None:
        """Cancels the transfer under way and ends the thread; idempotent.

        Args:
            wait: seconds to wait for the thread to end (0 returns at once).
        """
        self._stop()
        if wait > 0:
            self._thread.join(wait)


def _stop(jobs: queue.SimpleQueue[_Job], cancel: threading.Event) -> None:
    cancel.set()
    jobs.put(None)


def _work(jobs: queue.SimpleQueue[_Job], cancel: threading.Event, retries: int,
          timeout: float, deadline: float | None) -> None:
    while (job := jobs.get()) is not None:
        url, max_bytes, future = job
        if not future.set_running_or_notify_cancel():
            continue  # cancelled: no longer needed
        try:
            if cancel.is_set():
                raise FetchError(f"fetch: {url} was cancelled (its downloader was closed)",
                                 url=url, attempts=0, status=None)
            future.set_result(fetch(url, retries=retries, timeout=timeout, deadline=deadline,
                                    max_bytes=max_bytes, cancel=cancel))
        except BaseException as error:  # raised again by the caller's result()
            future.set_exception(error)
