"""Reading shards over HTTP: a retrying ``fetch`` and a checkpointable sample source.

Object stores fail transiently (503s, reset connections, bodies cut short), so
``fetch`` retries those with exponential backoff and fails at once on client
errors, which no retry can fix. ``RemoteShards`` is the read-and-decode stage of
an input pipeline: the stage whose output data echoing repeats.
"""

from __future__ import annotations

import http.client
import math
import numbers
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

import numpy as np

from dataecho.remote.codec import decode_image
from dataecho.remote.shards import ShardError, iter_shard, read_index

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
        >>> import tempfile; from pathlib import Path; from dataecho.remote import ShardServer
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


class RemoteShards:
    """Iterates ``(image, label)`` over the shards of an index served over HTTP.

    Reads ``{url}/{prefix}-index.json`` at construction, then fetches one shard
    at a time in index order and decodes one image per ``next``. Order is fixed:
    shuffle downstream. The state is ``{"shard": i, "offset": j}``; restoring
    refetches shard ``i`` and skips ``j`` samples, so no sample is held in state.

    Args:
        url: Base URL of the served directory, e.g. ``ShardServer.url``.
        prefix: Data set name used by ``write_shards``.
        decode: Yield decoded uint8 arrays (True) or the encoded bytes (False).
        retries, backoff, timeout: Passed to ``fetch``.

    Example:
        >>> import tempfile; from dataecho.remote import ShardServer, write_shards
        >>> root = tempfile.mkdtemp()
        >>> _ = write_shards(np.eye(3, dtype=np.uint8)[None].repeat(5, 0), np.arange(5), root,
        ...                  shard_size=2)
        >>> with ShardServer(root) as server:
        ...     [label for _, label in RemoteShards(server.url)]
        [0, 1, 2, 3, 4]
    """

    def __init__(self, url: str, *, prefix: str = "train", decode: bool = True,
                 retries: int = 5, backoff: float = 0.05, timeout: float = 30.0) -> None:
        self._url, self._prefix, self._decode = url.rstrip("/"), prefix, decode
        self._options: dict[str, Any] = {"retries": retries, "backoff": backoff,
                                         "timeout": timeout}
        index = f"{prefix}-index.json"
        self._shards = read_index(self._fetch(index), index)
        self._shard, self._offset = 0, 0
        self._samples: list[tuple[str, bytes, int]] | None = None

    def _fetch(self, name: str) -> bytes:
        return fetch(f"{self._url}/{name}", **self._options)

    def __len__(self) -> int:
        return sum(count for _, count in self._shards)

    def __iter__(self) -> RemoteShards:
        return self

    def __next__(self) -> tuple[np.ndarray | bytes, int]:
        while self._shard < len(self._shards):
            name, count = self._shards[self._shard]
            if self._samples is None:
                samples = list(iter_shard(self._fetch(name), name))
                if len(samples) != count:  # kept only once checked: a retry fails again
                    raise ShardError(f"RemoteShards: shard {name!r} holds "
                                     f"{len(samples)} samples but the index lists "
                                     f"{count}; write the shards again")
                self._samples = samples
            if self._offset < count:
                _, image, label = self._samples[self._offset]
                self._offset += 1
                return (decode_image(image) if self._decode else image), label
            self._shard, self._offset, self._samples = self._shard + 1, 0, None
        raise StopIteration

    def state_dict(self) -> dict[str, int]:
        """Position of the next sample: shard number and offset within it."""
        return {"shard": self._shard, "offset": self._offset}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Resumes at a position from ``state_dict``."""
        shard, offset = int(state["shard"]), int(state["offset"])
        limit = self._shards[shard][1] if shard < len(self._shards) else 0
        if not (0 <= shard <= len(self._shards) and 0 <= offset <= limit):
            raise ValueError(f"RemoteShards.load_state_dict: state must point into the "
                             f"{len(self._shards)} shards of this index, got {dict(state)}; "
                             "was it saved from a different data set?")
        self._shard, self._offset, self._samples = shard, offset, None

    def __repr__(self) -> str:
        return (f"RemoteShards({self._url!r}, prefix={self._prefix!r}, "
                f"shards={len(self._shards)}, samples={len(self)}, decode={self._decode})")
