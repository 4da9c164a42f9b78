"""Tests of dataecho.download: fetch, retrying downloads."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from dataecho import FetchError, fetch
from dataecho.demo.remote import ShardServer
from dataecho.download import DEFAULT_DEADLINE, DEFAULT_MAX_BYTES, Downloads, Stream
from helpers.threads import wait_until

# Every test must leave no server or request thread behind (fixture in conftest.py).
pytestmark = pytest.mark.usefixtures("no_thread_leak")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "x.bin").write_bytes(b"payload" * 100)
    return tmp_path


def test_fetch_retries_5xx_until_the_file_arrives(root: Path) -> None:
    with ShardServer(root) as server:
        server.fail_next(3, status=503)
        assert fetch(server.url + "/x.bin", backoff=0.001) == b"payload" * 100
        assert server.requests == 4


def test_fetch_reaches_loopback_even_when_a_proxy_is_set(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens on port 9
    urllib.request.install_opener(None)  # the default opener reads the proxy anew
    try:
        with ShardServer(root) as server:
            assert fetch(server.url + "/x.bin", retries=0) == b"payload" * 100
    finally:
        monkeypatch.undo()
        urllib.request.install_opener(None)


def test_fetch_retries_dropped_connections(root: Path) -> None:
    with ShardServer(root) as server:
        server.drop_next(2)
        assert fetch(server.url + "/x.bin", backoff=0.001) == b"payload" * 100
        assert server.requests == 3


def test_fetch_retries_429_but_not_other_client_errors(root: Path) -> None:
    with ShardServer(root) as server:
        server.fail_next(1, status=429)
        assert fetch(server.url + "/x.bin", backoff=0.001) == b"payload" * 100
        server.fail_next(1, status=403)
        with pytest.raises(FetchError, match=r"answered HTTP 403 .*not retried") as info:
            fetch(server.url + "/x.bin", backoff=0.001)
        assert (info.value.status, info.value.attempts, server.requests) == (403, 1, 3)


def test_fetch_fails_at_once_on_404_naming_the_url(root: Path) -> None:
    with ShardServer(root) as server:
        url = server.url + "/nope.tar"
        with pytest.raises(FetchError, match=re.escape(f"fetch: {url} answered HTTP 404")):
            fetch(url)
        assert server.requests == 1


def test_fetch_gives_up_naming_url_and_attempts(root: Path) -> None:
    with ShardServer(root) as server:
        server.fail_next(10)
        url = server.url + "/x.bin"
        message = re.escape(f"gave up on {url} after 3 attempts") + ".*HTTP 503"
        with pytest.raises(FetchError, match=message):
            fetch(url, retries=2, backoff=0.001)
        assert server.requests == 3


def test_fetch_backs_off_exponentially(root: Path) -> None:
    with ShardServer(root) as server:
        server.fail_next(3)
        start = time.perf_counter()
        fetch(server.url + "/x.bin", backoff=0.04)
        # The lower bound is the point; the upper one only catches a runaway backoff,
        # with room for a loaded CI machine.
        assert 0.04 + 0.08 + 0.16 <= time.perf_counter() - start < 10.0


def test_fetch_gives_up_on_a_closed_port() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(FetchError, match=r"after 2 attempts .*(Refused|URLError)") as info:
        fetch(f"http://127.0.0.1:{port}/x", retries=1, backoff=0.0, timeout=2)
    assert info.value.status is None


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("ftp://host/x", {}, "url must start with http:// or https://, got 'ftp://host/x'"),
        ("http://h/x", {"retries": -1}, r"retries must be >= 0 \(0 tries once\), got -1"),
        ("http://h/x", {"backoff": -1.0}, "backoff must be >= 0 and timeout > 0"),
        ("http://h/x", {"timeout": 0}, "timeout=0"),
        ("http://h/x", {"timeout": float("inf")}, "both finite"),
    ],
)
def test_fetch_rejects_bad_arguments(url: str, options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fetch(url, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [({"retries": 1.5}, "retries must be an int, got float"),
     ({"backoff": "1"}, "backoff must be a number of seconds, got '1'")],
)
def test_fetch_rejects_wrong_argument_types(options: dict[str, object], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        fetch("http://h/x", **options)  # type: ignore[arg-type]


def test_changing_the_bandwidth_mid_transfer_sends_every_byte_once(tmp_path: Path) -> None:
    payload = np.random.default_rng(1).integers(0, 256, 300_000, np.uint8).tobytes()
    (tmp_path / "big.bin").write_bytes(payload)
    with ShardServer(tmp_path, bandwidth=1e6) as server:  # 10 KB pieces, ~0.3 s
        out: dict[str, bytes] = {}
        reader = threading.Thread(target=lambda: out.update(
            body=fetch(server.url + "/big.bin", retries=0)))
        reader.start()
        deadline = time.monotonic() + 10
        while server.bytes_sent == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert 0 < server.bytes_sent < len(payload) // 2  # mid-transfer
        server.bandwidth = 1e8  # 1 MB pieces from here on
        reader.join(timeout=30)
        assert out["body"] == payload
        # The server counts a piece after writing it: the client may finish first.
        deadline = time.monotonic() + 10
        while server.bytes_sent < len(payload) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert server.bytes_sent == len(payload)  # no piece sent twice


class Endless(BaseHTTPRequestHandler):
    """Sends a body without end: fast (``/fast``), a byte at a time (``/slow``), or after
    announcing a terabyte (``/liar``); it stops when the client goes or the test ends."""

    stop = threading.Event()

    def do_GET(self) -> None:
        self.send_response(200)
        if self.path == "/liar":
            self.send_header("Content-Length", str(10**12))
        self.end_headers()
        piece, pause = (b"x", 0.02) if self.path == "/slow" else (bytes(1 << 16), 0.0)
        with contextlib.suppress(OSError):
            while not self.stop.is_set():
                self.wfile.write(piece)
                if pause:
                    self.wfile.flush()
                    time.sleep(pause)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def endless() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    Endless.stop.clear()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        Endless.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_body_over_max_bytes_is_refused_from_its_length_or_as_it_arrives(root, endless):
    with ShardServer(root) as server:
        with pytest.raises(FetchError, match=r"announces 700 bytes \(Content-Length\), more "
                                             r"than max_bytes=699; pass a larger max_bytes"):
            fetch(server.url + "/x.bin", max_bytes=699)
        assert server.requests == 1  # not retried
        assert fetch(server.url + "/x.bin", max_bytes=700) == b"payload" * 100
    with pytest.raises(FetchError, match=r"announces 1000000000000 bytes"):
        fetch(endless + "/liar", retries=3)
    start = time.monotonic()
    with pytest.raises(FetchError, match=r"/fast sent more than max_bytes=3000000 bytes; not "
                                         r"retried"):
        fetch(endless + "/fast", max_bytes=3_000_000, retries=3)
    assert time.monotonic() - start < 10


def test_the_default_cap_is_two_gib():
    assert DEFAULT_MAX_BYTES == 2 << 30 and DEFAULT_DEADLINE == 900.0


def test_a_body_still_arriving_at_the_deadline_is_cut_off(endless):
    start = time.monotonic()
    with pytest.raises(FetchError, match=r"/slow was still arriving at its deadline \(after "
                                         r"\d+ bytes\); not retried: pass a larger deadline"):
        fetch(endless + "/slow", deadline=0.5, timeout=2, retries=3)
    assert 0.5 <= time.monotonic() - start < 5


def test_the_deadline_counts_retries_and_waits(root):
    with ShardServer(root) as server:
        server.fail_next(100)
        start = time.monotonic()
        with pytest.raises(FetchError, match=r"did not arrive within deadline=0.3 seconds "
                                             r"\(retries and waits included; last error: HTTP "
                                             r"503"):
            fetch(server.url + "/x.bin", retries=50, backoff=0.05, deadline=0.3)
        assert time.monotonic() - start < 3


def test_closing_downloads_ends_the_thread_mid_transfer(endless):
    downloads = Downloads(deadline=None)
    slow, fast = downloads.submit(endless + "/slow"), downloads.submit(endless + "/fast")
    time.sleep(0.2)  # the slow transfer is under way
    start = time.monotonic()
    downloads.close(wait=5)
    assert time.monotonic() - start < 5
    assert not [t for t in threading.enumerate() if t.name == "dataecho-downloads"]
    for future in (slow, fast):
        with pytest.raises(FetchError, match="was cancelled"):
            future.result(timeout=1)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [({"max_bytes": 0}, ValueError, r"fetch: max_bytes must be >= 1 byte \(the largest body "
                                    r"accepted\), got 0; pass None for the default"),
     ({"max_bytes": 1.5}, TypeError, "fetch: max_bytes must be an int \\(bytes\\) or None, got "
                                     "float"),
     ({"deadline": 0}, ValueError, "fetch: deadline must be > 0 seconds and finite, got 0; pass "
                                   "None for no deadline"),
     ({"deadline": "9"}, TypeError, "fetch: deadline must be a number of seconds, got '9'")],
)
def test_fetch_rejects_bad_limits(options, error, message):
    with pytest.raises(error, match=message):
        fetch("http://h/x", **options)


class Framed(BaseHTTPRequestHandler):
    """Answers with the ``Content-Length`` lines and the body the test set; answers a
    ``Range`` request with 206 from ``ranged`` (None: the whole body again, with the
    ``etag`` of that time); hangs up ``drops`` bytes into the next answers."""

    lengths: list[str]
    body: bytes
    drops: list[int]
    ranged: bool
    etags: list[str]
    seen: list[str | None]

    def do_GET(self) -> None:
        wanted = self.headers.get("Range")
        self.seen.append(wanted)
        start = int(wanted[6:-1]) if wanted and self.ranged else 0
        body = self.body[start:]
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(self.body) - 1}/"
                                              f"{len(self.body)}")
        for value in self.lengths or [str(len(body))]:
            self.send_header("Content-Length", value)
        if self.etags:
            self.send_header("ETag", self.etags.pop(0))
        self.end_headers()
        drop = self.drops.pop(0) if self.drops else len(body)
        with contextlib.suppress(OSError):
            self.wfile.write(body[:drop])

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def framed() -> Iterator[tuple[str, type[Framed]]]:
    handler = type("Handler", (Framed,), {"lengths": [], "body": bytes(range(256)) * 80,
                                          "drops": [], "ranged": True, "etags": [],
                                          "seen": []})  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/x", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize("lengths", [["+20480"], ["20480, 20480"], ["20480", "20480"],
                                     ["2048\u00b2"], ["-1"], ["0x5000"]])
def test_a_content_length_that_is_not_one_ascii_number_is_refused_not_trusted(framed, lengths):
    url, handler = framed
    handler.lengths, handler.drops = lengths, [18_944]  # the body cut short as well
    message = (rf"fetch: {url} sent Content-Length {re.escape(repr(', '.join(lengths)))}, which "
               r"is not one number of ASCII digits, so where its body ends cannot be checked")
    with pytest.raises(FetchError, match=message):
        fetch(url, retries=3, backoff=0.001)
    assert handler.seen == [None]  # not retried: the server sends the same header again


def test_a_body_cut_short_resumes_with_a_range_request(framed):
    url, handler = framed
    handler.drops, handler.etags = [5000, 7000], ['"a"', '"a"', '"a"']
    assert fetch(url, backoff=0.001) == handler.body
    assert handler.seen == [None, "bytes=5000-", "bytes=12000-"]


def test_a_server_without_range_support_restarts_and_a_changed_body_is_refused(framed):
    url, handler = framed
    handler.ranged, handler.drops, handler.etags = False, [5000], ['"a"', '"a"']
    assert fetch(url, backoff=0.001) == handler.body  # the first 5000 bytes passed over
    assert handler.seen == [None, "bytes=5000-"]
    handler.drops, handler.etags = [5000], ['"a"', '"b"']
    with pytest.raises(FetchError, match=r"changed while it was read \(5000 bytes in; now "
                                         r"\('ETag', '\"b\"'\), before \('ETag', '\"a\"'\)\); not"):
        fetch(url, backoff=0.001)


def test_a_stream_holds_at_most_its_read_ahead_of_an_endless_body(endless):
    with Stream(endless + "/fast", readahead=1 << 20, deadline=None) as body:
        assert body.read(0) == b""
        assert len(body.read(100)) == 100
        time.sleep(0.3)  # the server sends as fast as loopback goes
        # the buffer (1 MiB) and the piece that filled it, never the body
        assert body.received <= (1 << 20) + (1 << 20) + 100
        wait_until(lambda: body.received > 1 << 19)
    assert not [t for t in threading.enumerate() if t.name == "dataecho-downloads"]


def test_closing_a_stream_wakes_a_read_blocked_on_a_silent_server():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        body = Stream(f"http://127.0.0.1:{port}/x", timeout=60, deadline=None)
        peer, _ = listener.accept()  # connected, and never answered
        with peer:
            time.sleep(0.1)
            start = time.monotonic()
            body.close()
            assert time.monotonic() - start < 5
    assert not [t for t in threading.enumerate() if t.name == "dataecho-downloads"]


def test_a_streams_error_comes_after_the_bytes_before_it_and_sticks(framed):
    url, handler = framed
    handler.drops = [5000]
    with Stream(url, retries=0) as body:
        assert body.read(5000) == handler.body[:5000]
        for _ in range(2):
            with pytest.raises(FetchError, match=r"gave up on .* after 1 attempts .*5000 bytes "
                                                 r"received.*IncompleteRead"):
                body.read(1)
    with pytest.raises(ValueError, match=r"read from .* after close"):
        body.read(1)


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"readahead": 0}, ValueError, r"Stream: readahead must be an int >= 1 \(bytes held ahead "
                                   r"of the reader\), got 0; pass e.g. 8388608"),
    ({"retries": -1}, ValueError, r"Stream: retries must be >= 0"),
    ({"max_bytes": 0}, ValueError, r"Stream: max_bytes must be >= 1 byte"),
    ({"readahead": 1.5}, TypeError, r"Stream: readahead must be an int \(bytes\), got float"),
])
def test_stream_rejects_bad_arguments(options, error, message):
    with pytest.raises(error, match=message):
        Stream("http://h/x", **options)
