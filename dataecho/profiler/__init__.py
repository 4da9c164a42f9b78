"""Is a job input-bound, and how much should it echo? Measure ``R``, then advise.

``R = t_upstream / t_downstream``: the loader's time per batch over the training
step's time. Echoing pays only when ``R > 1``, and a factor ``e`` is free only while
``e <= R`` (Choi et al., 2019): one upstream batch plus ``e`` steps take
``max(t_up, e * t_down)``.

Modules: ``measure`` (:func:`profile`), ``result`` (the :class:`Profile` it returns,
of each timed :class:`Pass`), ``advice`` (:func:`recommend`, :func:`fixed_factor`,
:func:`advised_factor`), ``monitor`` (:class:`Monitor`, which logs the same numbers
inside a training loop, and its :class:`LoopTiming`), ``sync``
(:func:`device_sync`: both wait for the accelerator around a timed step, so a CUDA
step's time is its work, not its launch) and ``cli`` (``dataecho profile``,
:func:`main`).
"""

from .advice import advised_factor, fixed_factor, recommend
from .cli import main
from .measure import profile
from .monitor import LoopTiming, Monitor
from .result import Pass, Profile
from .sync import device_sync

__all__ = ["LoopTiming", "Monitor", "Pass", "Profile", "advised_factor", "device_sync",
           "fixed_factor", "main", "profile", "recommend"]
