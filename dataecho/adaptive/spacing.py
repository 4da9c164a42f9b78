"""How far apart an adaptive echo spaces one item's copies, for the items a reader holds.

``min_gap`` keeps an item used at step ``k`` out of the draw until step ``k + min_gap``.
A pass that holds no more items than that can never echo: every item is still cooling
when the upstream ends. ``Auto()``'s default spacing (512 steps, half its 1,024-example
buffer) is such a gap for a small data set split over DataLoader workers (96 examples in
2 workers: 48 each). :func:`gap_for` therefore spaces copies at most a quarter of the items of
a pass whose length is known; where it is not (a stream), :func:`warn_spacing` warns at the
pass's end, naming the fix.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..source import Source
from ..stage import Stage
from ..stats import chain


def items_left(stage: Stage[Any]) -> int | None:
    """Items left in the pass of the :class:`dataecho.Source` ``stage`` reads; None: unknown.

    Known where the root of ``stage``'s chain is a ``Source`` reading a set number of
    epochs (one reader's part of a map-style data set); the stages between (a
    :class:`dataecho.Map`, a timer) are taken to pass one item per item. A stage that
    does not (a batcher) makes the count too large: the spacing may then stay too long
    for the pass, and :func:`warn_spacing` says so where it held back every echo.

    Example:
        >>> from dataecho import Map, Source
        >>> source = Source(range(96), shard_index=1, num_shards=2)
        >>> _ = next(source)
        >>> items_left(Map(source, abs)), items_left(Source(range(96), num_epochs=None))
        (47, None)
    """
    root = chain(stage)[0]
    if isinstance(root, Source) and root.num_epochs is not None:
        return root.num_epochs * root.shard_size - root.items_read
    return None


def gap_for(min_gap: int, left: int | None) -> int:
    """The spacing of a pass with ``left`` items (None: unknown): ``min_gap``, at most a quarter.

    An item is first free to echo a gap after it was read, so a pass's first ``gap`` steps
    are fresh only. A quarter of the pass keeps that start no longer, in share, than a
    2,048-example part already has at ``Auto()``'s 512 steps (half would leave half the
    pass without an echo). A gap of 0 (no spacing) stays 0.

    Example:
        >>> gap_for(512, 48), gap_for(512, 4096), gap_for(512, None), gap_for(0, 48)
        (12, 512, 512, 0)
    """
    if left is None or 4 * min_gap <= left:
        return min_gap
    return max(left // 4, 1)


def warn_spacing(name: str, gap: int, fresh: int, waits: int) -> None:
    """Warns where spacing ``gap`` kept a late pass from echoing at all.

    That is: the pass held ``fresh`` items, no more than ``gap`` (so none was ever released
    for an echo), and at ``waits`` of its steps, at least a quarter, the consumer waited
    for a fresh item while the spacing held back items with echoes left. One cause: a
    small stream split over DataLoader workers, whose length the stage cannot know.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn_spacing("AdaptiveEcho", gap=512, fresh=48, waits=47)
        ...     warn_spacing("AdaptiveEcho", gap=512, fresh=48, waits=2)  # fresh in time
        >>> len(caught), str(caught[0].message)[:45]
        (1, 'AdaptiveEcho echoed nothing in a pass of 48 i')
    """
    if gap and fresh <= gap and 4 * waits >= fresh > 1:
        warnings.warn(
            f"{name} echoed nothing in a pass of {fresh} items although fresh items were "
            f"late: it spaces an item's copies min_gap={gap} steps apart (Auto(): half its "
            f"buffer_size), more than the pass holds, so no item was ever free to echo; "
            f"pass factor=dataecho.Auto(buffer_size={max(fresh // 2, 1)}) (copies "
            f"{fresh // 4} steps apart, a quarter of the pass; at most half the items one "
            f"reader holds, e.g. one DataLoader worker's part of a stream), or "
            f"AdaptiveEcho(min_gap={fresh // 4})", UserWarning, stacklevel=3)
