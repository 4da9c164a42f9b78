"""JSON for result files: NaN and infinity, which JSON lacks, become null."""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (nested in dicts, lists, tuples) as None.

    Example:
        >>> finite({"a": float("nan"), "b": [1.0, float("inf")]})
        {'a': None, 'b': [1.0, None]}
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
