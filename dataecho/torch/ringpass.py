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
from collections.abc import Mapping
from typing import Any

import torch

from .._checks import state_int, state_mapping
from .._rng import AUGMENT_KEY, derive_seed
from ..adaptive import Prefetcher, alone, reader
from ..factor import Auto
from ..map import takes_rng
from ..sizes import batch_size_of
from ..stage import Stage, State
from ..stats import EchoStats
from .augment import forked
from .groups import Group, Order
from .ring import Ring, Shared

_MOST = 2**63 - 1


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
            group.order = Order.of(group, self.shared, self.epoch, self.passes,
                                   None if self.auto else self.draw_seed)
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


