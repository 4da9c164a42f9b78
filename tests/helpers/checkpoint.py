"""The shared checkpoint round-trip check, used by every stage's tests.

Restores a freshly built pipeline from the state taken before every element of an
uninterrupted run (through JSON, as a real checkpoint would travel) and requires the
rest of the output, and the final statistics, to be identical; the state's shape to
stay the same for the whole run; and a restored state to read back unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np


def same(a: Any, b: Any) -> bool:
    """Deep equality that understands numpy arrays and torch tensors."""
    if hasattr(a, "detach") and hasattr(a, "numpy"):
        a = a.detach().numpy()
    if hasattr(b, "detach") and hasattr(b, "numpy"):
        b = b.detach().numpy()
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def run(stage: Iterator[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """All outputs, and the JSON-round-tripped state taken before each of them."""
    outputs, states = [], []
    while True:
        states.append(as_json(stage.state_dict()))  # type: ignore[attr-defined]
        try:
            outputs.append(next(stage))
        except StopIteration:
            return outputs, states


def spec_like(state: Any) -> Any:
    """The state's shape: its nested keys and list lengths, each leaf replaced by its type.

    >>> spec_like({"epoch": 1, "upstream": {"next": [0, None]}})
    {'epoch': 'int', 'upstream': {'next': ['int', 'NoneType']}}
    """
    if isinstance(state, dict):
        return {k: spec_like(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return [spec_like(v) for v in state]
    return type(state).__name__


def as_json(state: Any) -> Any:
    """The state as it comes back from a checkpoint file."""
    return json.loads(json.dumps(state))


def assert_restores_everywhere(make: Callable[[], Any], *, every: int = 1,
                               constant_spec: bool = True,
                               idempotent: bool = True) -> list[Any]:
    """Checks that restoring at every step yields exactly the remaining output.

    Besides the output and the final statistics it checks grain's two properties of a
    checkpoint: the state has the same shape (:func:`spec_like`) before every element
    of the run, and restoring is idempotent, so ``state_dict()`` right after
    ``load_state_dict(saved)`` gives back ``saved``.

    Args:
        make: builds a fresh, identical pipeline.
        every: restore before every ``every``-th element (1 = all of them).
        constant_spec: check that the state's shape never changes; a call site that
            opts out says why.
        idempotent: check that a restored state reads back unchanged; a call site that
            opts out says why.

    Returns:
        The uninterrupted output, for further checks by the caller.
    """
    reference = make()
    outputs, states = run(reference)
    final_stats = reference.stats() if hasattr(reference, "stats") else None
    if constant_spec:
        spec = spec_like(states[0])
        for k, state in enumerate(states):
            assert spec_like(state) == spec, (
                f"state shape at step {k} differs from step 0: {spec_like(state)} != {spec}")
    for k in range(0, len(states), every):
        restored = make()
        restored.load_state_dict(states[k])
        if idempotent:
            again = as_json(restored.state_dict())
            assert again == states[k], (
                f"restored at {k}: state_dict() after load_state_dict is {again}, "
                f"saved {states[k]}")
        rest = list(restored)
        assert len(rest) == len(outputs) - k, (
            f"restored at {k}: {len(rest)} items, expected {len(outputs) - k}")
        for i, (got, want) in enumerate(zip(rest, outputs[k:], strict=True)):
            assert same(got, want), f"restored at {k}: item {k + i} differs"
        if final_stats is not None:
            assert restored.stats() == final_stats, f"restored at {k}: stats differ"
    return outputs


class Flaky:
    """Yields 0..n-1 but raises OSError once, just before item ``fail_at``."""

    def __init__(self, n: int, fail_at: int | None) -> None:
        self.next_item, self.n, self.fail_at = 0, n, fail_at

    def __iter__(self) -> Flaky:
        return self

    def __next__(self) -> int:
        if self.next_item == self.fail_at:
            self.fail_at = None
            raise OSError("transient read error")
        if self.next_item >= self.n:
            raise StopIteration
        self.next_item += 1
        return self.next_item - 1


class FlakyMap:
    """A map-style data set whose reads of the listed indices fail once each."""

    def __init__(self, items: Any, fail_at: Any) -> None:
        self.items, self.fail = list(items), set(fail_at)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        if i in self.fail:
            self.fail.discard(i)
            raise OSError(f"transient read error at {i}")
        return self.items[i]


def drain_retrying(stage: Iterator[Any]) -> tuple[list[Any], Any]:
    """Every output, calling next() again after an OSError; and the state after it."""
    outputs: list[Any] = []
    state = None
    while True:
        try:
            outputs.append(next(stage))
        except StopIteration:
            return outputs, state
        except OSError:
            state = json.loads(json.dumps(stage.state_dict()))
