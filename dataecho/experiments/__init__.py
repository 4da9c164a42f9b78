"""The experiment harness: the paper's protocol on real data, tuned, repeated, reported.

One concept per module: ``workloads`` (data, model, augmentation, target), ``models``,
``conditions`` (variant, factor, batch size, buffer), ``protocol`` (the grids per
budget), ``search`` (quasi-random settings), ``train`` (one trial), ``crossing``
(when a curve reaches the target), ``record``/``store`` (the resumable JSON-lines
store), ``sweep`` (parallel, resumable execution), ``analysis``/``findings``/
``figures``/``report`` (the Markdown report) and ``cli``.

Example:
    >>> from dataecho.experiments import plan
    >>> plan("lm", "full").trials
    8
"""

from .cli import report_main, reproduce_main
from .conditions import Condition
from .crossing import Crossing, find_crossing
from .protocol import BUDGETS, Plan, plan
from .report import write_report
from .search import HParams, search_points
from .store import Store
from .sweep import run
from .train import Trial, train
from .workloads import WORKLOADS, Workload

__all__ = [
    "BUDGETS",
    "WORKLOADS",
    "Condition",
    "Crossing",
    "HParams",
    "Plan",
    "Store",
    "Trial",
    "Workload",
    "find_crossing",
    "plan",
    "report_main",
    "reproduce_main",
    "run",
    "search_points",
    "train",
    "write_report",
]
