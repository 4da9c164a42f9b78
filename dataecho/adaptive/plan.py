"""The adaptive echo decision, pure: no threads, no sleeps, no clock of its own.

Timing enters only through a :class:`Feed`; :class:`~dataecho.adaptive.schedule.Scheduler`
applies :func:`plan` at each step.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Protocol, TypeVar

T_co = TypeVar("T_co", covariant=True)


class Feed(Protocol[T_co]):
    """Fresh items produced ahead of the consumer (a thread, or a simulation).

    ``ready()``: the items ``get()`` returns without waiting; ``finished()``: True once
    none will follow them (upstream over, or closed); ``wait()``: waits until an item is
    ready or none will follow, taking nothing (TimeoutError); ``get()``: the next item,
    waiting if needed (StopIteration at the end); ``close(wait)``: stops producing and
    drops the ready items, waiting up to ``wait`` seconds for a thread.
    """

    def ready(self) -> int: ...

    def finished(self) -> bool: ...

    def wait(self) -> None: ...

    def get(self) -> T_co: ...

    def close(self, wait: float = 5.0) -> None: ...


class Agreement(Protocol):
    """Combines one vote across DDP ranks: min ready, min capacity, any ended.

    A rank has ``ended`` when it has no fresh item ready and none will come.
    """

    def __call__(self, ready: int, capacity: int, ended: bool) -> tuple[int, int, bool]: ...


def alone(ready: int, capacity: int, ended: bool) -> tuple[int, int, bool]:
    """The agreement of a single process: its own vote.

    Example:
        >>> alone(3, 1, False)
        (3, 1, False)
    """
    return ready, capacity, ended


class Plan(NamedTuple):
    """What to do for the items a step still lacks.

    Attributes:
        fresh: ready fresh items to take now (taking them never waits).
        echoes: echoes to emit after them.
        block: wait until one more fresh item is ready (or none will come), taking
            nothing, then plan again: every take is agreed between ranks.
        stop: the upstream is over; the step ends with what it has.
    """

    fresh: int
    echoes: int = 0
    block: bool = False
    stop: bool = False


@lru_cache(maxsize=4096)  # pure, and the few answers a stage needs repeat every step
def plan(need: int, ready: int, capacity: int, ended: bool) -> Plan:
    """Decides how to fill ``need`` items given an (agreed) vote.

    Take the ready fresh items, fill the shortfall with echoes while the budget lasts,
    and wait only when neither suffices: the realised factor tracks ``R = t_upstream /
    t_downstream``, capped by ``max_factor``, and is exactly 1 when ``R <= 1``. No echo
    with a partial budget (one more fresh item is awaited instead, after which the
    shortfall may fit). Once a rank has ``ended`` the step stops with what it has: no
    rank can supply another fresh item in step with the others.

    Example:
        >>> plan(4, ready=1, capacity=3, ended=False)
        Plan(fresh=1, echoes=3, block=False, stop=False)
        >>> plan(4, ready=1, capacity=2, ended=False)
        Plan(fresh=1, echoes=0, block=True, stop=False)
    """
    fresh = min(ready, need)
    rest = need - fresh
    if rest == 0:
        return Plan(fresh)
    if ended:
        return Plan(fresh, stop=True)
    if capacity >= rest:
        return Plan(fresh, echoes=rest)
    return Plan(fresh, block=True)
