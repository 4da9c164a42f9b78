import threading

import pytest


@pytest.fixture
def no_thread_leak():
    """Fails a test that leaves a thread running."""
    before = set(threading.enumerate())
    yield
    leftover = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    for t in leftover:
        t.join(timeout=5)
    leftover = [t for t in leftover if t.is_alive()]
    assert not leftover, f"threads left running: {leftover}"
