"""Echoing in a Ray Data pipeline: rows echoed on the workers, counted exactly at the trainer.

Ray Data runs the read, decode and augmentation on a cluster's workers and streams
batches to the trainer. Example echoing belongs there too: :func:`echo_rows` inserts a
``map_batches`` step that repeats each row (before augmentation: each copy is
augmented anew by the ``map``/``map_batches`` after it) and numbers the copies in a
column, so the trainer counts fresh examples exactly with :class:`CountCopies`,
wherever the rows were echoed. Batch echoing and adaptive echoing wrap the trainer's
iterator instead (:class:`dataecho.Echo`, :class:`dataecho.AdaptiveEcho`,
``dataecho.torch.EchoBatches``), like any other loader.

Nothing here imports Ray: a dataset is anything with ``map_batches``.
"""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ._checks import check_bool, check_positive_int, check_seed, state_int, state_mapping
from ._rng import derive_seed
from .echo import copies_at, copies_for
from .factor import fixed_factor
from .readers import as_stage
from .stage import Stage, State

#: The column that numbers the copies of a row: 0 for the fresh read, 1, 2... for echoes.
COPY_COLUMN = "echo_copy"

#: The most rows :class:`EchoRows` lets one output batch reach: a batch of ``n`` rows
#: becomes up to ``ceil(factor) * n`` rows, and beyond this (2 GiB per byte of a row) it
#: is refused before anything is allocated.
MAX_BATCH_ROWS = 2**31


class EchoRows:
    """A ``Dataset.map_batches`` function that repeats every row ``factor`` times.

    Copies come out adjacent within the batch and carry their number in
    ``copy_column``; a local shuffle buffer (``iter_batches(local_shuffle_buffer_size=
    ...)``) or ``random_shuffle()`` after it spreads them, as the paper advises.

    A fractional factor gives ``floor(factor)`` copies plus one more with probability
    ``factor - floor(factor)``, drawn per row from its ``key`` and the seed, never from
    the worker or the order blocks arrive in: every run and every cluster layout makes
    the same copies. With integer keys (row numbers, like ``ray.data.range``'s ``id``)
    the draws are exactly those of ``dataecho.Echo(rows in key order, factor, seed)``;
    other keys (file paths) are hashed.

    A batch of ``n`` rows becomes up to ``ceil(factor) * n`` rows; a factor and batch
    that could pass :data:`MAX_BATCH_ROWS` get a ``ValueError`` before any allocation.

    Args:
        factor: copies per row, a real number >= 1.
        key: the column that identifies a row; needed for a fractional factor.
        seed: seed of the fractional draws.
        epoch: derives the draws of this epoch from ``seed``: build the dataset with
            ``epoch=e`` each epoch so the extra copies fall on different rows.
        copy_column: name of the added column of copy numbers.

    Example:
        >>> out = EchoRows(2)({"id": np.arange(3), "x": np.array([10, 11, 12])})
        >>> out["x"].tolist(), out["echo_copy"].tolist()
        ([10, 10, 11, 11, 12, 12], [0, 1, 0, 1, 0, 1])
        >>> out = EchoRows(1.5, key="id")({"id": np.arange(1000)})
        >>> int((out["echo_copy"] == 0).sum()), 1400 < len(out["id"]) < 1600
        (1000, True)
    """

    def __init__(self, factor: float, *, key: str | None = None, seed: int = 0,
                 epoch: int = 0, copy_column: str = COPY_COLUMN) -> None:
        # Epoch 0 uses the seed itself, so integer keys draw exactly as Echo(seed=seed).
        self.factor = fixed_factor(
            factor, adaptive="EchoBatches(ds.iter_torch_batches(...), factor=Auto()) in "
            "the trainer (rows are echoed where they are read, before timing is known)")
        if key is not None and not isinstance(key, str):
            raise TypeError(f"key must be a column name (str) or None, got "
                            f"{type(key).__name__}; pass e.g. key='id'")
        if key is None and self.factor != int(self.factor):
            raise ValueError(
                f"a fractional factor ({self.factor}) needs key=: the column that identifies "
                "each row (row numbers such as ray.data.range's 'id', or a file path), so "
                "every worker and every rerun draws the same extra copies; or pass an "
                "integer factor")
        _check_rows(self.factor, 1)
        self.key = key
        epoch = check_positive_int(epoch, "epoch", minimum=0)
        self.seed = derive_seed(check_seed(seed), epoch) if epoch else check_seed(seed)
        self.copy_column = str(copy_column)

    def copies(self, batch: Mapping[str, Any]) -> np.ndarray:
        """Copies of each row of ``batch`` (an int array)."""
        n = _check_rows(self.factor, _rows(batch))
        if self.factor == int(self.factor):
            return np.full(n, int(self.factor), dtype=np.int64)
        key = self.key
        if key is None or key not in batch:
            raise ValueError(
                f"key={key!r} is not a column of the batch (columns: "
                f"{', '.join(map(str, batch))}); pass the name of a column that identifies rows")
        keys = np.asarray(batch[key])
        if np.issubdtype(keys.dtype, np.integer):
            return copies_at(self.factor, self.seed, keys)
        return copies_for(self.factor, np.array([_unit(self.seed, k) for k in keys.tolist()],
                                                dtype=np.float64))

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if self.copy_column in batch:
            raise ValueError(
                f"the batch already has a column {self.copy_column!r} (columns: "
                f"{', '.join(map(str, batch))}), which EchoRows would overwrite; if these rows "
                "went through echo_rows already, echo once, otherwise pass another copy_column")
        counts = self.copies(batch)
        out = {name: np.repeat(np.asarray(col), counts, axis=0) for name, col in batch.items()}
        # Copy numbers 0..c-1 within each run of copies.
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        out[self.copy_column] = np.arange(int(counts.sum()), dtype=np.int64) - starts
        return out

    def __repr__(self) -> str:
        return f"EchoRows(factor={self.factor!r}, key={self.key!r}, seed={self.seed!r})"


