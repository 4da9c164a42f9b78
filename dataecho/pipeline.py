"""One obvious way to build the paper's three echoing variants."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from ._checks import check_augment, check_factor, check_positive_int, check_seed
from ._rng import derive_seed
from .adaptive import DEFAULT_MAX_FACTOR, make_auto
from .batch import Batch
from .echo import Echo
from .map import Map
from .shuffle import Shuffle
from .source import Source
from .stage import Stage

Variant = Literal["before_augmentation", "after_augmentation", "batch"]
VARIANTS: tuple[str, ...] = ("before_augmentation", "after_augmentation", "batch")


def pipeline(
    data: Sequence[Any],
    *,
    augment: Callable[..., Any] | None = None,
    echo: Variant | None = "before_augmentation",
    factor: float | Literal["auto"] | None = None,
    max_factor: int | None = None,
    batch_size: int | None = 128,
    buffer_size: int | None = None,
    drop_last: bool = False,
    collate: Callable[[list[Any]], Any] | None = None,
    shuffle: bool = True,
    seed: int = 0,
    num_epochs: int | None = 1,
    epoch: int = 0,
    shard_index: int = 0,
    num_shards: int = 1,
    drop_remainder: bool = False,
) -> Stage[Any]:
    """Builds ``read -> [echo] -> augment -> [echo] -> shuffle -> batch -> [echo]``.

    The three variants of Choi et al. (2019) differ only in where ``Echo`` stands:

    - ``"before_augmentation"``: Source -> Echo -> Map(augment) -> Shuffle -> Batch.
      Copies of an example get different augmentations; the paper's best variant.
    - ``"after_augmentation"``: Source -> Map(augment) -> Echo -> Shuffle -> Batch.
      Copies are identical; also saves the augmentation work.
    - ``"batch"``: Source -> Map(augment) -> Batch -> Echo [-> Shuffle of batches].
      Whole batches repeat; saves batching work too.
    - ``None`` (or ``factor=1``): the baseline, Source -> Map(augment) -> Batch;
      with ``echo=None`` a ``factor`` other than 1, or ``max_factor``, is an error.

    Args:
        data: map-style data set of decoded examples (the expensive read happens here).
        augment: ``fn(example)`` or ``fn(example, rng)``; None for no augmentation.
        echo: the variant, or None for no echoing.
        factor: echo factor, a real number >= 1 (fractional values allowed), or
            ``"auto"``: echo only while fresh data is late (a prefetch thread reads
            upstream; see :class:`dataecho.AdaptiveExamples`), never more than
            ``max_factor`` uses per fresh item. Not bit-reproducible. Default (None):
            2.0 with a variant, 1 (no echoing) with ``echo=None``.
        max_factor: the cap on uses per fresh item with ``factor="auto"`` (default
            4); an error with a fixed factor, where it would do nothing.
        batch_size: examples per batch, or None for a stream of examples (example
            echoing only), e.g. to let a DataLoader batch them.
        buffer_size: items in the shuffle window after the echo stage. Default: ten
            batches for example echoing, none (1) for batch echoing, where each item is
            a whole batch. 1 disables the post-echo shuffle. With ``factor="auto"`` it
            is the adaptive stage's echo buffer instead (recent examples, or batches for
            batch echoing, that echoes are drawn from); default: that stage's own.
        drop_last: drop a final partial batch.
        collate: batch collate function (default: numpy stacking).
        shuffle: permute the data set each epoch.
        seed: the one seed; each stage derives its own stream from it.
        num_epochs: epochs to read; None for an endless stream.
        epoch: first epoch.
        shard_index: this reader's shard (rank * num_workers + worker).
        num_shards: number of readers.
        drop_remainder: drop ``len(data) % num_shards`` examples of each epoch so that
            every shard has the same length (see :class:`dataecho.Source`).

    Example:
        >>> import numpy as np
        >>> data = np.arange(100, dtype=np.float32)
        >>> p = pipeline(data, echo="batch", factor=2, batch_size=10)
        >>> sum(1 for _ in p), p.stats().fresh_examples
        (20, 100)
    """
    if echo is not None and echo not in VARIANTS:
        raise ValueError(
            f"echo must be one of {', '.join(map(repr, VARIANTS))} or None, got {echo!r}; "
            "pass echo='before_augmentation' for the paper's best variant"
        )
    check_augment(augment)
    if echo is None:
        given = {k: v for k, v in (("factor", factor), ("max_factor", max_factor))
                 if v is not None and not (k == "factor" and v == 1)}
        if given:
            names = " and ".join(given)
            raise ValueError(
                f"{names} {'does' if len(given) == 1 else 'do'} nothing with echo=None (no "
                f"echoing: the baseline), got "
                f"{', '.join(f'{k}={v!r}' for k, v in given.items())}; drop {names} for the "
                "baseline, or pass a variant such as echo='before_augmentation' to echo")
    if factor is None:
        factor = 1.0 if echo is None else 2.0
    auto = factor == "auto"
    factor = 1.0 if auto else check_factor(factor)
    if max_factor is not None and not auto:
        raise ValueError(
            f"max_factor caps factor='auto' and does nothing with a fixed factor={factor:g}, "
            f"got max_factor={max_factor!r}; drop max_factor, or pass factor='auto'")
    if auto and batch_size is None:
        raise ValueError(
            "batch_size must be an int >= 1 with factor='auto' (adaptive echoing fills "
            "batches), got None; pass batch_size"
        )
    if batch_size is None and echo == "batch":
        raise ValueError(
            "batch_size must be an int >= 1 for echo='batch' (batch echoing repeats "
            "batches), got None; pass batch_size or use an example-level variant"
        )
    if batch_size is not None:
        batch_size = check_positive_int(batch_size, "batch_size")
    seed = check_seed(seed)
    adaptive_buffer = None if buffer_size is None else check_positive_int(
        buffer_size, "buffer_size")
    if buffer_size is None:
        example_level = echo in ("before_augmentation", "after_augmentation")
        buffer_size = 10 * (batch_size or 100) if example_level else 1
    buffer_size = check_positive_int(buffer_size, "buffer_size")
    if echo is None or (factor == 1.0 and not auto):
        echo = None

    def sub(tag: int) -> int:  # distinct streams per stage, first epoch and shard
        return derive_seed(seed, tag, epoch, shard_index)

    stage: Stage[Any] = Source(data, shuffle=shuffle, seed=seed, num_epochs=num_epochs,
                               epoch=epoch, shard_index=shard_index, num_shards=num_shards,
                               drop_remainder=drop_remainder)
    if auto and echo is not None:
        return make_auto(stage, echo=echo, batch_size=batch_size,  # type: ignore[arg-type]
                         augment=augment, drop_last=drop_last, collate=collate,
                         seed=sub(1), buffer_size=adaptive_buffer,
                         max_factor=DEFAULT_MAX_FACTOR if max_factor is None else max_factor)
    if echo == "before_augmentation":
        stage = Echo(stage, factor, seed=sub(1))
    if augment is not None:
        stage = Map(stage, augment, seed=sub(2))
    if echo == "after_augmentation":
        stage = Echo(stage, factor, seed=sub(1))
    if echo in ("before_augmentation", "after_augmentation") and buffer_size > 1:
        stage = Shuffle(stage, buffer_size, seed=sub(3))
    if batch_size is None:
        return stage
    stage = Batch(stage, batch_size, drop_last=drop_last, collate=collate)
    if echo == "batch":
        stage = Echo(stage, factor, seed=sub(1))
        if buffer_size > 1:
            stage = Shuffle(stage, buffer_size, seed=sub(3))
    return stage
