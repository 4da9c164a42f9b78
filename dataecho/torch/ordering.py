"""How :class:`~dataecho.torch.DeviceEcho` orders its copies and gathers: streams and events.

On CUDA a fresh batch is copied to the device on a side stream, so the copy overlaps the
training step; two kinds of event keep that safe. A copy into a slot waits for the
*free* event recorded after the last gather that read the slot's previous batch (else it
would overwrite examples still to be gathered), and the first gather of a batch waits
for its copy's *ready* event (else it would read a half-written slot). On the CPU there
are no streams: a copy is done when it returns, and every wait is a no-op.

The four operations are the :class:`Ordering` protocol, so a test can pass a recorder
in place of CUDA's streams and check the order of what was asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch


class Ordering(Protocol):
    """The stream and event operations of a device ring (see the module's docstring)."""

    def copy(self, work: Callable[[], None], after: Any, resident: bool = False) -> Any:
        """Runs ``work`` (a host-to-device copy) once ``after`` (a free event or None) has
        passed, and with ``resident`` (a batch already on the device) once the work asked
        for so far has run; returns the copy's ready event."""
        ...

    def free(self) -> Any:
        """An event after every gather asked for so far: what a later copy waits for."""
        ...

    def wait(self, ready: Any) -> None:
        """Makes the gathers asked for after this call wait for the copy of ``ready``."""
        ...

    def done(self, ready: Any) -> bool:
        """Whether the copy of ``ready`` has completed; never waits."""
        ...


class HostOrdering:
    """The CPU's ordering: one stream, so a copy is done when it returns.

    Example:
        >>> order = HostOrdering()
        >>> ready = order.copy(lambda: None, after=order.free())
        >>> order.done(ready)
        True
    """

    def copy(self, work: Callable[[], None], after: Any, resident: bool = False) -> Any:
        work()

    def free(self) -> Any:
        return None

    def wait(self, ready: Any) -> None:
        pass

    def done(self, ready: Any) -> bool:
        return True

    def __repr__(self) -> str:
        return "HostOrdering()"


class CudaOrdering:
    """A side stream for the copies, CUDA events between it and the compute stream.

    The compute stream is the one current when a gather is asked for (the training
    loop's), read at every call, so a loop that runs under its own stream is followed.

    Args:
        device: a CUDA device.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.side = torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]

    def copy(self, work: Callable[[], None], after: Any, resident: bool = False) -> Any:
        if resident:  # a batch the loader made on the device is written on that stream
            self.side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.side):
            if after is not None:
                self.side.wait_event(after)
            work()
            ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
            ready.record(self.side)
        return ready

    def free(self) -> Any:
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record(torch.cuda.current_stream(self.device))
        return event

    def wait(self, ready: Any) -> None:
        torch.cuda.current_stream(self.device).wait_event(ready)

    def done(self, ready: Any) -> bool:
        return bool(ready.query())

    def __repr__(self) -> str:
        return f"CudaOrdering({self.device})"


def ordering_for(device: torch.device) -> Ordering:
    """The ordering a ring on ``device`` uses: CUDA's streams, else the host's.

    Example:
        >>> ordering_for(torch.device("cpu"))
        HostOrdering()
    """
    return CudaOrdering(device) if device.type == "cuda" else HostOrdering()
