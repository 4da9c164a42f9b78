"""Argument checks shared by the stages.

Every message names the parameter, the rule, the value received and the fix, because
a user who mistypes a factor deep inside a training script should not have to read
our source to learn what we wanted.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

_MAX_SEED = 2**63 - 1


def check_factor(factor: object, name: str = "factor") -> float:
    """Returns ``factor`` as a float after checking it is a finite real >= 1."""
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real):
        raise TypeError(
            f"{name} must be a real number >= 1 (e.g. 2 or 2.5), got {factor!r} of type "
            f"{type(factor).__name__}; pass a number such as {name}=2.0"
        )
    value = float(factor)
    if not math.isfinite(value):
        raise ValueError(
            f"{name} must be finite and >= 1, got {value!r}; pass a number such as {name}=2.0"
        )
    if value < 1.0:
        raise ValueError(
            f"{name} must be >= 1 (each item is used at least once; 1 disables echoing), "
            f"got {value!r}; pass {name}=1 for no echoing or a larger value to echo"
        )
    return value


def check_positive_int(value: object, name: str, *, minimum: int = 1) -> int:
    """Returns ``value`` after checking it is an int >= ``minimum`` (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an int >= {minimum}, got {value!r} of type "
            f"{type(value).__name__}; pass a whole number such as {name}={max(minimum, 1)}"
        )
    if int(value) < minimum:
        raise ValueError(
            f"{name} must be an int >= {minimum}, got {int(value)}; pass {name}={minimum} "
            "or more"
        )
    return int(value)


def check_augment(augment: object, name: str = "augment") -> Any:
    """Returns ``augment`` after checking it is None or a function of an example.

    Example:
        >>> try:
        ...     check_augment("flip")
        ... except TypeError as e:
        ...     print(str(e)[:41])
        augment must be callable as augment(examp
    """
    if augment is not None and not callable(augment):
        raise TypeError(
            f"{name} must be callable as {name}(example) or {name}(example, rng), "
            f"or None, got {augment!r} of type {type(augment).__name__}; pass a "
            "function, or None for no augmentation"
        )
    return augment


def check_size(size: object, name: str = "size") -> Any:
    """Returns ``size`` after checking it is None or callable as ``size(item) -> int``."""
    if size is not None and not callable(size):
        raise TypeError(
            f"{name} must be callable as {name}(item) -> examples in the item, got "
            f"{type(size).__name__}; pass a function such as len, or None for the default "
            "count (1 per item, or the batch size after a Batch stage)"
        )
    return size


def check_seed(seed: object, name: str = "seed") -> int:
    """Returns ``seed`` after checking it is an int in ``[0, 2**63)``."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(
            f"{name} must be an int in [0, 2**63), got {seed!r} of type "
            f"{type(seed).__name__}; pass e.g. {name}=0"
        )
    if not 0 <= int(seed) <= _MAX_SEED:
        raise ValueError(
            f"{name} must be an int in [0, 2**63), got {int(seed)}; pass e.g. {name}=0"
        )
    return int(seed)


def check_iterable(upstream: object, name: str = "upstream") -> Iterable[Any]:
    """Returns ``upstream`` after checking it can be iterated."""
    if not isinstance(upstream, Iterable):
        raise TypeError(
            f"{name} must be iterable (a Stage, a list, a DataLoader, a generator...), "
            f"got {type(upstream).__name__}; wrap a single item in a list, or pass the "
            "data set itself"
        )
    return upstream


def check_timeout(timeout: object, name: str = "timeout") -> float | None:
    """Returns ``timeout`` as a float after checking it is a number of seconds > 0, or None.

    Example:
        >>> check_timeout(120), check_timeout(None)
        (120.0, None)
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(
            f"{name} must be a number of seconds > 0 or None, got {timeout!r}; pass e.g. "
            f"{name}=120, or {name}=None to wait for the upstream forever")
    return float(timeout)
