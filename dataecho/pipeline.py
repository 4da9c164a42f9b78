"""One obvious way to build the paper's three echoing variants; the one place their order lives."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from ._checks import check_augment, check_positive_int, check_seed
from ._rng import AUGMENT_KEY, ECHO_KEY, SHUFFLE_KEY, derive_seed
from .batch import Batch
from .echo import total_copies
from .factor import Auto, as_factor
from .map import Map
from .shuffle import Shuffle, window_of
from .source import Source
from .stage import Stage
from .timing import Timed, Timing
from .variants import ECHO_AFTER, VARIANTS, Variant, batched_examples, check_variant, echo_stage

__all__ = ["VARIANTS", "Variant", "pipeline"]


def pipeline(
    data: Sequence[Any] | Stage[Any],
    *,
    augment: Callable[..., Any] | None = None,
    echo: Variant | None = "before_augmentation",
    factor: float | Auto | Literal["auto"] | None = None,
    batch_size: int | None = 128,
    buffer_size: int | None = None,
    drop_last: bool = False,
    collate: Callable[[list[Any]], Any] | None = None,
    seed: int = 0,
    epoch: int | None = None,
    shard_index: int | None = None,
    timing: Timing | None = None,
) -> Stage[Any]:
    """Builds ``read -> [echo] -> augment -> [echo] -> shuffle -> batch -> [echo]``.

    The variants of Choi et al. (2019) differ only in where the echo stands
    (:data:`dataecho.variants.ECHO_AFTER`): ``"before_augmentation"`` after the read, so
    copies are augmented anew (the paper's best); ``"after_augmentation"`` after it, so
    copies are identical and save the augmentation too; ``"batch"`` after the batcher,
    so whole batches repeat (a window, if given, then shuffles batches). ``echo=None``,
    or ``factor=1`` with any variant, is the baseline: read, augment, batch.

    Args:
        data: a map-style data set of decoded examples (the expensive read happens
            here), read whole by ``Source(data, seed=seed, epoch=epoch)``: shuffled, one
            epoch; or a stage you built, read as it is: a :class:`dataecho.Source` with
            options of its own (``num_epochs=None``, one of ``num_shards``, ...), or a
            stream such as ``as_stage(iterable)``.
        augment: ``fn(example)`` or ``fn(example, rng)``; None for no augmentation.
        echo: the variant, or None for no echoing.
        factor: echo factor, a real number >= 1 (fractional values allowed), or
            :class:`dataecho.Auto` (``"auto"`` for ``Auto()``): echo only while fresh
            data is late (see :class:`dataecho.AdaptiveExamples`). Default (None): 2.0
            with a variant; with ``echo=None`` only 1 is allowed.
        batch_size: examples per batch, or None for a stream of examples (example
            echoing only), e.g. to let a DataLoader batch them; with ``Auto`` an
            :class:`dataecho.AdaptiveEcho` then reads ahead in a thread.
        buffer_size: items in the shuffle window after the echo stage. Default: ten
            batches of distinct examples for example echoing (``10 * batch_size *
            factor`` items, at most 65,536: :func:`dataecho.shuffle.window_of`); none
            (1) for batch echoing and the baseline (given, the window stands after the
            augmentation). 1 disables it. With ``Auto`` its own buffer spreads copies
            (``Auto(buffer_size=...)``) and this is an error.
        drop_last: drop a final partial batch.
        collate: batch collate function (default: numpy stacking).
        seed: the one seed; each stage derives its own stream from it.
        epoch: the first epoch: with ``shard_index``, a key of the later stages' seeds
            (echo, augmentation, shuffle), and the default ``Source``'s first epoch.
            Default: a ``Source`` passed as ``data`` names it, else 0.
        shard_index: this reader's shard (rank * num_workers + worker), a key of the
            later stages' seeds. Default: as ``epoch``; a data set is read whole (0).
        timing: where to time the read and the augmentation (a
            :class:`dataecho.timing.Timing`), or None not to time them.

    Example:
        >>> import numpy as np
        >>> p = pipeline(np.arange(100.0), echo="batch", factor=2, batch_size=10)
        >>> sum(1 for _ in p), p.stats().fresh_examples
        (20, 100)
    """
    check_augment(augment)
    if batch_size is not None:
        batch_size = check_positive_int(batch_size, "batch_size")
    echo, factor, window = _settle(echo, factor, batch_size, buffer_size)
    stage, keys = _read(data, check_seed(seed), epoch, shard_index)
    return _order(stage, echo, factor, keys, augment=augment, batch_size=batch_size,
                  window=window, drop_last=drop_last, collate=collate, timing=timing)


def echoed_items(size: int, factor: float, *, seed: int, epoch: int, shard: int) -> int:
    """Items :func:`pipeline` hands over for ``size`` examples, echoed one by one.

    For a fixed ``factor`` and an example-level variant, read as ``pipeline(...,
    seed=seed, epoch=epoch, shard_index=shard)`` reads them: exact, from the echo
    stage's own draws, without reading an example.

    Example:
        >>> echoed_items(10, 2.0, seed=0, epoch=0, shard=0)
        20
    """
    if factor == 1:
        return size
    return total_copies(factor, derive_seed(seed, ECHO_KEY, epoch, shard), size)


def _settle(echo: Variant | None, factor: float | Auto | Literal["auto"] | None,
            batch_size: int | None, buffer_size: int | None,
            ) -> tuple[Variant | None, float | Auto, int]:
    """The variant (None at factor 1), the factor and the window, defaults resolved."""
    if echo is not None:
        check_variant(echo, hint="pass echo='before_augmentation' for the paper's best "
                      "variant, or None for no echoing")
    if echo is None and factor is not None and factor != 1:
        raise ValueError(
            f"factor does nothing with echo=None (no echoing: the baseline), got "
            f"factor={factor!r}; drop factor for the baseline, or pass a variant such as "
            "echo='before_augmentation' to echo")
    checked = as_factor((1.0 if echo is None else 2.0) if factor is None else factor)
    if checked == 1.0:  # no echo stage: the baseline, whichever variant was named
        echo = None
    if isinstance(checked, Auto) and buffer_size is not None:
        raise ValueError(
            f"buffer_size is the post-echo shuffle of a fixed factor; with {checked!r} the "
            f"adaptive stage spreads copies by its own buffer, got buffer_size="
            f"{buffer_size!r}; pass factor=dataecho.Auto(buffer_size={buffer_size!r}) "
            "instead")
    if batch_size is None and echo == "batch":
        raise ValueError(
            "batch_size must be an int >= 1 for echo='batch' (batch echoing repeats "
            "batches), got None; pass batch_size or use an example-level variant")
    if buffer_size is None:  # ten batches of distinct examples, so e copies each; none for
        # the baseline, for batches, or for Auto (its own buffer spreads copies)
        buffer_size = (window_of(10 * (batch_size or 100), checked) if echo is not None and
                       ECHO_AFTER[echo] != "batch" and not isinstance(checked, Auto) else 1)
    return echo, checked, check_positive_int(buffer_size, "buffer_size")


def _read(data: Sequence[Any] | Stage[Any], seed: int, epoch: int | None,
          shard_index: int | None) -> tuple[Stage[Any], tuple[int, int, int]]:
    """The read stage, and the seed, epoch and shard that key the later stages' seeds."""
    if isinstance(data, Source):  # one the caller configured names where it reads
        epoch = data.first_epoch if epoch is None else epoch
        shard_index = data.shard_index if shard_index is None else shard_index
    epoch = check_positive_int(0 if epoch is None else epoch, "epoch", minimum=0)
    shard = check_positive_int(0 if shard_index is None else shard_index, "shard_index",
                               minimum=0)
    if isinstance(data, Stage):
        return data, (seed, epoch, shard)
    if shard:
        raise ValueError(
            f"a map-style data set is read whole, so shard_index must be 0, got {shard}; "
            f"to read one shard pass data=dataecho.Source(data, shard_index={shard}, "
            "num_shards=...) (shard_index then keys the later stages' seeds)")
    return Source(data, seed=seed, epoch=epoch), (seed, epoch, shard)


def _order(stage: Stage[Any], echo: Variant | None, factor: float | Auto,
           keys: tuple[int, int, int], *, augment: Callable[..., Any] | None,
           batch_size: int | None, window: int, drop_last: bool,
           collate: Callable[[list[Any]], Any] | None, timing: Timing | None) -> Stage[Any]:
    """``read -> [echo] -> augment -> [echo] -> shuffle -> batch -> [echo -> shuffle]``.

    The one place the variants' order lives, for fixed factors and ``Auto`` alike;
    :data:`ECHO_AFTER` says which step each variant's echo follows. ``Auto`` has no
    window (``window`` 1: its own buffer spreads copies), and its echo of examples, if
    batched here, is one stage with the batcher (:class:`dataecho.AdaptiveExamples`),
    which augments each copy anew when it stands before the augmentation. ``timing``
    times the read stage and the augmentation (:mod:`dataecho.timing`).
    """
    at = None if echo is None else ECHO_AFTER[echo]
    auto = isinstance(factor, Auto)
    joint = auto and batch_size is not None and at != "batch"
    seed, epoch, shard = keys
    root = derive_seed(seed, ECHO_KEY, epoch, shard)

    def sub(tag: int) -> int:  # a stream per stage, first epoch and shard (Auto's have
        # always hung off its echo's)
        return derive_seed(root, tag) if auto else derive_seed(seed, tag, epoch, shard)

    def echoed(stage: Stage[Any], step: str) -> Stage[Any]:  # the echo, if after `step`
        if at != step:
            return stage
        fresh = step == "read"  # copies made before the augmentation are augmented anew
        if joint:
            return batched_examples(stage, factor, batch_size,  # type: ignore[arg-type]
                                    seed=sub(ECHO_KEY), augmented=fresh, drop_last=drop_last,
                                    augment=augment if fresh else None, collate=collate)
        return echo_stage(stage, factor, seed=sub(ECHO_KEY), augmented=fresh,
                          level="items" if step == "batch" else "examples")

    read = None if timing is None else Timed(stage, timing.read)
    stage = echoed(stage if read is None else read, "read")
    if augment is not None and not (joint and at == "read"):
        stage = Map(stage, augment, seed=sub(AUGMENT_KEY))
        stage = stage if timing is None else Timed(stage, timing.augment, inner=read)
    stage = echoed(stage, "augment")
    if window > 1 and at != "batch":
        stage = Shuffle(stage, window, seed=sub(SHUFFLE_KEY))
    if batch_size is None or joint:
        return stage
    stage = echoed(Batch(stage, batch_size, drop_last=drop_last, collate=collate), "batch")
    return Shuffle(stage, window, seed=sub(SHUFFLE_KEY)) if window > 1 and at == "batch" else stage
