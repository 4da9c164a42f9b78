"""Adaptive echoing, ``factor=Auto()``: echo only while the next fresh item is late.

:class:`AdaptiveEcho` echoes whole items, :class:`AdaptiveExamples` examples before
augmentation; ``schedule`` takes every decision of both, from an :class:`EchoBuffer` and a
:class:`Feed` (a :class:`Prefetcher` thread, or a :class:`SimulatedFeed`); ``spacing``
sets how far apart one item's copies stand, for the items a pass holds.
"""

from ..factor import DEFAULT_MAX_FACTOR
from .buffer import EchoBuffer
from .echo import DEFAULT_BUFFER, AdaptiveEcho, AdaptiveStats
from .examples import AdaptiveExamples
from .prefetch import Prefetcher, reader
from .schedule import Agreement, Feed, Plan, alone
from .sim import SimClock, SimulatedFeed

__all__ = [
    "DEFAULT_BUFFER", "DEFAULT_MAX_FACTOR", "AdaptiveEcho", "AdaptiveExamples", "AdaptiveStats",
    "Agreement", "EchoBuffer", "Feed", "Plan", "Prefetcher", "SimClock", "SimulatedFeed",
    "alone", "reader",
]
