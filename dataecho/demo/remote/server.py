"""A local HTTP file server that behaves like a slow remote bucket.

It stands in for the paper's setting of reading ImageNet over a network: every
response waits ``latency`` seconds before its first byte, and all connections
together share ``bandwidth`` bytes per second. Both can be changed while it runs,
and faults can be injected for the next requests. It binds to loopback only.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import numbers
import os
import socket
import sys
import threading
import urllib.parse
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from ..._checks import check_positive_int
from .throttle import Throttle, check_rate

_TYPES = {".tar": "application/x-tar", ".json": "application/json"}
_REASONS = {400: "bad request: a NUL byte in the path", 404: "no such file"}
_MAX_PORT = 65535


def _check_latency(latency: float) -> float:
    if isinstance(latency, bool) or not isinstance(latency, numbers.Real):
        raise TypeError(f"ShardServer: latency must be a number of seconds, got {latency!r}")
    if not 0 <= latency < math.inf:
        raise ValueError(f"ShardServer: latency must be finite and >= 0 seconds, got {latency!r}")
    return float(latency)


def _check_port(port: object) -> int:
    port = check_positive_int(port, "port", minimum=0)
    if port > _MAX_PORT:
        raise ValueError(f"port must be a TCP port in 0..{_MAX_PORT}, got {port}; pass port=0 "
                         "to pick a free one (ShardServer.url names it)")
    return port


def _check_count(method: str, n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{method}: n must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"{method}: n must be >= 0 (requests to affect), got {n}")


class _Server(ThreadingHTTPServer):
    # socketserver does not track daemon request threads, so server_close() would
    # not wait for them; they are tracked here and joined. They stay daemons so a
    # server someone forgot to close never holds up interpreter exit.
    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.request_threads: list[threading.Thread] = []
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(target=self.process_request_thread, daemon=True,
                                  args=(request, client_address))
        self.request_threads = [t for t in self.request_threads if t.is_alive()] + [thread]
        thread.start()

    def server_close(self) -> None:
        super().server_close()
        for thread in self.request_threads:
            thread.join()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that hang up mid-body (fetch's tests do) are normal: report real bugs only.
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: ShardServer  # set on a per-server subclass
    timeout = 30  # a client that stops reading frees its thread after this many seconds

    def setup(self) -> None:
        super().setup()
        self.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.owner._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests and demos print their own summaries

    def do_GET(self) -> None:
        owner = self.owner
        fault = owner._next_fault()
        if owner._closing.wait(owner.latency):
            return
        if fault is not None and fault[0] == "fail":
            self.send_error(fault[1], "fault injected by ShardServer.fail_next")
            return
        path = owner._resolve(self.path)
        if isinstance(path, int):
            self.send_error(path, _REASONS[path])
            return
        data = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", _TYPES.get(path.suffix, "application/octet-stream"))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if fault is not None:  # "drop": promise the whole body, send half, hang up
            data, self.close_connection = data[: len(data) // 2], True
        throttle = owner._throttle
        start = 0
        while start < len(data):  # a cursor: the chunk size may change mid-transfer
            piece = data[start : start + throttle.chunk()]
            if owner._closing.wait(throttle.delay(len(piece))):
                return
            self.wfile.write(piece)
            start += len(piece)
            with owner._lock:
                owner.bytes_sent += len(piece)


class ShardServer:
    """Serves the files of ``directory`` over HTTP on loopback, throttled like a remote store.

    Args:
        directory: Root of the served files (e.g. shards from ``write_shards``).
        bandwidth: Bytes per second shared by all connections; None for unlimited.
        latency: Seconds each request waits before its response starts.
        host: A loopback address (``127.0.0.1``, ``::1`` or ``localhost``).
        port: TCP port, 0..65535; 0 picks a free one (see ``url``).

    Attributes:
        url: ``http://127.0.0.1:PORT``, the base URL of ``directory``.
        requests: Requests received so far, failed ones included.
        bytes_sent: Body bytes written so far (final once ``close`` returns).

    Example:
        >>> import tempfile, urllib.request
        >>> root = tempfile.mkdtemp(); _ = Path(root, "a.txt").write_text("hi")
        >>> with ShardServer(root, bandwidth=1e6, latency=0.01) as server:
        ...     urllib.request.urlopen(server.url + "/a.txt").read()
        b'hi'
    """

    def __init__(self, directory: str | os.PathLike[str], *, bandwidth: float | None = None,
                 latency: float = 0.0, host: str = "127.0.0.1", port: int = 0) -> None:
        root = Path(directory)
        if not root.is_dir():
            raise FileNotFoundError(f"ShardServer: directory must be an existing directory, "
                                    f"got {str(root)!r}; write the shards there first")
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(f"ShardServer: host must be a loopback address, got {host!r}; "
                             "it simulates a remote store for local tests, so it never "
                             "listens on a network: use '127.0.0.1'")
        port = _check_port(port)
        self._root = root.resolve()
        self._throttle = Throttle(check_rate(bandwidth, "ShardServer"))
        self._latency = _check_latency(latency)
        self._lock = threading.Lock()
        self._faults: deque[tuple[str, int]] = deque()
        self._active: set[socket.socket] = set()
        self._closing = threading.Event()
        self.requests, self.bytes_sent = 0, 0
        handler = type("Handler", (_Handler,), {"owner": self})
        address = "127.0.0.1" if host == "localhost" else host
        self._httpd = _Server((address, port), handler)
        bound_host, self.port = self._httpd.server_address[:2]
        shown = f"[{bound_host!s}]" if ":" in address else f"{bound_host!s}"
        self.url = f"http://{shown}:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        name=f"ShardServer:{self.port}", daemon=True)
        self._thread.start()

    @property
    def bandwidth(self) -> float | None:
        """Bytes per second shared by all connections (None: unlimited); settable."""
        return self._throttle.rate

    @bandwidth.setter
    def bandwidth(self, bandwidth: float | None) -> None:
        self._throttle.rate = check_rate(bandwidth, "ShardServer")

    @property
    def latency(self) -> float:
        """Seconds before each response starts; settable."""
        return self._latency

    @latency.setter
    def latency(self, latency: float) -> None:
        self._latency = _check_latency(latency)

    def fail_next(self, n: int = 1, status: int = 503) -> None:
        """Answers the next ``n`` requests with HTTP ``status`` instead of the file."""
        _check_count("fail_next", n)
        if not 400 <= status <= 599:
            raise ValueError(f"fail_next: status must be an HTTP error in 400..599, got {status}")
        with self._lock:
            self._faults.extend([("fail", status)] * n)

    def drop_next(self, n: int = 1) -> None:
        """Sends only half the body of the next ``n`` requests, then closes the connection."""
        _check_count("drop_next", n)
        with self._lock:
            self._faults.extend([("drop", 0)] * n)

    def close(self) -> None:
        """Stops serving, aborts transfers in flight, joins every thread, closes the socket."""
        if self._closing.is_set():
            return
        self._closing.set()
        self._httpd.shutdown()
        with self._lock:
            active = list(self._active)
        for connection in active:
            # Unblocks a handler stuck writing to a client that stopped reading.
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()  # joins the request threads
        self._thread.join()

    def __enter__(self) -> ShardServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"ShardServer({str(self._root)!r}, bandwidth={self.bandwidth}, "
                f"latency={self.latency}, url={self.url!r})")

    def _next_fault(self) -> tuple[str, int] | None:
        with self._lock:
            self.requests += 1
            return self._faults.popleft() if self._faults else None

    def _track(self, connection: socket.socket, *, add: bool) -> None:
        with self._lock:
            (self._active.add if add else self._active.discard)(connection)
            if add and self._closing.is_set():  # accepted while close() was running
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    def _resolve(self, url_path: str) -> Path | int:
        """The served file at ``url_path``, or the HTTP status that answers instead."""
        relative = urllib.parse.unquote(urllib.parse.urlsplit(url_path).path).lstrip("/")
        if "\x00" in relative:  # no file name holds one; the OS call would raise
            return 400
        try:
            path = (self._root / relative).resolve()
            # resolve() folds "..": anything that lands outside the root is not served.
            found = path.is_relative_to(self._root) and path.is_file()
        except OSError:  # a name or path too long for the file system: no such file
            return 404
        return path if found else 404
