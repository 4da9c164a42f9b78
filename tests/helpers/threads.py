"""Helpers for tests of stages that run a prefetch thread."""

import threading
import time


def prefetch_threads():
    """The live prefetch threads of dataecho."""
    return [t for t in threading.enumerate() if t.name == "dataecho-prefetch" and t.is_alive()]


def wait_until(condition, timeout=5.0):
    """Polls ``condition`` until it holds; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)
