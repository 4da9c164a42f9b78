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


def fetch(url: str, *, retries: int = 5, backoff: float = 0.05, timeout: float = 30.0) -> bytes:
    """Downloads ``url``, retrying transient failures.

    Retried: HTTP 5xx, 408 and 429, refused or reset connections, timeouts, and
    bodies shorter than their ``Content-Length``. Attempt ``k`` (from 1) after a
    failure waits ``backoff * 2**(k - 1)`` seconds, at most 10.

    Args:
        url: An ``http://`` or ``https://`` URL.
        retries: Extra attempts after the first; 0 tries once.
        backoff: Seconds before the first retry; doubles for each further retry.
        timeout: Seconds a connect or a read may block.

    Raises:
        TypeError, ValueError: An argument has the wrong type or is out of range.
        FetchError: A 4xx answer (at once) or every attempt failed (after them all).

    Example:
        >>> import tempfile; from pathlib import Path; from dataecho.demo.remote import ShardServer
        >>> root = tempfile.mkdtemp(); _ = Path(root, "x.bin").write_bytes(b"abc")
        >>> with ShardServer(root) as server:
        ...     server.fail_next(2)  # two 503s, then the file
        ...     fetch(server.url + "/x.bin", backoff=0.001)
        b'abc'
    """
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"fetch: url must start with http:// or https://, got {url!r}")
    if isinstance(retries, bool) or not isinstance(retries, int):
        raise TypeError(f"fetch: retries must be an int, got {type(retries).__name__}")
    if retries < 0:
        raise ValueError(f"fetch: retries must be >= 0 (0 tries once), got {retries}")
    for name, value in (("backoff", backoff), ("timeout", timeout)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"fetch: {name} must be a number of seconds, got {value!r}")
    if not (0 <= backoff < math.inf and 0 < timeout < math.inf):
        raise ValueError(f"fetch: backoff must be >= 0 and timeout > 0 seconds, both finite, "
                         f"got backoff={backoff!r}, timeout={timeout!r}")
    last, status = "", None
    direct = urllib.parse.urlsplit(url).hostname in _LOOPBACK
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(min(backoff * 2 ** (attempt - 1), _MAX_DELAY))
        try:
            opener = _DIRECT.open if direct else urllib.request.urlopen
            with opener(url, timeout=timeout) as response:
                length = response.headers.get("Content-Length")
                data: bytes = response.read()
            # http.client raises IncompleteRead for a short body itself; checking
            # here keeps that guarantee ours rather than a library detail.
            if length is not None and len(data) != int(length):
                raise http.client.IncompleteRead(data, int(length) - len(data))
            return data
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
            status, last = None, f"{type(error).__name__}: {error}"
    raise FetchError(
        f"fetch: gave up on {url} after {retries + 1} attempts (retries={retries}); last error: "
        f"{last}; check that the server is up, or pass a larger retries or timeout",
        url=url, attempts=retries + 1, status=status,
    )


_Job = tuple[str, "Future[bytes]"] | None


class Downloads:
    """One daemon thread that runs :func:`fetch` on queued URLs, in order.

    ``submit`` returns a ``Future``; its ``result()`` is the bytes, or raises the
    download's error with its own type. A cancelled future is skipped. ``close()`` or
    garbage collection ends the thread after its current transfer: the thread holds
    the queue, never this object.

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

    def __init__(self, *, retries: int = 5) -> None:
        self.retries = retries
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        threading.Thread(target=_work, args=(self._jobs, retries), name="dataecho-downloads",
                         daemon=True).start()
        self._stop = weakref.finalize(self, self._jobs.put, None)

    def submit(self, url: str) -> Future[bytes]:
        """Queues ``url``; the future completes when its download ends."""
        future: Future[bytes] = Future()
        self._jobs.put((url, future))
        return future

    def close(self) -> None:
        """Ends the thread once its current download (if any) is done; idempotent."""
        self._stop()


def _work(jobs: queue.SimpleQueue[_Job], retries: int) -> None:
    while (job := jobs.get()) is not None:
        url, future = job
        if not future.set_running_or_notify_cancel():
            continue  # cancelled: no longer needed
        try:
            future.set_result(fetch(url, retries=retries))
        except BaseException as error:  # raised again by the caller's result()
            future.set_exception(error)
