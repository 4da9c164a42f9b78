"""Is a job input-bound, and how much should it echo? Measure ``R``, then advise.

``R = t_upstream / t_downstream``: the loader's time per batch over the training
step's time. Echoing pays only when ``R > 1``, and a factor ``e`` is free only while
``e <= R`` (Choi et al., 2019): one upstream batch plus ``e`` steps take
``max(t_up, e * t_down)``.

A factor's gain needs more than ``R``: echoing before augmentation still augments
every copy. Given the loader's two sides per batch (read and augmentation, from an
``EchoDataset`` or given), ``model`` predicts each variant's gain.

Modules: ``measure`` (:func:`profile`), ``result`` (the :class:`Profile` it returns,
of each timed :class:`Pass`), ``advice`` (:func:`recommend`, :func:`fixed_factor`,
:func:`advised_factor`), ``model`` (:class:`Costs`, :func:`predict` and its
:class:`Prediction`), ``prediction`` (the model's advice in words), ``monitor``
(:class:`Monitor`, which logs the same numbers inside a training loop, and its
:class:`LoopTiming`), ``sync`` (:func:`device_sync`: both wait for the accelerator
around a timed step, so a CUDA step's time is its work, not its launch) and ``cli``
(``dataecho profile``, :func:`main`).
"""

from .advice import advised_factor, fixed_factor, recommend
from .cli import main
from .measure import profile
from .model import Costs, Prediction, predict
from .monitor import LoopTiming, Monitor
from .result import Pass, Profile
from .sync import device_sync

__all__ = ["Costs", "LoopTiming", "Monitor", "Pass", "Prediction", "Profile", "advised_factor",
           "device_sync", "fixed_factor", "main", "predict", "profile", "recommend"]
