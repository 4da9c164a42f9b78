"""A group of ``window // 2`` fresh batches in the ring, and the order of its copies."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._rng import DEVICE_ORDER, rng
from ..echo import copies_at
from ..stage import State
from .ring import Shared


class Group:
    """The fresh batches of one group: their slots, ready events and order of copies."""

    def __init__(self, index: int, before: State, examples_before: int) -> None:
        self.index, self.before, self.examples_before = index, before, examples_before
        self.batches: list[tuple[int, int]] = []  # (slot, examples)
        self.ready: list[Any] = []  # the copies' events
        self.carrier: tuple[list[Any], Any] | None = None  # first batch: leaves, batch
        self.complete = False  # all its batches read (a group's worth, or the last ones)
        self.waited = False  # gathers wait for its copies already
        self.order: Order | None = None  # the order of the current pass's copies

    @property
    def examples(self) -> int:
        return sum(n for _, n in self.batches)


class Order:
    """The order of one pass's copies of a group, and the fresh counts along it.

    Drawn on the host, keyed by (seed, epoch, group, pass), so that the fresh counts are
    exact (an example counts as fresh where its first copy goes out) and a run on the
    CPU hands out the same examples as one on CUDA; in ``"examples"`` mode the index is
    copied to the device once per group (8 bytes a copy).

    Attributes:
        index: per copy, ``slot * rows + row`` on the device (examples), or the batch's
            position in the group on the host (batches).
        total: copies in the pass.
        fresh_examples, fresh_batches: fresh counts of the first ``t`` copies, at ``t``.
    """

    def __init__(self, pass_: int, index: Any, fresh_examples: np.ndarray,
                 fresh_batches: np.ndarray) -> None:
        self.pass_, self.index, self.total = pass_, index, len(fresh_examples) - 1
        self.fresh_examples, self.fresh_batches = fresh_examples, fresh_batches

    @classmethod
    def of(cls, group: Group, shared: Shared, epoch: int, passes: int,
           draw_seed: int | None) -> Order:
        """The order of pass ``passes`` over ``group``; ``draw_seed``: the fractional
        draws' seed for the epoch, or None for Auto (each item once a pass)."""
        sizes = np.array([n for _, n in group.batches])
        batches = shared.mode == "batches"
        items = len(sizes) if batches else int(sizes.sum())
        if draw_seed is None:
            copies = np.ones(items, np.int64)
        else:
            first = group.index * shared.group if batches else group.examples_before
            copies = copies_at(shared.factor, draw_seed,  # type: ignore[arg-type]
                               np.arange(first, first + items))
        units = np.repeat(np.arange(items), copies)
        units = units[rng(shared.seed, DEVICE_ORDER, epoch, group.index,
                          passes).permutation(len(units))]
        # Where each item's first copy goes out; with it its examples (or batch) count.
        _, first_at = np.unique(units, return_index=True)
        gain_examples, gain_batches = np.zeros((2, len(units)), np.int64)
        if passes == 0:
            if batches:
                gain_examples[first_at] = sizes
                gain_batches[first_at] = 1
            else:
                gain_examples[first_at] = 1
                starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
                gain_batches[np.minimum.reduceat(first_at, starts)] = 1  # for no count yet
        fresh_examples = np.concatenate([[0], np.cumsum(gain_examples)])
        fresh_batches = np.concatenate([[0], np.cumsum(gain_batches)])
        if batches:
            return cls(passes, units, fresh_examples, fresh_batches)
        rows = shared.ring.rows  # type: ignore[union-attr]
        base = np.concatenate([slot * rows + np.arange(n) for slot, n in group.batches])
        index = torch.from_numpy(base[units])
        if shared.device.type == "cuda":
            index = index.pin_memory().to(shared.device, non_blocking=True)
        return cls(passes, index.to(shared.device), fresh_examples, fresh_batches)
