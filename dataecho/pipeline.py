"""One obvious way to build the paper's three echoing variants."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from . import _rng
from ._checks import check_augment, check_positive_int, check_seed
from ._rng import derive_seed
from .batch import Batch
from .factor import Auto, as_factor
from .map import Map
from .shuffle import Shuffle, window_of
from .source import Source
from .stage import Stage
from .variants import EXAMPLE_LEVEL, VARIANTS, Variant, batched_examples, check_variant, echo_stage

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
    - ``None``: the baseline, Source -> Map(augment) -> Batch; with ``echo=None`` a
      ``factor`` other than 1 is an error. ``factor=1`` with a variant is the same
      baseline, window included.

    Args:
        data: map-style data set of decoded examples (the expensive read happens here),
            read by a ``Source``; or an already built source stage (a stream, e.g.
            ``as_stage(iterable)``), read as it is: then ``shuffle``, ``num_epochs`` and
            ``drop_remainder``, which configure the ``Source``, keep their defaults, and
            ``epoch``/``shard_index`` only key the later stages' seeds.
        augment: ``fn(example)`` or ``fn(example, rng)``; None for no augmentation.
        echo: the variant, or None for no echoing.
        factor: echo factor, a real number >= 1 (fractional values allowed), or
            :class:`dataecho.Auto` (``"auto"`` for ``Auto()``): echo only while fresh
            data is late (a prefetch thread reads upstream; see
            :class:`dataecho.AdaptiveExamples`). Default (None): 2.0 with a variant, 1
            (no echoing) with ``echo=None``.
        batch_size: examples per batch, or None for a stream of examples (example
            echoing only), e.g. to let a DataLoader batch them. With ``Auto`` and None,
            an :class:`dataecho.AdaptiveEcho` of examples reads ahead in a thread and
            echoes a recent example only while the next fresh one is not ready; a
            ``Map(augment)`` after it augments every copy anew.
        buffer_size: items in the shuffle window after the echo stage. Default: ten
            batches of distinct examples for example echoing (``10 * batch_size *
            factor`` items, rounded up, at most 65,536: :func:`dataecho.shuffle.window_of`);
            none (1) for batch echoing, where each item is a whole batch, and for the
            baseline (``echo=None`` or factor 1: given, the window stands after the
            augmentation). 1
            disables the post-echo shuffle. With ``Auto`` the adaptive stage's own
            buffer spreads copies (``Auto(buffer_size=...)``) and this is an error.
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
    if echo is not None:
        check_variant(echo, hint="pass echo='before_augmentation' for the paper's best "
                      "variant, or None for no echoing")
    check_augment(augment)
    if echo is None and factor is not None and factor != 1:
        raise ValueError(
            f"factor does nothing with echo=None (no echoing: the baseline), got "
            f"factor={factor!r}; drop factor for the baseline, or pass a variant such as "
            "echo='before_augmentation' to echo")
    if factor is None:
        factor = 1.0 if echo is None else 2.0
    factor = as_factor(factor)
    if factor == 1.0:  # no echo stage: the baseline, whichever variant was named
        echo = None
    auto = isinstance(factor, Auto)
    if auto and buffer_size is not None:
        raise ValueError(
            f"buffer_size is the post-echo shuffle of a fixed factor; with {factor!r} the "
            f"adaptive stage spreads copies by its own buffer, got buffer_size="
            f"{buffer_size!r}; pass factor=dataecho.Auto(buffer_size={buffer_size!r}) "
            "instead")
    if batch_size is None and echo == "batch":
        raise ValueError(
            "batch_size must be an int >= 1 for echo='batch' (batch echoing repeats "
            "batches), got None; pass batch_size or use an example-level variant"
        )
    if batch_size is not None:
        batch_size = check_positive_int(batch_size, "batch_size")
    seed = check_seed(seed)
    # The baseline (echo=None) shuffles only when asked: a window after augmentation,
    # as the echo variants have after their echo stage.
    baseline_window = echo is None and buffer_size is not None
    if buffer_size is None:
        example_level = echo in EXAMPLE_LEVEL
        # Ten batches of distinct examples, so e copies each: window_of's reason.
        copies = 1.0 if isinstance(factor, Auto) else factor
        buffer_size = window_of(10 * (batch_size or 100), copies) if example_level else 1
    buffer_size = check_positive_int(buffer_size, "buffer_size")

    def sub(tag: int) -> int:  # distinct streams per stage, first epoch and shard
        return derive_seed(seed, tag, epoch, shard_index)

    stage: Stage[Any]
    if isinstance(data, Stage):
        _check_source_defaults(shuffle, num_epochs, drop_remainder)
        check_positive_int(epoch, "epoch", minimum=0)
        check_positive_int(shard_index, "shard_index", minimum=0)
        stage = data
    else:
        stage = Source(data, shuffle=shuffle, seed=seed, num_epochs=num_epochs, epoch=epoch,
                       shard_index=shard_index, num_shards=num_shards,
                       drop_remainder=drop_remainder)
    if isinstance(factor, Auto):  # with a variant: echo=None refused it above
        return _adaptive(stage, factor, echo, batch_size,  # type: ignore[arg-type]
                         augment, drop_last, collate, sub(_rng.ECHO_KEY))
    before = echo == "before_augmentation"
    if before:
        stage = echo_stage(stage, factor, seed=sub(_rng.ECHO_KEY), level="examples")
    if augment is not None:
        stage = Map(stage, augment, seed=sub(_rng.AUGMENT_KEY))
    if echo == "after_augmentation":
        stage = echo_stage(stage, factor, seed=sub(_rng.ECHO_KEY), level="examples")
    if (echo in EXAMPLE_LEVEL or baseline_window) and buffer_size > 1:
        stage = Shuffle(stage, buffer_size, seed=sub(_rng.SHUFFLE_KEY))
    if batch_size is None:
        return stage
    stage = Batch(stage, batch_size, drop_last=drop_last, collate=collate)
    if echo == "batch":
        stage = echo_stage(stage, factor, seed=sub(_rng.ECHO_KEY), level="items")
        if buffer_size > 1:
            stage = Shuffle(stage, buffer_size, seed=sub(_rng.SHUFFLE_KEY))
    return stage


def _adaptive(source: Stage[Any], factor: Auto, echo: Variant, batch_size: int | None,
              augment: Callable[..., Any] | None, drop_last: bool,
              collate: Callable[[list[Any]], Any] | None, seed: int) -> Stage[Any]:
    """The tail of a pipeline with ``factor=Auto(...)``.

    Before augmentation every copy is augmented anew (the augmentation follows the
    echo); after it, and for batches, the copies are identical. Without ``batch_size``
    (examples batched downstream, by a DataLoader) the echo repeats single examples.
    """
    echo_seed, augment_seed = derive_seed(seed, _rng.ECHO_KEY), derive_seed(seed, _rng.AUGMENT_KEY)
    before = echo == "before_augmentation"
    stage: Stage[Any] = source
    if augment is not None and not before:
        stage = Map(stage, augment, seed=augment_seed)
    if echo == "batch":
        stage = Batch(stage, batch_size, drop_last=drop_last, collate=collate)  # type: ignore[arg-type]
        return echo_stage(stage, factor, seed=echo_seed, level="items")
    if batch_size is not None:
        return batched_examples(stage, factor, batch_size, seed=echo_seed, augmented=before,
                                augment=augment if before else None, drop_last=drop_last,
                                collate=collate)
    stage = echo_stage(stage, factor, seed=echo_seed, level="examples", augmented=before)
    if augment is not None and before:
        stage = Map(stage, augment, seed=augment_seed)
    return stage


def _check_source_defaults(shuffle: object, num_epochs: object, drop_remainder: object) -> None:
    given = {k: v for k, v, default in (("shuffle", shuffle, True),
                                        ("num_epochs", num_epochs, 1),
                                        ("drop_remainder", drop_remainder, False))
             if v != default}
    if given:
        names = ", ".join(f"{k}={v!r}" for k, v in given.items())
        raise ValueError(
            f"{names} configure{'s' if len(given) == 1 else ''} the Source that reads a "
            f"map-style data set, and data is already a stage; got {names}; configure the "
            "stage you pass (its order, epochs and length are its own), or pass the data set")
