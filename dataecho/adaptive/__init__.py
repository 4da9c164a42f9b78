"""Adaptive echoing, ``factor=Auto()``: echo only while the next fresh item is late.

Modules, one idea each:

* ``echo``: :class:`AdaptiveEcho`, the stage that echoes whole items (batches);
* ``examples``: :class:`AdaptiveExamples` (example echoing before augmentation);
* ``plan``: the decision, pure: the :class:`Feed` and :class:`Agreement` protocols and
  ``plan()``, which fills a step with fresh items, then echoes, then waits;
* ``buffer``: :class:`EchoBuffer`, the recent items echoes are drawn from (which one, by
  a ``(seed, step)``-keyed draw: ``dataecho._rng.Picks``);
* ``prefetch``: :class:`Prefetcher`, the background thread that reads ahead;
* ``timing``: :class:`AdaptiveStats`, echo counts plus the consumer's stall;
* ``sim``: :class:`SimClock` and :class:`SimulatedFeed`, to replay the decisions
  without threads or sleeps.

``dataecho.variants.echo_stage`` builds these stages from an ``Auto``, with its
defaults. Cross-rank agreement for DDP lives with the torch adapters:
``dataecho.torch.distributed.RankAgreement``.
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
