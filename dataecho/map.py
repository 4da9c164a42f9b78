"""The map stage: a per-item transform, optionally random (augmentation)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from . import _rng
from ._checks import check_bool, check_callable, check_seed, state_int, state_mapping
from .readers import as_stage
from .stage import Stage, State

T = TypeVar("T")
U = TypeVar("U")


class Map(Stage[U]):
    """Applies ``fn(item)``, or ``fn(item, rng)`` for random transforms.

    ``rng`` is a ``numpy.random.Generator`` keyed by ``(seed, position)``, where the
    position counts items this stage has transformed; it is valid during the call (the
    next call repositions it), so draw what you need inside ``fn``. Placed after an ``Echo``, every
    copy of an example therefore gets its own augmentation (the paper's "echoing
    before augmentation"), and reruns reproduce them exactly.

    Args:
        upstream: any iterable.
        fn: the transform. It receives the generator when it takes two positional
            parameters (or when ``random=True``).
        seed: seed of the per-item generators.
        random: force (True) or suppress (False) passing the generator.

    Example:
        >>> stage = Map([1, 2], lambda x, rng: x + int(rng.integers(0, 1)))
        >>> list(stage)
        [1, 2]
    """

    upstream: Stage[Any]

    def __init__(
        self,
        upstream: Iterable[T],
        fn: Callable[..., U],
        *,
        seed: int = 0,
        random: bool | None = None,
    ) -> None:
        check_callable(fn, "fn", "fn(item) or fn(item, rng)", optional=False)
        self.upstream = as_stage(upstream)
        self.fn = fn
        self.seed = check_seed(seed)
        self.random = takes_rng(fn) if random is None else check_bool(random, "random")
        self._stream = _rng.Stream(self.seed, _rng.MAP)
        self._position = 0

    def __next__(self) -> U:
        item = next(self.upstream)
        position = self._position
        self._position = position + 1
        if self.random:
            return self.fn(item, self._stream.at(position))
        return self.fn(item)

    def copies_of(self) -> Callable[[], tuple[int, bool]] | None:
        """The upstream's: one transformed item per item read."""
        return self.upstream.copies_of()

    def _config(self) -> dict[str, Any]:
        return {"fn": fn_name(self.fn), "seed": self.seed, "random": self.random}

    def _snapshot(self) -> Any:
        return (self._position, self.upstream._snapshot())

    def _state(self, token: Any) -> State:
        return {"upstream": self.upstream._expand(token[1]), "position": token[0]}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        upstream = state_mapping(state, "upstream", "Map")
        position = state_int(state, "position", "Map", rule="items transformed so far")
        if position >= 2**64:  # Stream.at would wrap round to position - 2**64's generator
            raise ValueError(
                f"state of Map has position={position}, but it must be below 2**64 (the "
                "per-item generators are the 2**64 substreams of one stream): the checkpoint "
                "is damaged; pass the dict saved from this one's checkpoint")
        self.upstream.load_state_dict(upstream)
        self._position = position

    def _repr_args(self) -> dict[str, Any]:
        fn = _Bare(self._cfg["fn"])
        return {**self._cfg, "fn": fn} if self.random else {"fn": fn}


class _Bare(str):
    """A function's name, shown bare in a repr: ``fn=flip``, not ``fn='flip'``."""

    def __repr__(self) -> str:
        return str(self)


def fn_name(fn: Callable[..., Any]) -> str:
    """The name a function is shown by in reprs and configs: its qualified name.

    Example:
        >>> fn_name(len), fn_name(lambda x: x)
        ('len', '<lambda>')
    """
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)


def takes_rng(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes a generator: a second positional parameter without default.

    Example:
        >>> takes_rng(lambda x, rng: x), takes_rng(lambda x, rng=None: x)
        (True, False)
    """
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature take one item
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return False
    return len(positional) >= 2 and positional[1].default is inspect.Parameter.empty
