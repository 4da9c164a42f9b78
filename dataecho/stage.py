"""The contract every pipeline stage follows.

A stage is an iterator that wraps the stage before it (its ``upstream``). Its checkpoint
is a small JSON-serialisable dict of counters plus the upstream's checkpoint, never the
elements: restoring re-reads whatever element was in flight. Keeping state off the
Python stack (no generators) is what makes this possible.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from itertools import islice
from typing import Any, TypeVar

from .stats import EchoStats, collect

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

State = dict[str, Any]


class Stage(Iterator[T_co], ABC):
    """Base class of all stages: iteration, checkpoint, statistics and repr.

    Subclasses implement ``__next__``, ``_config`` (the parameters that decide the
    output, checked on restore; computed once), ``_snapshot`` and ``_set_state``, and
    ``_state`` when the snapshot is not the state itself.

    Example:
        >>> import dataecho
        >>> stage = dataecho.Echo([1, 2], factor=2)
        >>> list(stage)
        [1, 1, 2, 2]
    """

    #: Bumped when the layout of a stage's state changes, so old checkpoints fail loudly.
    VERSION = 1
    upstream: Stage[Any] | None = None

    def __iter__(self) -> Stage[T_co]:
        return self

    @abstractmethod
    def __next__(self) -> T_co: ...

    @abstractmethod
    def _config(self) -> dict[str, Any]:
        """The parameters that decide this stage's output (JSON values)."""

    _config_once: dict[str, Any] | None = None

    @property
    def _cfg(self) -> dict[str, Any]:
        # The parameters never change after construction: built once, not per state.
        # (Not a cached_property: writing through __dict__ slows every attribute read
        # of the instance afterwards, __next__'s included.)
        cfg = self._config_once
        if cfg is None:
            cfg = self._config_once = self._config()
        return cfg

    def _snapshot(self) -> Any:
        """A cheap token of the current state, which :meth:`_state` turns into its body.

        Echo stages take one before every fresh read, so stages that are often
        upstream of one return plain tuples here and build dicts in :meth:`_state`,
        only when a checkpoint is actually taken. Others return the body itself.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement _snapshot()")

    def _state(self, token: Any) -> State:
        """The body of the state (counters, upstream state) that ``token`` stands for."""
        return token  # type: ignore[no-any-return]

    @abstractmethod
    def _set_state(self, state: Mapping[str, Any]) -> None: ...

    def state_dict(self) -> State:
        """The checkpoint: counters plus the upstream's state, JSON-serialisable.

        Restoring it with :meth:`load_state_dict` on a freshly built, identical pipeline
        makes that pipeline yield exactly what this one would yield next.
        """
        return self._expand(self._snapshot())

    def _expand(self, token: Any) -> State:
        """The state dict, header included, that :meth:`_snapshot` returned ``token`` for."""
        return {"stage": type(self).__name__, "version": self.VERSION, "config": self._cfg,
                **self._state(token)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores a checkpoint taken by :meth:`state_dict` of an identical stage.

        Raises:
            ValueError: the state comes from another stage type, version or configuration.
            TypeError: ``state`` is not a mapping.
        """
        check_state(self, state)
        self._set_state(state)

    def stats(self) -> EchoStats:
        """Fresh and emitted counts of the pipeline ending at this stage.

        Example:
            >>> import dataecho
            >>> stage = dataecho.Echo(range(10), factor=3)
            >>> _ = list(stage)
            >>> stage.stats().fresh_examples, stage.stats().emitted_examples
            (10, 30)
        """
        return collect(self)

    def copies_of(self) -> Callable[[], tuple[int, bool]] | None:
        """A function telling which example the item just returned is a copy of.

        It answers ``(number, first)``: the example's number among the fresh examples
        of its echo stage, from 1, and whether this copy is the first of that example to
        leave this stage. That counts fresh examples where they leave a pipeline, not
        where an echo stage read them (a ``Shuffle`` after the echo holds copies back):
        what an ``EchoDataset`` hands the DataLoader. None where this stage cannot tell:
        the default. Ask before the first item: a ``Shuffle`` asked records, for each
        item of its window, what its upstream's function said.

        Example:
            >>> import dataecho
            >>> stage = dataecho.Map(dataecho.Echo([7], factor=2), str)
            >>> copy_of = stage.copies_of()
            >>> [(item, *copy_of()) for item in stage]
            [('7', 1, True), ('7', 1, False)]
        """
        return None

    def close(self) -> None:
        """Releases resources (threads, files) of this stage and everything upstream."""
        if self.upstream is not None:
            self.upstream.close()

    def __enter__(self) -> Stage[T_co]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _repr_args(self) -> dict[str, Any]:
        return self._cfg

    def _repr_head(self) -> str:
        return repr(self.upstream) if self.upstream is not None else ""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._repr_args().items())
        head = self._repr_head()
        return f"{type(self).__name__}({', '.join(p for p in (head, args) if p)})"


class StateMismatch(ValueError):
    """A state taken from another pipeline: another stage, version or parameters.

    Attributes:
        stage: the class name of the stage that refused the state.
        fields: what differs: ``("stage",)``, ``("version",)`` or the configuration
            keys whose saved and current values differ.
    """

    def __init__(self, message: str, stage: str, fields: tuple[str, ...]) -> None:
        super().__init__(message)
        self.stage, self.fields = stage, fields


def check_state(stage: Stage[Any], state: object) -> None:
    """Raises a clear error when ``state`` was not taken from a stage like ``stage``.

    Raises:
        TypeError: ``state`` is not a dict.
        StateMismatch: it was taken from another stage, version or parameters.
    """
    name = type(stage).__name__
    if not isinstance(state, Mapping):
        raise TypeError(
            f"state must be a dict returned by {name}.state_dict(), got "
            f"{type(state).__name__}; pass the dict saved from the checkpoint"
        )
    if state.get("stage") != name:
        raise StateMismatch(
            f"state was saved from a {state.get('stage')!r} stage but is being loaded into a "
            f"{name!r} stage: the pipeline differs from the one checkpointed; rebuild it "
            "with the same stages in the same order", name, ("stage",)
        )
    if state.get("version") != stage.VERSION:
        raise StateMismatch(
            f"state of {name} has version {state.get('version')!r} but this dataecho "
            f"expects version {stage.VERSION}; the checkpoint was written by another "
            "dataecho version: restart from scratch or use that version", name, ("version",)
        )
    saved, here = state.get("config"), stage._cfg
    if saved != here:
        saved = saved if isinstance(saved, Mapping) else {}
        keys = tuple(k for k in sorted(set(here) | set(saved)) if saved.get(k) != here.get(k))
        diffs = [f"{k} (saved {saved.get(k)!r}, here {here.get(k)!r})" for k in keys]
        raise StateMismatch(
            f"state of {name} was saved with other parameters: {', '.join(diffs)}; "
            "rebuild the pipeline with the saved parameters to resume exactly", name, keys
        )


def read_into(items: list[Any], upstream: Iterator[Any], size: int) -> list[Any]:
    """Reads from ``upstream`` until ``items`` holds ``size`` items or it ends.

    One item at a time, so that when the upstream raises (a transient read error) the
    items read so far stay in ``items`` and a later call finishes the same group: the
    way ``Batch`` and ``Shuffle`` lose no example to an upstream error.

    Example:
        >>> read_into([0], iter([1, 2, 3]), 3)
        [0, 1, 2]
    """
    for item in islice(upstream, size - len(items)):
        items.append(item)
    return items
