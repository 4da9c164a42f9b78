"""Tests of dataecho.demo.remote.server: a throttled, fault-injecting HTTP server on loopback."""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dataecho.demo.remote import ShardServer, Throttle

KB = 1000

# Every test must leave no server or request thread behind (fixture in conftest.py).
pytestmark = pytest.mark.usefixtures("no_thread_leak")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "a.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "big.bin").write_bytes(b"\x01" * 400 * KB)
    (tmp_path / "half1.bin").write_bytes(b"\x02" * 200 * KB)
    (tmp_path / "half2.bin").write_bytes(b"\x03" * 200 * KB)
    return tmp_path


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        data: bytes = response.read()
    return data


def timed(url: str, tries: int = 3) -> float:
    """Best of ``tries`` downloads: the minimum is the least disturbed by other jobs."""
    times = []
    for _ in range(tries):
        start = time.perf_counter()
        get(url)
        times.append(time.perf_counter() - start)
    return min(times)


def test_serves_files_byte_for_byte_and_counts_requests(root: Path) -> None:
    with ShardServer(root) as server:
        assert get(server.url + "/a.bin") == (root / "a.bin").read_bytes()
        assert server.requests == 1
    assert server.bytes_sent == 1024  # exact once close() has joined the request threads


@pytest.mark.parametrize("path", ["/missing.bin", "/../outside.bin", "/%2e%2e/outside.bin", "/"])
def test_paths_outside_the_directory_or_missing_are_404(root: Path, path: str) -> None:
    (root.parent / "outside.bin").write_bytes(b"secret")
    with ShardServer(root) as server, pytest.raises(urllib.error.HTTPError, match="404"):
        get(server.url + path)


@pytest.mark.parametrize(("path", "status"), [
    ("/a%00.bin", 400),  # a NUL byte: no file name holds one
    ("/" + "x" * 300, 404),  # a name longer than the file system allows
    ("/" + "d/" * 3000 + "a.bin", 404),  # a path longer than the file system allows
])
def test_a_nul_byte_or_an_over_long_path_gets_an_answer_not_a_hang_up(
        root: Path, path: str, status: int) -> None:
    # A dropped connection would make fetch retry what no retry can fix.
    with ShardServer(root) as server:
        with pytest.raises(urllib.error.HTTPError, match=str(status)):
            get(server.url + path)
        assert get(server.url + "/a.bin") == (root / "a.bin").read_bytes()


