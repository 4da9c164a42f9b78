"""Adaptive echoing, ``factor=Auto()``: echo only while the next fresh item is late.

* ``echo``: :class:`AdaptiveEcho`, the stage that echoes whole items (batches), and
  ``examples``: :class:`AdaptiveExamples` (example echoing before augmentation);
* ``schedule``: the ``Scheduler``, which takes every decision of both, by
* ``plan``: the decision, pure: ``plan()`` and the :class:`Feed` and :class:`Agreement`
  protocols;
* ``buffer``: :class:`EchoBuffer`, the recent items echoes are drawn from;
* ``prefetch``: :class:`Prefetcher`, the background thread that reads ahead;
* ``timing``: :class:`AdaptiveStats`, echo counts plus the consumer's stall;
* ``sim``: :class:`SimClock` and :class:`SimulatedFeed`, to replay decisions without
  threads or sleeps.

``dataecho.variants.echo_stage`` builds the stages from an ``Auto``; cross-rank
agreement for DDP is ``dataecho.torch.distributed.RankAgreement``.
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
