"""The experiment harness: the paper's protocol on real data, tuned, repeated, reported.

One concept per module: ``workloads`` (data, model, augmentation, target), ``models``,
``conditions`` (variant, factor, batch size, buffer), ``protocol`` (the grids per
budget), ``search`` (quasi-random settings), ``trial`` (one training trial), ``crossing``
(when a curve reaches the target), ``record``/``store`` (the resumable JSON-lines
store), ``sweep`` (parallel, resumable execution), ``analysis``/``findings``/
``figures``/``report`` (the Markdown report) and ``cli``.

Example:
    >>> from dataecho.experiments import plan
    >>> plan("lm", "full").trials
    8
"""

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cli import report_main, reproduce_main
    from .conditions import Condition
    from .crossing import Crossing, find_crossing
    from .protocol import BUDGETS, Plan, plan
    from .report import write_report
    from .search import HParams, search_points
    from .store import Store
    from .sweep import run
    from .trial import Trial, train
    from .workloads import WORKLOADS, Workload

# Imported at first use (PEP 562), so the torch-free modules (``crossing``, ``store``,
# ``conditions``, ...) import without torch: ``dataecho.demo.gridreport`` uses
# ``crossing``, and importing any submodule runs this file first.
_EXPORTS = {
    "report_main": "cli", "reproduce_main": "cli", "Condition": "conditions",
    "Crossing": "crossing", "find_crossing": "crossing", "BUDGETS": "protocol",
    "Plan": "protocol", "plan": "protocol", "write_report": "report", "HParams": "search",
    "search_points": "search", "Store": "store", "run": "sweep", "Trial": "trial",
    "train": "trial", "WORKLOADS": "workloads", "Workload": "workloads",
}
_SUBMODULES = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_SUBMODULES})


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
