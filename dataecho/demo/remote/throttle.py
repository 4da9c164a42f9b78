"""A shared-link throttle: the bandwidth limit of the simulated remote store.

Each transfer books the next ``size / rate`` seconds of one virtual link and may
proceed when its booking ends. All users of one ``Throttle`` share the link, so
the aggregate rate holds however many connections there are. A sender that falls
behind its bookings (it overslept, or the send itself took time) catches up
within ``SLACK`` seconds, because the next booking continues the ledger instead
of starting from the clock; after a longer idle spell the ledger restarts, so no
credit is saved up. This is a token bucket that holds at most ``SLACK`` of credit.
"""

from __future__ import annotations

import numbers
import threading
import time

# Lag a sender may make up. Without it, each ~1 ms of oversleep or send time per
# 3 ms chunk was lost for good: a measured 20% shortfall at 20 MB/s.
SLACK = 0.02


def check_rate(rate: float | None, owner: str = "Throttle") -> float | None:
    """Validates a bandwidth in bytes per second (None means unlimited).

    Example:
        >>> check_rate(2e6)
        2000000.0
    """
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, numbers.Real)):
        raise TypeError(f"{owner}: bandwidth must be None or a number of bytes/s, got {rate!r}")
    if rate is not None and not rate > 0:
        raise ValueError(f"{owner}: bandwidth must be None (unlimited) or > 0 bytes/s, "
                         f"got {rate!r}")
    return None if rate is None else float(rate)


class Throttle:
    """Paces byte transfers to ``rate`` bytes per second, shared by all callers.

    Args:
        rate: Bytes per second; None for unlimited. Settable while in use: a new
            rate applies from the next booking on.

    Example:
        >>> throttle = Throttle(1e6)
        >>> first, second = throttle.delay(10_000), throttle.delay(10_000)  # 10 KB each at 1 MB/s
        >>> round(first, 3), round(second, 3)  # the second transfer queues behind the first
        (0.01, 0.02)
    """

    def __init__(self, rate: float | None) -> None:
        self._lock = threading.Lock()
        self._rate, self._booked = check_rate(rate), 0.0

    @property
    def rate(self) -> float | None:
        """Bytes per second, or None for unlimited."""
        return self._rate

    @rate.setter
    def rate(self, rate: float | None) -> None:
        rate = check_rate(rate)
        with self._lock:
            # Bookings made at the old rate are forgiven, so slowing down and
            # then speeding up again does not leave a backlog.
            self._rate, self._booked = rate, time.monotonic()

    def chunk(self) -> int:
        """Bytes to send per booking: about 10 ms of link time, 1 KiB to 1 MiB."""
        # 10 ms slices keep a transfer of a few hundred ms within a few percent of
        # the rate, yet cost only ~100 sends per second.
        return 1 << 20 if self._rate is None else int(min(max(self._rate / 100, 1024), 1 << 20))

    def delay(self, size: int) -> float:
        """Books ``size`` bytes and returns the seconds to wait before sending them."""
        with self._lock:
            if self._rate is None:
                return 0.0
            now = time.monotonic()
            if self._booked < now - SLACK:
                self._booked = now  # idle: start afresh rather than grant a burst
            self._booked += size / self._rate
            return max(0.0, self._booked - now)
