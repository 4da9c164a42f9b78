"""Adaptive echoing, ``factor=Auto()``: echo only while the next fresh item is late.

:class:`AdaptiveEcho` echoes whole items (batches), :class:`AdaptiveExamples` examples
before augmentation; a ``Scheduler`` (``schedule``) takes every decision of both by
``plan()``, from an :class:`EchoBuffer` and a :class:`Feed` (a :class:`Prefetcher`
thread, or a :class:`SimulatedFeed` on a :class:`SimClock`). Cross-rank agreement for
DDP is ``dataecho.torch.distributed.RankAgreement``.
"""

from ..factor import DEFAULT_MAX_FACTOR
from .buffer import EchoBuffer
from .echo import DEFAULT_BUFFER, AdaptiveEcho
from .examples import AdaptiveExamples
from .plan import Agreement, Feed, Plan, alone
from .prefetch import Prefetcher, reader
from .sim import SimClock, SimulatedFeed
from .timing import AdaptiveStats

__all__ = [
    "DEFAULT_BUFFER", "DEFAULT_MAX_FACTOR", "AdaptiveEcho", "AdaptiveExamples", "AdaptiveStats",
    "Agreement", "EchoBuffer", "Feed", "Plan", "Prefetcher", "SimClock", "SimulatedFeed",
    "alone", "reader",
]