@pytest.mark.parametrize(("port", "error", "message"), [
    (-1, ValueError, r"port must be an int >= 0, got -1; pass port=0"),
    (65536, ValueError, r"port must be a TCP port in 0\.\.65535, got 65536; pass port=0"),
    ("80", TypeError, r"port must be an int >= 0, got '80' of type str"),
])
def test_a_port_outside_0_to_65535_is_an_error_naming_it(
        root: Path, port: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        ShardServer(root, port=port)  # type: ignore[arg-type]


def test_throttle_delivers_within_20_percent_of_the_bandwidth(root: Path) -> None:
    with ShardServer(root, bandwidth=2_000 * KB) as server:
        elapsed = timed(server.url + "/big.bin")  # 400 KB at 2 MB/s: 0.2 s
    assert 0.8 * 0.2 <= elapsed <= 1.2 * 0.2, elapsed


def test_bandwidth_is_shared_by_concurrent_connections(root: Path) -> None:
    with ShardServer(root, bandwidth=2_000 * KB) as server:
        threads = [threading.Thread(target=get, args=(f"{server.url}/half{i}.bin",))
                   for i in (1, 2)]  # fmt: skip
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start  # 2 x 200 KB through one 2 MB/s link: 0.2 s
    assert 0.8 * 0.2 <= elapsed <= 1.2 * 0.2, elapsed


def test_bandwidth_and_latency_can_change_while_serving(root: Path) -> None:
    with ShardServer(root) as server:
        assert timed(server.url + "/big.bin") < 0.1
        server.bandwidth, server.latency = 4_000 * KB, 0.1  # 0.1 s + 400 KB at 4 MB/s
        assert 0.8 * 0.2 <= timed(server.url + "/big.bin") <= 1.2 * 0.2
        server.bandwidth, server.latency = None, 0.0
        assert timed(server.url + "/big.bin") < 0.1


def test_latency_delays_each_response(root: Path) -> None:
    with ShardServer(root, latency=0.15) as server:
        assert 0.15 <= timed(server.url + "/a.bin") < 0.5


def test_fail_next_answers_with_the_status_then_recovers(root: Path) -> None:
    with ShardServer(root) as server:
        server.fail_next(2, status=500)
        for _ in range(2):
            with pytest.raises(urllib.error.HTTPError, match="500"):
                get(server.url + "/a.bin")
        assert get(server.url + "/a.bin") == (root / "a.bin").read_bytes()


def test_drop_next_cuts_the_body_short(root: Path) -> None:
    with ShardServer(root) as server:
        server.drop_next(1)
        with pytest.raises(http.client.IncompleteRead, match="512 bytes read, 512 more"):
            get(server.url + "/a.bin")
        assert len(get(server.url + "/a.bin")) == 1024


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com", ""])
def test_refuses_to_listen_beyond_loopback(root: Path, host: str) -> None:
    with pytest.raises(ValueError, match=f"host must be a loopback address, got '{host}'"):
        ShardServer(root, host=host)


def test_binds_to_127_0_0_1_only(root: Path) -> None:
    for host in ("127.0.0.1", "localhost"):
        with ShardServer(root, host=host) as server:
            assert server.url == f"http://127.0.0.1:{server.port}"
            assert get(server.url + "/a.bin")


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6")
def test_ipv6_loopback_is_accepted(root: Path) -> None:
    try:
        server = ShardServer(root, host="::1")
    except OSError:
        pytest.skip("IPv6 loopback unavailable")
    with server:
        assert server.url.startswith("http://[::1]:") and get(server.url + "/a.bin")


def test_close_aborts_slow_transfers_and_leaves_no_threads(root: Path) -> None:
    before = set(threading.enumerate())
    server = ShardServer(root, bandwidth=50 * KB)  # big.bin would take 8 s
    errors: list[BaseException] = []

    def slow_client() -> None:
        try:
            get(server.url + "/big.bin", timeout=10)
        except (OSError, http.client.HTTPException) as error:
            errors.append(error)

    client = threading.Thread(target=slow_client)
    client.start()
    time.sleep(0.2)
    start = time.perf_counter()
    server.close()
    assert time.perf_counter() - start < 1.0
    client.join(timeout=5)
    assert not client.is_alive() and errors  # the client saw the transfer cut
    server.close()  # closing twice is harmless
    assert set(threading.enumerate()) == before
    with pytest.raises(OSError):  # the port is closed
        get(server.url + "/a.bin", timeout=1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bandwidth": 0}, r"bandwidth must be None \(unlimited\) or > 0 bytes/s, got 0"),
        ({"bandwidth": -5.0}, "bandwidth must be None"),
        ({"latency": -0.1}, "latency must be finite and >= 0 seconds, got -0.1"),
        ({"latency": float("nan")}, "latency must be finite"),
    ],
)
def test_rejects_bad_settings(root: Path, options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ShardServer(root, **options)  # type: ignore[arg-type]
    with ShardServer(root) as server, pytest.raises(ValueError, match=message):
        for name, value in options.items():
            setattr(server, name, value)


def test_rejects_bad_faults_and_a_missing_directory(root: Path) -> None:
    with ShardServer(root) as server:
        with pytest.raises(ValueError, match=r"must be an HTTP error in 400\.\.599, got 200"):
            server.fail_next(1, status=200)
        with pytest.raises(ValueError, match=r"drop_next: n must be >= 0 \(requests to affect\)"):
            server.drop_next(-1)
        with pytest.raises(TypeError, match="fail_next: n must be an int, got str"):
            server.fail_next("2")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="latency must be a number of seconds, got '1'"):
            server.latency = "1"  # type: ignore[assignment]
        with pytest.raises(TypeError, match="bandwidth must be None or a number of bytes/s"):
            server.bandwidth = "fast"  # type: ignore[assignment]
    with pytest.raises(FileNotFoundError, match="directory must be an existing directory"):
        ShardServer(root / "nope")


def test_throttle_books_transfers_back_to_back() -> None:
    throttle = Throttle(1_000 * KB)
    assert [round(throttle.delay(10 * KB), 3) for _ in range(3)] == [0.01, 0.02, 0.03]
    throttle.rate = None
    assert throttle.delay(10**9) == 0.0
    with pytest.raises(ValueError, match="bandwidth must be None"):
        Throttle(0)


def test_a_server_in_its_own_process_serves_counts_and_takes_a_new_bandwidth(tmp_path):
    # The demo's remote store runs apart from the trainer, as a bucket does: no GIL shared.
    from dataecho.demo.remote.process import ServerProcess

    (tmp_path / "a.bin").write_bytes(b"x" * 5000)
    with ServerProcess(tmp_path, bandwidth=1e6, latency=0.001) as server:
        assert urllib.request.urlopen(server.url + "/a.bin").read() == b"x" * 5000
        server.bandwidth = 2e6
        assert server.bandwidth == 2e6 and server.requests == 1
        with pytest.raises(ValueError, match="bandwidth"):
            server.bandwidth = -1
    assert (server.requests, server.bytes_sent) == (1, 5000)  # final, after close
    with pytest.raises(RuntimeError, match="closed"):
        server.bandwidth = 1e6


def test_a_server_process_refuses_a_missing_directory_in_the_caller(tmp_path):
    from dataecho.demo.remote.process import ServerProcess

    with pytest.raises(FileNotFoundError, match="existing directory"):
        ServerProcess(tmp_path / "absent")