def echo_rows(dataset: Any, factor: float, *, key: str | None = None, seed: int = 0,
              epoch: int = 0, copy_column: str = COPY_COLUMN, **map_batches: Any) -> Any:
    """``dataset.map_batches(EchoRows(...), batch_format="numpy")``: example echoing.

    Put it where the paper's variant wants it: after the read and decode and before
    the augmentation (each copy augmented anew), or after the augmentation (identical
    copies). Extra keyword arguments go to ``map_batches`` (``batch_size``,
    ``num_cpus``, ``concurrency``...).

    Example:
        >>> class Rows:  # any object with Ray Data's map_batches
        ...     def __init__(self, batch): self.batch = batch
        ...     def map_batches(self, fn, batch_format): return Rows(fn(self.batch))
        >>> echo_rows(Rows({"id": np.arange(3)}), 2).batch["echo_copy"].tolist()
        [0, 1, 0, 1, 0, 1]
    """
    if not callable(getattr(dataset, "map_batches", None)):
        raise TypeError(f"dataset must be a ray.data.Dataset (with map_batches), got "
                        f"{type(dataset).__name__}; build one with ray.data.from_items/read_*")
    fn = EchoRows(factor, key=key, seed=seed, epoch=epoch, copy_column=copy_column)
    batch_size = map_batches.get("batch_size")
    if isinstance(batch_size, int) and not isinstance(batch_size, bool):
        _check_rows(fn.factor, batch_size)  # now, rather than on a worker mid-run
    if "udf_modifying_row_count" in _parameters(dataset.map_batches):
        # The echo changes the row count: said explicitly, so no Ray version's default
        # lets the optimiser push a limit() or row-count shortcut past it.
        map_batches.setdefault("udf_modifying_row_count", True)
    return dataset.map_batches(fn, batch_format="numpy", **map_batches)


def _parameters(fn: Any) -> Mapping[str, Any]:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or a C extension: pass nothing extra
        return {}


