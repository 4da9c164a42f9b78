"""The echo factor as a value: a number of copies, or :class:`Auto` for adaptive echoing.

Every entry point that echoes takes ``factor: float | Auto``. A number is the paper's
fixed factor (fractional values allowed); ``Auto(...)`` echoes only while fresh data is
late and carries the few parameters that only mean something then, so no parameter of
an entry point changes meaning with another. ``"auto"`` is shorthand for ``Auto()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from ._checks import check_factor, check_positive_int

#: Uses of one fresh item at most, by default, where its copies are identical (after
#: augmentation, whole batches): identical copies lose value fast, and in the wall-clock
#: benchmark at R about 6.7 e = 6 was slower than e = 4 after augmentation (1.47x
#: against 2.38x) and for batches (1.53x against 1.61x). Also the adaptive classes'
#: own default.
DEFAULT_MAX_FACTOR = 4
#: Uses of one fresh example at most, by default, where every copy is augmented anew
#: (example echoing before augmentation): there e = 6 beat e = 4 at R about 6.7 (5.00x
#: against 3.73x) and ``Auto(max_factor=8)`` reached 4.28x where a cap of 4 gave 3.20x
#: (benchmarks/results/wallclock-dec2026*.md); 8 is the top of the paper's useful range.
AUGMENTED_MAX_FACTOR = 8


#: What an adaptive echo repeats: single examples (batched later) or whole items
#: (batches, or a node's items).
Level = Literal["examples", "items"]
#: Recent items an adaptive echo draws its copies from, by default, per level: a few
#: batches' worth of examples, so that a burst of fresh examples (a shard, a window)
#: leaves each enough budget to be echoed; or 4 whole items (batches).
AUTO_BUFFER: dict[str, int] = {"examples": 1024, "items": 4}


@dataclass(frozen=True)
class Auto:
    """Adaptive echoing: echo a recent item only while the next fresh one is late.

    The realised factor then tracks ``R = t_upstream / t_downstream``, capped at
    ``max_factor``; with ``R <= 1`` nothing is echoed. Decisions depend on timing, so
    runs are not bit-reproducible: use a fixed factor when they must be.

    Args:
        max_factor: the most uses of one fresh item, an int >= 1 (1: never echo);
            None: 8 where every copy is augmented anew (example echoing before
            augmentation, :data:`AUGMENTED_MAX_FACTOR`), 4 where copies are identical
            (after augmentation, batches; :data:`DEFAULT_MAX_FACTOR`).
        buffer_size: recent items echoes are drawn from (examples for example
            echoing, batches for batch echoing); None: :data:`AUTO_BUFFER`'s default
            for the level, 1,024 examples or 4 batches. Example echoing one example at
            a time (``EchoDataset``, ``pipeline(batch_size=None)``) spaces an example's
            copies half of it apart, or a quarter of the examples the reader holds
            where it knows them and that is fewer (a map-style data set's part); a stream's
            part too short for the spacing warns at its end, naming the fix.
        agree: a cross-rank agreement such as
            ``dataecho.torch.distributed.RankAgreement()``, so every DDP rank takes the
            same decisions and number of steps; None for one process.

    Example:
        >>> Auto(max_factor=3)
        Auto(max_factor=3)
        >>> as_factor("auto") == Auto(), Auto().cap(augmented=True), Auto().cap(augmented=False)
        (True, 8, 4)
    """

    max_factor: int | None = None
    buffer_size: int | None = None
    agree: Any = None

    def __post_init__(self) -> None:
        # Checked here so that an invalid Auto cannot be written down at all.
        if self.max_factor is not None:
            object.__setattr__(self, "max_factor",
                               check_positive_int(self.max_factor, "Auto.max_factor"))
        if self.buffer_size is not None:
            object.__setattr__(self, "buffer_size",
                               check_positive_int(self.buffer_size, "Auto.buffer_size"))
        if self.agree is not None and not callable(self.agree):
            raise TypeError(
                f"Auto.agree must be None or a callable agreement, got {self.agree!r} of "
                f"type {type(self.agree).__name__}; pass "
                "dataecho.torch.distributed.RankAgreement() under DDP, or leave it None")

    def cap(self, augmented: bool) -> int:
        """``max_factor``, or its default for copies augmented anew (8) or identical (4)."""
        if self.max_factor is not None:
            return self.max_factor
        return AUGMENTED_MAX_FACTOR if augmented else DEFAULT_MAX_FACTOR

    def buffer(self, level: Level) -> int:
        """``buffer_size``, or its default for the level (:data:`AUTO_BUFFER`)."""
        return AUTO_BUFFER[level] if self.buffer_size is None else self.buffer_size

    def __repr__(self) -> str:
        args = [] if self.max_factor is None else [f"max_factor={self.max_factor}"]
        if self.buffer_size is not None:
            args.append(f"buffer_size={self.buffer_size}")
        if self.agree is not None:
            args.append(f"agree={self.agree!r}")
        return f"Auto({', '.join(args)})"


Factor = float | Auto


def as_factor(factor: float | Auto | Literal["auto"], name: str = "factor") -> float | Auto:
    """Returns ``factor`` as a checked float >= 1 or an :class:`Auto`.

    Raises:
        TypeError: ``factor`` is neither a real number nor ``Auto``/``"auto"``.
        ValueError: a number below 1, or not finite.

    Example:
        >>> as_factor(2), as_factor("auto")
        (2.0, Auto())
    """
    if isinstance(factor, Auto):
        return factor
    if isinstance(factor, str):
        if factor == "auto":
            return Auto()
        raise ValueError(
            f"{name} must be a real number >= 1, dataecho.Auto(...) or 'auto', got "
            f"{factor!r}; pass e.g. {name}=2 or {name}=dataecho.Auto(max_factor=4)")
    return check_factor(factor, name)


def most_copies(factor: float | Auto) -> int:
    """The most copies of one item ``factor`` ever makes: ``ceil(factor)``, or Auto's cap.

    Bounds the counts a checkpoint may hold (emitted at most this many times fresh).

    Example:
        >>> most_copies(2.5), most_copies(Auto(max_factor=3))
        (3, 3)
    """
    if isinstance(factor, Auto):  # its cap, for copies augmented anew or identical ones
        return max(factor.cap(augmented=True), factor.cap(augmented=False))
    return math.ceil(factor)


def fixed_factor(factor: object, name: str = "factor", *, adaptive: str) -> float:
    """Returns a fixed ``factor``; ``Auto``/``"auto"`` get an error naming ``adaptive``.

    For entry points that echo a fixed number of copies only, so the message tells
    the user which class echoes adaptively instead.

    Example:
        >>> try:
        ...     fixed_factor("auto", adaptive="dataecho.AdaptiveEcho(upstream)")
        ... except TypeError as e:
        ...     print(str(e)[:46])
        factor must be a fixed number here, got 'auto'
    """
    if isinstance(factor, Auto) or (isinstance(factor, str) and factor == "auto"):
        raise TypeError(
            f"{name} must be a fixed number here, got {factor!r}; for adaptive echoing "
            f"use {adaptive}, or pass a number such as {name}=2")
    return check_factor(factor, name)
