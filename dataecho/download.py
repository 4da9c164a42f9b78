"""Downloads over HTTP: a ``fetch`` that retries what an object store gets wrong.

Object stores fail transiently (503s, reset connections, bodies cut short), so
``fetch`` retries those with exponential backoff and fails at once on client
errors, which no retry can fix. :class:`dataecho.TarShards` downloads every
``http(s)://`` shard through it. Standard library only.
"""

from __future__ import annotations

import http.client
import math
import numbers
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from concurrent.futures import Future
from typing import Any

# 408 and 429 are client-side codes that still mean "try again later", and object
# stores (GCS, S3) document them as retryable; every other 4xx is final.
_RETRY_STATUS = frozenset({408, 429})
_MAX_DELAY = 10.0  # caps the backoff so a large `retries` never sleeps for hours
# A proxy from $http_proxy cannot reach this machine's loopback: loopback URLs
# (ShardServer's) go direct, so tests pass on CI hosts that set a proxy.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


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


DEFAULT_MAX_BYTES = 1 << 31  # 2 GiB: no more than this is held for a body of unknown size
DEFAULT_DEADLINE = 900.0  # seconds for a whole fetch, retries and waits included
_PIECE = 1 << 20  # bytes per read of a body: size, deadline and cancel are checked between


def fetch(url: str, *, retries: int = 5, backoff: float = 0.05, timeout: float = 30.0,
          max_bytes: int | None = None, deadline: float | None = DEFAULT_DEADLINE,
          cancel: threading.Event | None = None) -> bytes:
    """Downloads ``url``, retrying transient failures, within a size and a time limit.

    Retried: HTTP 5xx, 408 and 429, refused or reset connections, timeouts, and
    bodies shorter than their ``Content-Length``. Attempt ``k`` (from 1) after a
    failure waits ``backoff * 2**(k - 1)`` seconds, at most 10.

    Never retried: a body larger than ``max_bytes`` (refused from its
    ``Content-Length`` before any of it is read, or as soon as it has read past the
    limit) and a fetch still running at its ``deadline``. The body is read a MiB at a
    time, so a server that sends without end is cut off at the limit, and a slow one at
    the deadline (one read blocks at most ``timeout`` seconds past it).

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
        FetchError: A 4xx answer (at once), a body over ``max_bytes``, the deadline
            passed or the fetch cancelled (at once), or every attempt failed.

    Example:
        >>> import tempfile; from pathlib import Path; from dataecho.demo.remote import ShardServer
        >>> root = tempfile.mkdtemp(); _ = Path(root, "x.bin").write_bytes(b"abc")
        >>> with ShardServer(root) as server:
        ...     server.fail_next(2)  # two 503s, then the file
        ...     fetch(server.url + "/x.bin", backoff=0.001)
        b'abc'
    """
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"fetch: url must start with http:// or https://, got {url!r}")
    if isinstance(retries, bool) or not isinstance(retries, int):
        raise TypeError(f"fetch: retries must be an int, got {type(retries).__name__}")
    if retries < 0:
        raise ValueError(f"fetch: retries must be >= 0 (0 tries once), got {retries}")
    for name, value in (("backoff", backoff), ("timeout", timeout), ("deadline", deadline)):
        if (isinstance(value, bool) or not isinstance(value, numbers.Real)) and not (
                name == "deadline" and value is None):
            raise TypeError(f"fetch: {name} must be a number of seconds, got {value!r}")
    if not (0 <= backoff < math.inf and 0 < timeout < math.inf):
        raise ValueError(f"fetch: backoff must be >= 0 and timeout > 0 seconds, both finite, "
                         f"got backoff={backoff!r}, timeout={timeout!r}")
    if deadline is not None and not 0 < deadline < math.inf:
        raise ValueError(f"fetch: deadline must be > 0 seconds and finite, got {deadline!r}; "
                         "pass None for no deadline")
    limit = check_max_bytes(max_bytes, "fetch")
    stop = math.inf if deadline is None else time.monotonic() + deadline
    last, status = "", None
    direct = urllib.parse.urlsplit(url).hostname in _LOOPBACK
    for attempt in range(retries + 1):
        if attempt:
            wait = min(backoff * 2 ** (attempt - 1), _MAX_DELAY)
            if time.monotonic() + wait >= stop:
                break
            if cancel is None:
                time.sleep(wait)
            elif cancel.wait(wait):
                raise FetchError(f"fetch: {url} was cancelled (its downloader was closed)",
                                 url=url, attempts=attempt, status=status)
        try:
            opener = _DIRECT.open if direct else urllib.request.urlopen
            left = stop - time.monotonic()
            if left <= 0:
                break
            with opener(url, timeout=min(timeout, left)) as response:
                return _body(response, url, limit, stop, cancel, attempt + 1)
        except urllib.error.HTTPError as error:
            error.close()
            status, last = error.code, f"HTTP {error.code} {error.reason}"
            if error.code < 500 and error.code not in _RETRY_STATUS:
                raise FetchError(
                    f"fetch: {url} answered {last}; client errors are not retried: check "
                    "the URL (server address, prefix, shard name)",
                    url=url, attempts=attempt + 1, status=status,
                ) from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
            if isinstance(error, FetchError):
                raise
            status, last = None, f"{type(error).__name__}: {error}"
        if cancel is not None and cancel.is_set():
            raise FetchError(f"fetch: {url} was cancelled (its downloader was closed)",
                             url=url, attempts=attempt + 1, status=status)
    else:
        raise FetchError(
            f"fetch: gave up on {url} after {retries + 1} attempts (retries={retries}); last "
            f"error: {last}; check that the server is up, or pass a larger retries or timeout",
            url=url, attempts=retries + 1, status=status,
        )
    raise FetchError(
        f"fetch: {url} did not arrive within deadline={deadline} seconds (retries and waits "
        f"included; last error: {last or 'none'}); pass a larger deadline, or None for none",
        url=url, attempts=attempt + 1, status=status)


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


def _body(response: Any, url: str, limit: int, stop: float,
          cancel: threading.Event | None, attempts: int) -> bytes:
    """The body of ``response``, read a piece at a time within ``limit`` and ``stop``."""
    length = response.headers.get("Content-Length")
    expected = int(length) if length is not None and length.isdigit() else None

    def refuse(why: str) -> FetchError:
        return FetchError(f"fetch: {url} {why}", url=url, attempts=attempts,
                          status=response.status)

    if expected is not None and expected > limit:
        raise refuse(f"announces {expected} bytes (Content-Length), more than max_bytes="
                     f"{limit}; pass a larger max_bytes if the file is meant to be this big")
    pieces, size = [], 0
    while piece := response.read1(min(_PIECE, limit + 1 - size)):
        pieces.append(piece)
        size += len(piece)
        if size > limit:
            raise refuse(f"sent more than max_bytes={limit} bytes; not retried: pass a larger "
                         "max_bytes if the file is meant to be this big")
        if time.monotonic() > stop:
            raise refuse("was still arriving at its deadline (after "
                         f"{size} bytes); not retried: pass a larger deadline, or None")
        if cancel is not None and cancel.is_set():
            raise refuse("was cancelled (its downloader was closed)")
    data = b"".join(pieces)
    # http.client raises IncompleteRead for a short body itself; checking here keeps
    # that guarantee ours rather than a library detail.
    if expected is not None and len(data) != expected:
        raise http.client.IncompleteRead(data, expected - len(data))
    return data


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
