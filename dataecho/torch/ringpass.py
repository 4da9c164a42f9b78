"""One epoch of :class:`~dataecho.torch.DeviceEcho`: fresh batches in groups, copies in steps.

Fresh batch ``k`` of an epoch lands in slot ``k % window``. Batches are mixed in groups
of ``G = window // 2``: while one group's copies are handed out, the next group's
batches land in the other half of the ring, so copies overlap training. A group's copies
(each example ``factor`` times, or each batch) are put in an order drawn on the host,
keyed by (seed, epoch, group, pass), whose index goes to the device once per group;
steps take them ``batch size`` at a time, the last step of a group finishing with the
next group's first copies (one batch size for every step but the epoch's last). With
``Auto`` a group is passed over once per use, each example once a pass, and another pass
is made only while the next group has not landed.

A checkpoint holds the group, the pass, the copies of it already handed out, the
counters, and the loader's state before the group's first batch: a restore re-reads that
group (at most ``window // 2`` batches) and draws the same order again.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .._checks import state_int, state_mapping
from .._rng import AUGMENT_KEY, DEVICE_ORDER, derive_seed, rng
from ..adaptive import Prefetcher, alone, reader
from ..echo import copies_at
from ..factor import Auto
from ..map import takes_rng
from ..sizes import batch_size_of
from ..stage import Stage, State
from ..stats import EchoStats
from .augment import forked
from .ordering import Ordering
from .ring import Ring

_MOST = 2**63 - 1


@dataclass
class Shared:
    """What every epoch's pass shares: the parameters, the ring and its free events."""

    factor: float | Auto
    mode: str
    window: int
    seed: int
    device: torch.device
    augment: Callable[..., Any] | None
    max_bytes: int | None
    ordering: Ordering
    ring: Ring | None = None
    free: dict[int, Any] = field(default_factory=dict)  # slot -> event after its last gather
    warned: bool = False  # the loader does not pin memory: said once

    @property
    def group(self) -> int:
        """Batches mixed together: half the window, so the other half can land."""
        return max(1, self.window // 2)

    def ring_for(self, batch: Any) -> Ring:
        if self.ring is None:
            self.ring = Ring(batch, self.window, self.device, self.max_bytes)
        return self.ring


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


class RingPass(Stage[Any]):
    """One epoch's reading into the ring and gathering out of it (see the module)."""

    upstream: Stage[Any]

    def __init__(self, upstream: Stage[Any], shared: Shared, epoch: int) -> None:
        self.upstream, self.shared, self.epoch = upstream, shared, epoch
        self.auto = isinstance(shared.factor, Auto)
        self.cap = shared.factor.cap(augmented=True) if isinstance(shared.factor, Auto) else 1
        self.agree = (shared.factor.agree if isinstance(shared.factor, Auto) else None) or alone
        self.draw_seed = derive_seed(shared.seed, epoch)
        self.two_args = shared.augment is not None and takes_rng(shared.augment)
        self.groups: dict[int, Group] = {}
        self.g = self.passes = self.offset = self.steps = 0
        self.fresh = self.fresh_ex = self.emitted_ex = 0
        self.read = self.examples_read = 0  # batches and examples read this epoch
        self.feed: Prefetcher[Any] | None = None
        self.last_state: State | None = None  # Auto: the loader's state after the last pull

    # Reading: the loader, into the ring.

    def _state_now(self) -> State:
        if self.auto and self.feed is not None:
            return self.last_state  # type: ignore[return-value]
        return self.upstream.state_dict()

    def _pull(self, block: bool) -> Any:
        """The next host batch; None when none is ready and ``block`` is False."""
        if not self.auto:
            return next(self.upstream)
        if self.feed is None:
            self.last_state = self.upstream.state_dict()
            self.feed = Prefetcher(reader(self.upstream, batch_size_of),
                                   depth=self.shared.group, timeout=None)
        if not block and not self.feed.ready() and not self.feed.finished():
            return None
        batch, self.last_state, _ = self.feed.get()
        return batch

    def _group(self, index: int) -> Group:
        group = self.groups.get(index)
        if group is None:  # made once the groups before it are read through
            group = self.groups[index] = Group(index, self._state_now(), self.examples_read)
        return group

    def _read(self, group: Group, block: bool = True) -> bool:
        """Reads the group's next batch into its slot; False if none was ready or left."""
        if group.complete:
            return False
        try:
            batch = self._pull(block)
        except StopIteration:
            group.complete = True
            return False
        if batch is None:
            return False
        shared = self.shared
        ring = shared.ring_for(batch)
        flat, n = ring.check(batch)
        self._warn_unpinned(flat, ring)
        slot = self.read % shared.window
        resident = any(flat[i].device.type != "cpu" for i in ring.where)
        group.ready.append(shared.ordering.copy(lambda: ring.put(slot, flat, n),
                                                shared.free.pop(slot, None), resident))
        group.batches.append((slot, n))
        if group.carrier is None:
            group.carrier = (flat, batch)
        self.read, self.examples_read = self.read + 1, self.examples_read + n
        group.complete = len(group.batches) == shared.group
        return True

    def _warn_unpinned(self, flat: list[Any], ring: Ring) -> None:
        if self.shared.warned or self.shared.device.type != "cuda":
            return
        if any(flat[i].device.type == "cpu" and not flat[i].is_pinned() for i in ring.where):
            self.shared.warned = True
            warnings.warn(
                "DeviceEcho's loader yields batches in pageable memory, so each copy to the "
                "device waits for the host instead of overlapping training; pass "
                "DataLoader(..., pin_memory=True)", UserWarning, stacklevel=4)

    def _filled(self, index: int) -> Group:
        group = self._group(index)
        while self._read(group):
            pass
        return group

    # The order of copies.

    def _units(self, group: Group) -> Order:
        if group.order is None or group.order.pass_ != self.passes:
            group.order = Order.of(self, group)
        return group.order

    # Steps.

    def __next__(self) -> Any:
        self._filled(self.g)  # the first batch of all makes the ring
        ring = self.shared.ring
        if ring is None:  # the loader yielded nothing, ever
            raise StopIteration
        per_step = 1 if self.shared.mode == "batches" else ring.rows
        parts: list[tuple[Group, Any]] = []
        finished: list[Group] = []
        need = per_step
        while need:
            group = self._filled(self.g)
            if not group.batches:
                break
            order = self._units(group)
            if self.offset == order.total:  # Auto: the pass is over
                if not self._decide(group):
                    break
                continue
            start = self.offset
            take = min(need, order.total - start)
            parts.append((group, order.index[start:start + take]))
            self.fresh_ex += int(order.fresh_examples[start + take] - order.fresh_examples[start])
            self.fresh += int(order.fresh_batches[start + take] - order.fresh_batches[start])
            self.offset += take
            need -= take
            if self.offset == order.total and not self.auto:
                finished.append(group)
                self._advance()
            if self.auto:
                break  # a pass's steps never span two groups
        if not parts:
            raise StopIteration
        out = self._emit(parts, finished)
        self._read_ahead()
        return out

    def _advance(self) -> None:
        self.groups.pop(self.g, None)
        self.g, self.passes, self.offset = self.g + 1, 0, 0

    def _decide(self, group: Group) -> bool:
        """At the end of an Auto pass: another pass (an echo) or the next group; False: the
        epoch is over. Every rank takes the agreed decision."""
        nxt, order, blocked = self._group(self.g + 1), self.shared.ordering, False
        while True:
            while self._read(nxt, block=False):
                pass
            landed = nxt.complete and (blocked or all(order.done(e) for e in nxt.ready))
            ended = nxt.complete and not nxt.batches
            ready, capacity, over = self.agree(int(landed), int(self.passes + 1 < self.cap),
                                               ended)
            if over:
                self._free(group)
                return False
            if ready:
                self._free(group)
                self._advance()
                return True
            if capacity:
                self.passes, self.offset = self.passes + 1, 0
                return True
            self._filled(nxt.index)  # nothing to echo: wait for the group, then vote again
            blocked = True

    def _free(self, group: Group) -> None:
        event = self.shared.ordering.free()
        for slot, _ in group.batches:
            self.shared.free[slot] = event

    def _emit(self, parts: list[tuple[Group, Any]], finished: list[Group]) -> Any:
        shared = self.shared
        ring = shared.ring
        assert ring is not None
        for group, _ in parts:
            if not group.waited:
                for ready in group.ready:
                    shared.ordering.wait(ready)
                group.waited = True
        if shared.mode == "batches":
            group, unit = parts[0]
            slot, n = group.batches[int(unit[0])]
            index = torch.arange(n, device=shared.device) + slot * ring.rows
        else:
            index = torch.cat([units for _, units in parts]) if len(parts) > 1 else parts[0][1]
        gathered = ring.gather(index)
        for group in finished:
            self._free(group)
        flat, template = parts[0][0].carrier  # type: ignore[misc]
        batch = ring.batch(flat, template, gathered)
        step, self.steps = self.steps, self.steps + 1
        self.emitted_ex += index.numel()
        return self._augment(batch, step)

    def _augment(self, batch: Any, step: int) -> Any:
        shared = self.shared
        if shared.augment is None:
            return batch
        seed = derive_seed(shared.seed, self.epoch, AUGMENT_KEY, step)
        if self.two_args:
            return shared.augment(batch, torch.Generator(device=shared.device).manual_seed(seed))
        return forked(shared.augment, batch, seed, shared.device)

    def _read_ahead(self) -> None:
        """Reads a batch of the current or next group, whose slots are free, so the copy
        overlaps the steps that follow (Auto: every ready one). The next group's batches
        are read evenly over the current group's steps, one per ``factor`` steps, as a
        loader produces them: read at once, they would leave its workers idle later."""
        current = self.groups.get(self.g)
        for index in (self.g, self.g + 1):
            group = self._group(index)
            if group.complete:
                continue
            if self.auto:
                while self._read(group, block=False):
                    pass
                return
            order = current.order if current is not None else None
            if (index > self.g and order is not None
                    and len(group.batches) * order.total > self.shared.group * self.offset):
                return  # not due yet
            self._read(group)
            return

    # Counts and checkpoints.

    def stats(self) -> EchoStats:
        # Items are what is echoed: examples, or batches (whose every copy is a step).
        if self.shared.mode == "batches":
            return EchoStats(self.fresh_ex, self.emitted_ex, self.fresh, self.steps, self.steps)
        return EchoStats(self.fresh_ex, self.emitted_ex, self.fresh_ex, self.emitted_ex,
                         self.steps)

    def close(self) -> None:
        # Gathers of a group left before its end may still run: no later copy overwrites
        # their slots before they have.
        if self.shared.ring is not None and self.groups:
            event = self.shared.ordering.free()
            for group in self.groups.values():
                for slot, _ in group.batches:
                    self.shared.free[slot] = event
        self.groups.clear()
        if self.feed is not None:
            self.feed.close()
        super().close()

    def _config(self) -> dict[str, Any]:
        factor = self.shared.factor
        return {"factor": repr(factor) if isinstance(factor, Auto) else factor,
                "mode": self.shared.mode, "window": self.shared.window,
                "seed": self.shared.seed}

    def _snapshot(self) -> State:
        group = self.groups.get(self.g)
        before, examples = ((group.before, group.examples_before) if group is not None
                            else (self._state_now(), self.examples_read))
        return {"upstream": before, "group": self.g, "pass": self.passes,
                "offset": self.offset, "examples_before": examples, "steps": self.steps,
                "fresh": self.fresh, "fresh_examples": self.fresh_ex,
                "emitted_examples": self.emitted_ex}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        name = "DeviceEcho"
        upstream = state_mapping(state, "upstream", name)
        g = state_int(state, "group", name, maximum=_MOST, rule="the group being handed out")
        passes = state_int(state, "pass", name, maximum=max(self.cap - 1, 0),
                           rule=f"passes over a group before the last, below {self.cap}")
        offset = state_int(state, "offset", name, maximum=_MOST, rule="copies handed out")
        examples = state_int(state, "examples_before", name, maximum=_MOST,
                             rule="examples read before the group")
        counts = [state_int(state, key, name, maximum=_MOST, rule="a count") for key in
                  ("steps", "fresh", "fresh_examples", "emitted_examples")]
        self.upstream.load_state_dict(upstream)
        self.g, self.passes, self.offset = g, passes, offset
        self.steps, self.fresh, self.fresh_ex, self.emitted_ex = counts
        self.read, self.examples_read = g * self.shared.group, examples
        self.groups.clear()



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
    def of(cls, stage: RingPass, group: Group) -> Order:
        shared, passes = stage.shared, stage.passes
        sizes = np.array([n for _, n in group.batches])
        batches = shared.mode == "batches"
        items = len(sizes) if batches else int(sizes.sum())
        if stage.auto:
            copies = np.ones(items, np.int64)
        else:
            first = group.index * shared.group if batches else group.examples_before
            copies = copies_at(shared.factor, stage.draw_seed,  # type: ignore[arg-type]
                               np.arange(first, first + items))
        units = np.repeat(np.arange(items), copies)
        units = units[rng(shared.seed, DEVICE_ORDER, stage.epoch, group.index,
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
