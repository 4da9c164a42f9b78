"""dataecho: data echoing for input-bound training (Choi et al., 2019).

Stages wrap their upstream and checkpoint with ``state_dict``/``load_state_dict``:

>>> import dataecho
>>> pipe = dataecho.pipeline(list(range(8)), echo="before_augmentation", factor=2,
...                          batch_size=4, seed=0)
>>> batches = list(pipe)
>>> len(batches), pipe.stats().fresh_examples, pipe.stats().emitted_examples
(4, 8, 16)
"""

from .adaptive import DEFAULT_MAX_FACTOR, AdaptiveEcho, AdaptiveExamples, AdaptiveStats
from .batch import Batch, collate
from .download import FetchError, fetch
from .echo import Echo
from .factor import Auto
from .map import Map
from .pipeline import VARIANTS, pipeline
from .profiler import LoopTiming, Monitor, Profile, profile
from .readers import IterableSource, NodeSource, StatefulSource, as_stage
from .shuffle import Shuffle
from .source import Source
from .stage import Stage
from .stats import EchoStats
from .stride import Shard
from .tarformat import ShardError
from .tarshards import TarShards

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_FACTOR",
    "VARIANTS",
    "AdaptiveEcho",
    "AdaptiveExamples",
    "AdaptiveStats",
    "Auto",
    "Batch",
    "Echo",
    "EchoStats",
    "FetchError",
    "IterableSource",
    "LoopTiming",
    "Map",
    "Monitor",
    "NodeSource",
    "Profile",
    "Shard",
    "ShardError",
    "Shuffle",
    "Source",
    "Stage",
    "StatefulSource",
    "TarShards",
    "__version__",
    "as_stage",
    "collate",
    "fetch",
    "pipeline",
    "profile",
]
