"""Waiting for the accelerator, so a timed step ends when its work does, not its launch.

A CUDA (or MPS, or XLA) step returns once its kernels are queued; timed with
``perf_counter`` alone, ``t_down`` is the launch time and ``R`` comes out too high.
:func:`profile` and :class:`Monitor` take ``sync=``: ``"auto"`` (the default) finds the
device in use through :func:`device_sync`, a callable is called as is, ``None`` never
waits (right for a CPU step, whose work is done when it returns).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Literal

Sync = Callable[[], object] | Literal["auto"] | None


def device_sync() -> Callable[[], object] | None:
    """The synchronise function of the accelerator this process uses, or None (CPU).

    Looks only at frameworks already imported (it imports none): PyTorch with CUDA
    initialised (``torch.cuda.synchronize``), torch_xla (``mark_step`` then
    ``wait_device_ops``), PyTorch's MPS with memory allocated on it
    (``torch.mps.synchronize``); otherwise None.

    Example:
        >>> device_sync() is None  # no accelerator in use by this process
        True
    """
    torch: Any = sys.modules.get("torch")
    if torch is None:
        return None
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        sync: Callable[[], object] = cuda.synchronize
        return sync
    xm: Any = sys.modules.get("torch_xla.core.xla_model")
    if xm is not None:
        return lambda: (xm.mark_step(), xm.wait_device_ops())
    mps = getattr(torch, "mps", None)
    backend = getattr(getattr(torch, "backends", None), "mps", None)
    if mps is not None and backend is not None and backend.is_available() and (
            mps.current_allocated_memory() > 0):
        sync = mps.synchronize
        return sync
    return None


def resolve(sync: object) -> Callable[[], object]:
    """``sync=`` as a function to call around a timed step; checks the argument.

    ``"auto"`` looks the device up on each call until it finds one (CUDA is often
    initialised after the profiler or monitor is built), then keeps it.

    Example:
        >>> resolve(None)() is None, resolve("auto")() is None
        (True, True)
    """
    if sync is None:
        return _nothing
    if isinstance(sync, str) and sync == "auto":
        return _Auto()
    if not callable(sync):
        raise TypeError(
            f"sync must be a function that waits for the accelerator, 'auto' or None, got "
            f"{sync!r} of type {type(sync).__name__}; pass sync=torch.cuda.synchronize, "
            "sync='auto' (the device in use) or sync=None (a CPU step)")
    fn: Callable[[], object] = sync
    return fn


def _nothing() -> None:
    return None


class _Auto:
    """``sync="auto"``: the device's synchronise function, once one is in use."""

    def __init__(self) -> None:
        self.found: Callable[[], object] | None = None

    def __call__(self) -> object:
        if self.found is None:
            self.found = device_sync()
        return None if self.found is None else self.found()
