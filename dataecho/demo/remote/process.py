"""The simulated remote store in a process of its own, as a real bucket is another machine.

A :class:`ShardServer` thread in the training process shares that process's GIL: while
the trainer runs Python between its kernels, the server's sends wait for the GIL and the
link delivers less than its bandwidth, just when echoing keeps the trainer busy. The
wait is no cost of the input pipeline a user has, so the demo and the wall-clock
benchmark serve from a child process: :class:`ServerProcess`, with the same ``url``,
settable ``bandwidth`` and counters, driven over a pipe.
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

from .server import ShardServer

#: How the demo starts its child processes (this server, its DataLoader workers): from
#: the fork server, clean (no copy of the trainer's memory or threads), where there is
#: one; Windows has none, and spawns.
START_METHOD = ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                else "spawn")


def _serve(conn: Connection, directory: str, bandwidth: float | None, latency: float) -> None:
    """The child: one ShardServer, answering ``(name, value)`` requests until "close"."""
    try:
        server = ShardServer(directory, bandwidth=bandwidth, latency=latency)
    except BaseException as error:  # the parent raises it: a bad directory, a bad rate
        conn.send(("error", error))
        return
    with server:
        conn.send(("url", server.url))
        while True:
            try:
                name, value = conn.recv()
            except EOFError:  # the parent died: stop serving
                return
            if name == "close":
                break
            try:
                if name == "set":
                    setattr(server, value[0], value[1])
                    conn.send(("ok", None))
                else:  # "get"
                    conn.send(("ok", getattr(server, value)))
            except Exception as error:  # a bad setting: the parent raises it
                conn.send(("error", error))
    conn.send(("ok", (server.requests, server.bytes_sent)))


class ServerProcess:
    """A :class:`ShardServer` run in a child process; its settings and counters by proxy.

    Args: as :class:`ShardServer` (``directory``, ``bandwidth``, ``latency``).

    Attributes:
        url: the base URL of ``directory``.

    Example:
        >>> import tempfile, urllib.request
        >>> from pathlib import Path
        >>> root = tempfile.mkdtemp(); _ = Path(root, "a.txt").write_text("hi")
        >>> with ServerProcess(root, bandwidth=1e6) as server:
        ...     body = urllib.request.urlopen(server.url + "/a.txt").read()
        ...     server.bandwidth = 2e6
        ...     body, server.bandwidth, server.requests
        (b'hi', 2000000.0, 1)
    """

    def __init__(self, directory: str | os.PathLike[str], *, bandwidth: float | None = None,
                 latency: float = 0.0) -> None:
        context: Any = multiprocessing.get_context(START_METHOD)
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, name="ShardServer", daemon=True,
                                        args=(child, os.fspath(directory), bandwidth, latency))
        self._process.start()
        child.close()
        self._final: tuple[int, int] | None = None
        self.url: str = self._answer()

    def _answer(self) -> Any:
        try:
            kind, value = self._conn.recv()
        except EOFError:
            raise RuntimeError(f"the shard server process exited (code "
                               f"{self._process.exitcode}) before answering") from None
        if kind == "error":
            raise value
        return value

    def _ask(self, name: str, value: object) -> Any:
        if self._final is not None:
            raise RuntimeError("the shard server process is closed")
        self._conn.send((name, value))
        return self._answer()

    @property
    def bandwidth(self) -> float | None:
        """Bytes per second shared by all connections (None: unlimited); settable."""
        return self._ask("get", "bandwidth")  # type: ignore[no-any-return]

    @bandwidth.setter
    def bandwidth(self, bandwidth: float | None) -> None:
        self._ask("set", ("bandwidth", bandwidth))

    @property
    def requests(self) -> int:
        """Requests received so far."""
        return int(self._final[0] if self._final else self._ask("get", "requests"))

    @property
    def bytes_sent(self) -> int:
        """Body bytes written so far."""
        return int(self._final[1] if self._final else self._ask("get", "bytes_sent"))

    def close(self) -> None:
        """Stops the server (its transfers end) and joins the process."""
        if self._final is not None:
            return
        try:
            self._conn.send(("close", None))
            self._final = self._answer()
        except (OSError, EOFError, RuntimeError):
            self._final = (0, 0)
        finally:
            self._process.join(timeout=30)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
            self._conn.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ServerProcess(url={self.url!r}, pid={self._process.pid})"
