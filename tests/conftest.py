import threading

import pytest

# The job scripts run as their own processes (tests/helpers/launch.py), each with its
# directory on sys.path; imported by --doctest-modules they would not find each other.
collect_ignore_glob = ["helpers/*_job.py"]


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
