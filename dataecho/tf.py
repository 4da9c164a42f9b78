"""Echoing inside a tf.data graph, the paper's own system.

The paper writes its echo stage as
``dataset.flat_map(lambda t: tf.data.Dataset.from_tensors(t).repeat(e))`` with a
shuffle buffer after it. :func:`echo` is that stage as a ``dataset.apply``
transformation, with fractional factors, the post-echo shuffle and exact counts, all
inside the graph so that tf.data's own iterator checkpoint
(``tf.train.Checkpoint(iterator=...)``) resumes it exactly.

Where it stands picks the paper's variant, as with :class:`dataecho.Echo`: before the
augmentation ``map`` (copies augmented independently), after it (identical copies), or
after ``batch()`` (batch echoing).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ._extras import needs

try:
    import tensorflow as tf
except ModuleNotFoundError as error:
    raise needs(error, "dataecho.tf", "tensorflow", "tf", "TensorFlow") from None

from . import _rng
from ._checks import check_bool, check_positive_int, check_seed, check_size
from .factor import fixed_factor
from .stats import EchoStats

_ADAPTIVE = ("dataecho.AdaptiveEcho(dataset.as_numpy_iterator(), ...) in the training "
             "loop (the tf.data graph cannot see when its consumer waits)")


def echo(factor: float, *, seed: int = 0, size: Callable[..., Any] | None = None,
         buffer_size: int | None = None, reshuffle_each_iteration: bool = True) -> Echo:
    """A ``dataset.apply`` transformation that yields every element ``factor`` times.

    Args:
        factor: copies per element, a real number >= 1. A fractional factor gives
            ``floor(factor)`` copies plus one more with probability
            ``factor - floor(factor)``, drawn per element by
            ``tf.random.stateless_uniform`` keyed by ``(seed, element index)``: reruns
            and restores draw the same copies. The draws are TensorFlow's, not numpy's,
            so they differ from :class:`dataecho.Echo`'s for the same seed. The index
            restarts at 0 each time the dataset is iterated afresh (a Keras epoch over
            a finite dataset): put ``.repeat()`` before the echo, or pass a seed per
            epoch, for the extra copies to fall on other elements each epoch.
        seed: seed of the fractional draws and of the shuffle, an int in ``[0, 2**63)``.
        size: examples in an element, for the counts: a function of the element,
            called as tf.data calls a ``map`` function (a tuple's parts as
            arguments), returning a scalar tensor. None counts 1 per element; for
            batch echoing pass e.g. ``size=lambda x, y: tf.shape(x)[0]``.
        buffer_size: elements in a shuffle buffer after the echo, which spreads the
            copies apart (the paper found more shuffling helps); None for no shuffle.
            Without it the copies come out adjacent and, for example echoing, land in
            the same batch.
        reshuffle_each_iteration: whether the shuffle's order differs each time the
            dataset is iterated (tf.data's own parameter).

    Returns:
        An :class:`Echo` to pass to ``dataset.apply``; it also holds the counts.

    Example:
        >>> import tensorflow as tf
        >>> stage = echo(2)
        >>> ds = tf.data.Dataset.range(3).apply(stage)
        >>> [int(x) for x in ds]
        [0, 0, 1, 1, 2, 2]
        >>> stage.stats().fresh_examples, stage.stats().emitted_examples
        (3, 6)
    """
    return Echo(factor, seed=seed, size=size, buffer_size=buffer_size,
                reshuffle_each_iteration=reshuffle_each_iteration)


class Echo(tf.Module):  # type: ignore[misc]  # tensorflow ships no type information
    """The echo transformation :func:`echo` returns, with its counts.

    The counts belong to the pass over the echoed dataset in progress: they start at 0
    each time it is iterated afresh (each Keras epoch over a finite dataset). They are
    running totals kept inside the graph (``scan`` state, so tf.data's iterator
    checkpoint saves them with the position they belong to) and copied to the
    variable :attr:`counts` as the echo stage emits, so they can be read at any time
    during training (:meth:`stats`, a Keras callback). Like
    :class:`dataecho.EchoStats`, they count what the echo stage emitted: mid-pass that
    includes elements waiting in the shuffle buffer or in a prefetch buffer after it.

    Resume with tf.data's own checkpoint, ``tf.train.Checkpoint(iterator=it,
    echo=stage)``: restored at any position, mid-echo included, the iterator yields
    exactly the elements that remained, and the counts continue from the restored
    position (exact from the first element the echo stage emits after the restore;
    ``echo=stage`` restores the variable for reads before that). tf.data's
    checkpoint holds elements, unlike dataecho's own ``state_dict``: the remaining
    copies of the element being echoed, every element in the shuffle buffer, and
    those in any prefetch buffer.

    The counter is a variable, so the dataset this returns sets tf.data's
    ``experimental_external_state_policy`` to ``IGNORE``: otherwise tf.data refuses to
    checkpoint an iterator whose functions write a variable. That option covers the
    whole pipeline, so tf.data no longer refuses other stateful functions either:
    augment with ``tf.random.stateless_*`` ops (keyed by the element, e.g. through
    ``Dataset.enumerate``), never ``tf.random.uniform``, for a restore to be exact.

    Example:
        >>> import tensorflow as tf
        >>> stage = echo(2, size=lambda x: tf.shape(x)[0])
        >>> ds = tf.data.Dataset.range(5).batch(2).apply(stage)
        >>> [x.numpy().tolist() for x in ds]
        [[0, 1], [0, 1], [2, 3], [2, 3], [4], [4]]
        >>> print(stage.stats())
        fresh 5 examples, emitted 10 (factor 2.000)
    """

    def __init__(self, factor: float, *, seed: int = 0,
                 size: Callable[..., Any] | None = None, buffer_size: int | None = None,
                 reshuffle_each_iteration: bool = True) -> None:
        super().__init__(name="echo")
        self.factor = fixed_factor(factor, adaptive=_ADAPTIVE)
        self.seed = check_seed(seed)
        self.size = check_size(size)
        self.buffer_size = (None if buffer_size is None
                            else check_positive_int(buffer_size, "buffer_size"))
        self.reshuffle_each_iteration = check_bool(reshuffle_each_iteration,
                                                   "reshuffle_each_iteration")
        self._base = math.floor(self.factor)
        self._frac = self.factor - self._base
        #: (fresh_examples, emitted_examples, fresh_items, emitted_items) after the
        #: latest element the echo stage emitted; None when the stage was built inside a
        #: function being traced (a ``tf.function``, a ``flat_map``'s), which cannot
        #: make a variable for each trace.
        self.counts = None if tf.inside_function() else tf.Variable(
            tf.zeros([4], tf.int64), trainable=False, name="counts")

    def __call__(self, dataset: Any) -> Any:
        """Returns ``dataset`` echoed (and shuffled, with ``buffer_size``)."""
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(
                f"dataset must be a tf.data.Dataset, got {type(dataset).__name__}; build "
                "one with tf.data.Dataset.from_tensor_slices(...) and call "
                "dataset.apply(dataecho.tf.echo(...))")
        out = (dataset.enumerate().map(self._copies)
               .scan(tf.zeros([4], tf.int64), self._repeat).unbatch().map(self._publish))
        if not self._frac:
            # unbatch forgets the length; Keras uses it for its progress bar. A cond, not
            # an if: in a graph (tf.function, interleave) the length is a tensor.
            length = dataset.cardinality()
            out = tf.cond(length >= 0, lambda: out.apply(
                tf.data.experimental.assert_cardinality(length * self._base)), lambda: out)
        if self.buffer_size is not None:
            out = out.shuffle(self.buffer_size, seed=_rng.derive_seed(self.seed, _rng.SHUFFLE),
                              reshuffle_each_iteration=self.reshuffle_each_iteration)
        options = tf.data.Options()
        options.experimental_external_state_policy = (
            tf.data.experimental.ExternalStatePolicy.IGNORE)
        return out.with_options(options)

    def _copies(self, index: Any, element: Any) -> tuple[Any, Any]:
        copies = tf.constant(self._base, tf.int64)
        if self._frac:
            key = tf.random.experimental.stateless_fold_in(
                tf.constant([self.seed, _rng.ECHO], tf.int64), index)
            draw = tf.random.stateless_uniform([], seed=key, dtype=tf.float64)
            copies += tf.cast(draw < self._frac, tf.int64)
        return copies, element

    def _repeat(self, totals: Any, read: tuple[Any, Any]) -> tuple[Any, Any]:
        # The running totals are scan state, so tf.data's iterator checkpoint holds them
        # with the position they belong to; each copy carries the totals after it.
        copies, element = read
        size = tf.constant(1, tf.int64) if self.size is None else tf.cast(
            self.size(*element) if isinstance(element, tuple) else self.size(element),
            tf.int64)
        emitted = tf.range(1, copies + 1, dtype=tf.int64)
        rows = tf.stack([tf.fill([copies], totals[0] + size), totals[1] + emitted * size,
                         tf.fill([copies], totals[2] + 1), totals[3] + emitted], axis=1)
        stacked = tf.nest.map_structure(
            lambda t: tf.repeat(tf.expand_dims(t, 0), copies, axis=0), element)
        return totals + tf.stack([size, copies * size, 1, copies]), (rows, stacked)

    def _publish(self, totals: Any, element: Any) -> Any:
        # One assign of all four counts, so a read mid-training sees a consistent set.
        if self.counts is not None:
            self.counts.assign(totals)
        return element

    def stats(self) -> EchoStats:
        """The counts now, as exact integers.

        ``batches`` is the number of elements emitted when ``size`` is given (batch
        echoing), else None.

        Example:
            >>> import tensorflow as tf
            >>> stage = echo(1.5, seed=0)
            >>> n = int(tf.data.Dataset.range(1000).apply(stage).reduce(0, lambda s, _: s + 1))
            >>> stats = stage.stats()
            >>> stats.fresh_examples, stats.emitted_examples == n, 1400 < n < 1600
            (1000, True, True)
        """
        if self.counts is None:
            raise RuntimeError(
                "this echo stage was built inside a function being traced (a tf.function, "
                "a flat_map's or interleave's function) and keeps no counts; build it "
                "outside, stage = dataecho.tf.echo(...), and call dataset.apply(stage) inside")
        fresh, emitted, fresh_items, emitted_items = (int(n) for n in self.counts.numpy())
        return EchoStats(fresh, emitted, fresh_items, emitted_items,
                         emitted_items if self.size is not None else None)

    def __repr__(self) -> str:
        args = [f"factor={self.factor}", f"seed={self.seed}"]
        if self.size is not None:
            args.append(f"size={getattr(self.size, '__name__', self.size)!s}")
        if self.buffer_size is not None:
            args.append(f"buffer_size={self.buffer_size}")
            args.append(f"reshuffle_each_iteration={self.reshuffle_each_iteration}")
        return f"echo({', '.join(args)})"
