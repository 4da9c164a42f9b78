"""Where the echo stands, and the one place an echo stage is built from a factor.

The paper's three variants differ only in where the echo stage stands (before or after
the augmentation, or after the batcher): :data:`ECHO_AFTER` says which. :func:`echo_stage`
builds that stage for a factor, fixed (:class:`dataecho.Echo`) or adaptive
(:class:`dataecho.AdaptiveEcho`, with the defaults :class:`dataecho.Auto` states).
``pipeline()``, ``EchoDataset``, ``EchoBatches`` and ``EchoNode`` all build their echo here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, get_args

from .adaptive import AdaptiveEcho, AdaptiveExamples
from .echo import Echo
from .factor import Auto, Level
from .sizes import one_per_item
from .stage import Stage

#: Where the echo stands: before the augmentation (copies augmented anew, the paper's
#: best), after it (identical copies) or after the batcher (whole batches repeat).
Variant = Literal["before_augmentation", "after_augmentation", "batch"]
#: The values ``pipeline(echo=...)`` accepts besides None, in the paper's order of
#: quality: example echoing before augmentation, after it, and batch echoing.
VARIANTS: tuple[Variant, ...] = get_args(Variant)
#: Where each variant's echo stands: the step of ``pipeline()`` (read, augment, batch,
#: in that order) it follows, for fixed factors and ``Auto`` alike.
ECHO_AFTER: dict[Variant, Literal["read", "augment", "batch"]] = {
    "before_augmentation": "read", "after_augmentation": "augment", "batch": "batch"}
#: The variants whose echo repeats examples rather than batches.
EXAMPLE_LEVEL: tuple[Variant, ...] = tuple(v for v in VARIANTS if ECHO_AFTER[v] != "batch")

#: Fresh examples read ahead by an adaptive echo of single examples (in DataLoader
#: workers): enough for a burst of a shard or a window.
EXAMPLE_PREFETCH = 64


def check_variant(echo: object, *, allowed: tuple[str, ...] = VARIANTS,
                  hint: str = "pass echo='before_augmentation' for the paper's best variant",
                  ) -> None:
    """Refuses an ``echo`` that is not one of ``allowed`` (None stays the caller's).

    Example:
        >>> check_variant("batch")
        >>> try:
        ...     check_variant("examples")
        ... except ValueError as e:
        ...     print(str(e)[:36])
        echo must be one of 'before_augmenta
    """
    if echo not in allowed:
        raise ValueError(
            f"echo must be one of {', '.join(map(repr, allowed))}, got {echo!r}; {hint}")


def echo_stage(upstream: Iterable[Any], factor: float | Auto, *, seed: int,
               level: Level, augmented: bool = False,
               size: Callable[[Any], int] | None = None) -> Stage[Any]:
    """The echo stage for ``factor``: ``Echo``, or ``AdaptiveEcho`` for an ``Auto``.

    Args:
        upstream: the items to echo.
        factor: a checked fixed factor, or :class:`dataecho.Auto`.
        seed: the stage's seed (already derived for its epoch and reader).
        level: ``"examples"`` (single examples, batched later) or ``"items"``
            (whole items: batches, or a node's items); picks ``Auto``'s buffer default,
            and spaces an example's adaptive copies half a buffer apart, so that a far
            slower upstream does not fill one batch with the newest example's copies.
        augmented: whether each copy is augmented anew downstream (``Auto``'s cap).
        size: examples in an item (default: one per item, or a batch's length for
            a fixed factor, see :class:`dataecho.Echo`).

    Example:
        >>> echo_stage(range(3), 2.0, seed=0, level="items")
        Echo(<range>, factor=2.0, seed=0)
    """
    if not isinstance(factor, Auto):
        return Echo(upstream, factor, seed=seed, size=size)
    buffer = factor.buffer(level)
    if level == "examples":
        return AdaptiveEcho(upstream, max_factor=factor.cap(augmented), agree=factor.agree,
                            buffer_size=buffer, min_gap=buffer // 2,
                            prefetch=EXAMPLE_PREFETCH, seed=seed, size=size or one_per_item)
    return AdaptiveEcho(upstream, max_factor=factor.cap(augmented), agree=factor.agree,
                        buffer_size=buffer, seed=seed, size=size)


def batched_examples(upstream: Iterable[Any], factor: Auto, batch_size: int, *, seed: int,
                     augmented: bool, augment: Callable[..., Any] | None, drop_last: bool,
                     collate: Callable[[list[Any]], Any] | None) -> Stage[Any]:
    """Adaptive example echoing that also batches (in the training process).

    ``augment`` is applied to every copy anew (before augmentation); None where the
    augmentation ran upstream. ``augmented`` picks ``Auto``'s cap.

    Example:
        >>> stage = batched_examples(range(4), Auto(max_factor=1), 2, seed=0, augmented=False,
        ...                          augment=None, drop_last=False, collate=None)
        >>> [b.tolist() for b in stage]
        [[0, 1], [2, 3]]
    """
    return AdaptiveExamples(upstream, batch_size, max_factor=factor.cap(augmented),
                            drop_last=drop_last, collate=collate, seed=seed,
                            buffer_size=factor.buffer("examples"), agree=factor.agree,
                            augment=augment)
