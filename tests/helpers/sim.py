"""Runs an adaptive stage on a simulated clock: deterministic, no threads, no sleeps."""

from __future__ import annotations

from typing import Any

from dataecho.adaptive import SimClock, SimulatedFeed


def simulate(stage_class: Any, *args: Any, period: float, depth: int = 2,
             **kwargs: Any) -> tuple[Any, list[Any]]:
    """Drains ``stage_class(*args, **kwargs)`` fed one fresh item per ``period`` seconds.

    The feed holds at most ``depth`` items ahead of the consumer, as the prefetch thread
    would, and each item the consumer takes costs it one simulated second.

    Returns:
        The drained stage (for its stats) and everything it yielded.
    """
    clock = SimClock()
    stage = stage_class(
        *args, clock=clock,
        feed=lambda produce: SimulatedFeed(produce, period=period, clock=clock, depth=depth),
        **kwargs)
    out = []
    for item in stage:
        out.append(item)
        clock.advance(1.0)
    return stage, out
