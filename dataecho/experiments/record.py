"""What a finished trial leaves behind: a JSON record, its key and the code version.

A record is a plain dict (one JSON line in the store) holding the resolved condition,
optimizer settings, seed, outcome, the whole evaluation curve, timings, the pipeline's
repr and the code version. Its key hashes everything that decides the outcome, so a
changed workload definition (target, budget, model) never reuses stale results.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .trial import Trial
    from .workloads import Workload

Record = dict[str, Any]

#: Fields that depend on the clock or the machine, not on the computation; two runs of
#: the same trial agree on everything else.
TIMING_FIELDS = frozenset({"seconds", "cpu_seconds", "data_seconds", "step_seconds", "eval_seconds",
                           "steps_per_second", "version", "finished_at"})


def trial_key(workload: Workload, trial: Trial) -> str:
    """A 16-hex-digit hash of the workload definition, condition, settings, seed and mode.

    Example:
        >>> from dataecho.experiments.workloads import WORKLOADS
        >>> from dataecho.experiments.conditions import Condition
        >>> from dataecho.experiments.search import HParams
        >>> from dataecho.experiments.trial import Trial
        >>> t = Trial(Condition.default("digits", "baseline", 1, 32), HParams(0.1, 0.1), 0)
        >>> len(trial_key(WORKLOADS["digits"], t))
        16
    """
    blob = json.dumps({"workload": definition(workload.config()),
                       "condition": trial.condition.as_dict(), "hparams": trial.hparams.as_dict(),
                       "seed": trial.seed, "mode": trial.mode}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def definition(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a workload config that decides outcomes: prose and the ETA estimate
    are left out, so editing them does not orphan finished trials.

    Example:
        >>> definition({"target": 0.9, "target_why": "because", "trial_seconds": 30.0})
        {'target': 0.9}
    """
    return {k: v for k, v in config.items() if k not in ("target_why", "trial_seconds")}


def comparable(record: Record) -> Record:
    """The record without clock-dependent fields (for comparing reruns).

    Example:
        >>> comparable({"status": "reached", "seconds": 3.2})
        {'status': 'reached'}
    """
    out = {k: v for k, v in record.items() if k not in TIMING_FIELDS}
    if "curve" in out:
        out["curve"] = {k: v for k, v in out["curve"].items() if k not in TIMING_FIELDS}
    if out.get("crossing"):
        out["crossing"] = {k: v for k, v in out["crossing"].items() if k not in TIMING_FIELDS}
    return out


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``git describe --always --dirty`` of the checkout, else the package version.

    Example:
        >>> isinstance(code_version(), str)
        True
    """
    import dataecho

    root = Path(dataecho.__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root,
                             capture_output=True, text=True, timeout=10, check=True)
        return f"{dataecho.__version__}+git.{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        return str(dataecho.__version__)