class CountCopies(Stage[Any]):
    """Counts fresh and echoed rows in the batches the trainer reads.

    A row is fresh when its copy number is 0, so the count is exact however the rows
    were echoed, shuffled or split across workers and ranks (each rank counts its own
    share; sum them with an all-reduce).

    Args:
        upstream: the trainer's batches: ``ds.iter_batches()``,
            ``ds.iter_torch_batches()``, a ``streaming_split`` shard's iterator.
            Dicts of columns; the copy column may be a numpy array or a tensor.
        copy_column: the column :func:`echo_rows` added.
        drop: remove the column from the batches yielded.

    Example:
        >>> batches = [{"x": np.arange(4), "echo_copy": np.array([0, 1, 0, 1])}]
        >>> stage = CountCopies(batches)
        >>> list(stage)[0].keys(), stage.stats().fresh_examples
        (dict_keys(['x']), 2)
    """

    upstream: Stage[Any]

    def __init__(self, upstream: Iterable[Mapping[str, Any]], *,
                 copy_column: str = COPY_COLUMN, drop: bool = True) -> None:
        self.upstream = as_stage(upstream)
        self.copy_column, self.drop = str(copy_column), check_bool(drop, "drop")
        self._fresh = self._emitted = self._batches = 0
        self.last_size = 0  # rows in the latest batch: a later Echo counts rows with it

    def batch_counts(self) -> tuple[int, int, int]:
        """(batches read, rows in them with echoed copies, 0: it drops none)."""
        return self._batches, self._emitted, 0

    def __next__(self) -> Any:
        batch = next(self.upstream)
        if not isinstance(batch, Mapping) or self.copy_column not in batch:
            raise ValueError(
                f"batches must be dicts with the {self.copy_column!r} column that echo_rows "
                f"adds, got {type(batch).__name__}"
                + (f" with columns {', '.join(map(str, batch))}" if isinstance(batch, Mapping)
                   else "")
                + "; iterate with batch_format 'numpy' or iter_torch_batches")
        copies = np.asarray(_to_numpy(batch[self.copy_column]))
        self._fresh += int((copies == 0).sum())
        self._emitted += int(copies.size)
        self._batches += 1
        self.last_size = int(copies.size)
        if self.drop:
            batch = {k: v for k, v in batch.items() if k != self.copy_column}
        return batch

    def echo_counts(self) -> tuple[int, int, int, int]:
        """(fresh_examples, emitted_examples, fresh_items, emitted_items): rows."""
        return self._fresh, self._emitted, self._fresh, self._emitted

    def _config(self) -> dict[str, Any]:
        return {"copy_column": self.copy_column}

    def _snapshot(self) -> State:
        return {"upstream": self.upstream.state_dict(), "fresh": self._fresh,
                "emitted": self._emitted, "batches": self._batches}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        missing = [k for k in ("upstream", "fresh", "emitted", "batches") if k not in state]
        if missing:
            raise ValueError(
                f"state of CountCopies lacks the keys {', '.join(missing)} (it has "
                f"{', '.join(map(str, state))}); pass the dict returned by "
                "CountCopies.state_dict(), unchanged")
        upstream = state_mapping(state, "upstream", "CountCopies")
        fresh = state_int(state, "fresh", "CountCopies", rule="rows read with copy number 0")
        emitted = state_int(state, "emitted", "CountCopies", minimum=fresh,
                            rule="rows read, at least the fresh ones")
        batches = state_int(state, "batches", "CountCopies", rule="batches read")
        self.upstream.load_state_dict(upstream)
        self._fresh, self._emitted, self._batches = fresh, emitted, batches


def _rows(batch: Mapping[str, Any]) -> int:
    lengths = {len(col) for col in batch.values()}
    if not lengths:
        return 0
    if len(lengths) != 1:
        raise ValueError(f"batch columns must have one length, got lengths {sorted(lengths)}; "
                         "pass a Ray Data batch in the 'numpy' format")
    return lengths.pop()


def _check_rows(factor: float, rows: int) -> int:
    """Returns ``rows`` after checking its batch stays within :data:`MAX_BATCH_ROWS`."""
    per_row = math.ceil(factor)
    if per_row * rows <= MAX_BATCH_ROWS:
        return rows
    shown = f"{int(factor):,}" if factor == int(factor) else repr(factor)
    fix = (f"or smaller batches: echo_rows(..., batch_size=N) with N <= "
           f"{MAX_BATCH_ROWS // per_row:,}" if per_row <= MAX_BATCH_ROWS else
           "at most 2**31 even for batches of one row")
    raise ValueError(
        f"factor={shown} would turn a batch of {rows:,} row{'s' * (rows != 1)} into up to "
        f"{per_row * rows:,} rows, more than one output batch may hold (MAX_BATCH_ROWS = "
        f"2**31 = {MAX_BATCH_ROWS:,}); pass a smaller factor (the paper's gains flatten "
        f"beyond 4-8 copies), {fix}")


def _unit(seed: int, key: Any) -> float:
    """A uniform number in [0, 1) from (seed, key): stable across processes and runs."""
    data = repr(key).encode() if not isinstance(key, bytes) else key
    digest = hashlib.blake2b(data, digest_size=8, key=seed.to_bytes(8, "little")).digest()
    return (int.from_bytes(digest, "little") >> 11) / float(1 << 53)


def _to_numpy(column: Any) -> Any:
    # A tensor, possibly on the GPU (iter_torch_batches(device="cuda")): one small copy.
    if hasattr(column, "detach") and hasattr(column, "cpu"):
        return column.detach().cpu().numpy()
    return column
