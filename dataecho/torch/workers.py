"""State that the DataLoader worker copies of an ``EchoDataset`` share.

DataLoader workers hold copies of the data set, new ones for each iteration without
persistent workers. What they must agree on lives in shared memory: which epoch an
iteration reads (:class:`EpochCounter`) and the fresh and emitted counts of every worker
(:class:`Counted` publishes them), so that the training process sees one total.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Mapping
from typing import Any

from torch.utils.data import get_worker_info

from .._checks import state_bool, state_int, state_mapping
from ..stage import Stage, State
from ..stats import chain

#: Slots for per-worker counters in shared memory: (fresh examples, emitted examples)
#: per worker; the main process (num_workers=0) uses slot 0.
SLOTS = 256

# Fields of the shared record: the epoch the next iteration reads, then the iteration
# that claimed an epoch last (its key: the DataLoader's base seed and the workers'
# own iteration count), the epoch it got, and how many of its workers claimed it.
_NEXT, _SEED, _COUNT, _EPOCH, _CLAIMS = range(5)


class EpochCounter:
    """An epoch counter in shared memory that every DataLoader worker can advance.

    DataLoader workers hold copies of the data set: without persistent workers a new
    set of copies is made for each iteration, so a counter kept in the object would
    read the same epoch every time unless the training loop calls ``set_epoch`` (which
    Lightning never does for an ``IterableDataset``). This one lives in shared memory.
    The first worker of an iteration to start claims the next epoch; the other workers
    of that iteration get the same one. An iteration is known by the base seed that
    the DataLoader draws for it (every worker's ``seed - id``) and by how many
    iterations that worker process has begun (persistent workers keep one base seed);
    at most ``num_workers`` claims join one iteration, so a DataLoader rebuilt with the
    same seed each epoch still advances. (Not covered: such a rebuilt loader whose
    previous iteration was abandoned before all its workers started, where the first
    workers of the next iteration would join the old claim.)

    Example:
        >>> counter = EpochCounter()
        >>> counter.claim(started=0), counter.claim(started=1)  # the training process
        (0, 1)
        >>> counter.set(5); counter.claim(started=0)
        5
    """

    def __init__(self) -> None:
        # A synchronized array (its own lock) from the spawn context, which also works
        # in forked workers and pickles into spawned ones.
        self._shared = multiprocessing.get_context("spawn").Array("q", [0, 0, -1, 0, 0])

    def set(self, epoch: int) -> None:
        """Makes ``epoch`` the one the next iteration reads."""
        with self._shared.get_lock():
            self._shared[_NEXT] = epoch
            self._shared[_COUNT] = -1  # a new iteration claims afresh

    def next(self) -> int:
        """The epoch the next iteration will read."""
        return int(self._shared[_NEXT])

    def claim(self, started: int, resume: int | None = None) -> int:
        """The epoch of the iteration now beginning in this process.

        Args:
            started: iterations this copy of the data set has begun before this one.
            resume: the epoch a restored checkpoint names for this iteration; it wins,
                and the next iteration reads the one after it.
        """
        info = get_worker_info()
        with self._shared.get_lock():
            shared = self._shared
            if info is not None:
                key = (info.seed - info.id, started)
                if ((shared[_SEED], shared[_COUNT]) == key
                        and shared[_CLAIMS] < info.num_workers):
                    shared[_CLAIMS] += 1
                    return int(resume if resume is not None else shared[_EPOCH])
            epoch = int(shared[_NEXT] if resume is None else resume)
            shared[_NEXT] = epoch + 1
            if info is not None:
                shared[_SEED], shared[_COUNT] = key
                shared[_EPOCH], shared[_CLAIMS] = epoch, 1
            return epoch

    def rewind(self, epoch: int) -> None:
        """Makes ``epoch`` the next one again.

        For an iteration restored from a checkpoint that turned out to hold the already
        finished epoch before ``epoch``: it reads nothing, and the next reads ``epoch``.
        """
        with self._shared.get_lock():
            self._shared[_NEXT] = epoch


def worker_slot() -> int:
    """This process's slot in the shared counters: the worker id, 0 in the main process."""
    info = get_worker_info()
    if info is None:
        return 0
    if info.num_workers > SLOTS:
        raise ValueError(
            f"num_workers must be <= {SLOTS} for EchoDataset (one shared counter per "
            f"worker), got {info.num_workers}; pass DataLoader(..., num_workers={SLOTS}) "
            "or fewer"
        )
    return int(info.id)


class Counted(Stage[Any]):
    """Publishes the counters of a worker's pipeline to shared memory; knows its end.

    Its state says whether the pipeline was read to its end. A ``StatefulDataLoader``
    restores a worker by loading the dataset's state (which then names the next epoch)
    and then this state into the new iterator: an ended state keeps that iterator
    empty, and ``rewind`` lets the dataset's next iteration read that next epoch.

    With ``nonempty``, a pass that yields nothing at all is an error (an empty stream,
    or a worker whose part of it is empty), not a silent empty epoch.
    """

    upstream: Stage[Any]

    def __init__(self, upstream: Stage[Any], counts: Any, slot: int, epoch: int,
                 rewind: Callable[[int], None], *, nonempty: bool = False) -> None:
        self.upstream, self.epoch, self.ended = upstream, epoch, False
        self._rewind, self._nonempty, self._yields = rewind, nonempty, 0
        stages = chain(upstream)
        self._echo = next((s for s in stages if hasattr(s, "echo_counts")), None)
        # The stage whose reads are this worker's fresh examples: the last that counts
        # reads (a Shard after the stream reader keeps only this worker's share).
        # None when no stage counts its reads: then the items this stage yields count.
        self._source = next((s for s in reversed(stages) if hasattr(s, "items_read")), None)
        self._counts, self._slot = counts, 2 * slot
        self._rebase()

    def _read(self) -> tuple[int, int]:
        if self._echo is not None:
            fresh, emitted, _, _ = self._echo.echo_counts()
            return fresh, emitted
        # No echo stage (factor 1): every example read is emitted once, as in
        # dataecho.stats.collect, which is too slow to call per example.
        read = self._yields if self._source is None else int(self._source.items_read)
        return read, read

    def _rebase(self) -> None:
        # Totals of earlier epochs of this slot, minus what a restored pipeline had counted.
        fresh, emitted = self._read()
        self._base = (self._counts[self._slot] - fresh, self._counts[self._slot + 1] - emitted)

    def __next__(self) -> Any:
        if self.ended:
            raise StopIteration
        try:
            item = next(self.upstream)
            self._yields += 1
        except StopIteration:
            self.ended = True
            if self._nonempty and not self._yields:
                raise ValueError(_empty_message()) from None
            raise
        finally:
            fresh, emitted = self._read()
            self._counts[self._slot] = self._base[0] + fresh
            self._counts[self._slot + 1] = self._base[1] + emitted
        return item

    def _config(self) -> dict[str, Any]:
        return {}

    def _snapshot(self) -> State:
        return {"epoch": self.epoch, "ended": self.ended,
                "upstream": self.upstream.state_dict()}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        # Defaults for checkpoints written before the keys existed.
        state = {"ended": False, "epoch": self.epoch, **state}
        ended = state_bool(state, "ended", "Counted")
        epoch = state_int(state, "epoch", "Counted", rule="the epoch the worker read")
        if ended:
            if not self.ended and epoch != self.epoch:
                self._rewind(self.epoch)
            self.ended = True
            return
        self.upstream.load_state_dict(state_mapping(state, "upstream", "Counted"))
        self._rebase()

    def __repr__(self) -> str:
        return repr(self.upstream)


def _empty_message() -> str:
    info = get_worker_info()
    where = ("the training process" if info is None
             else f"DataLoader worker {info.id} of {info.num_workers}")
    return (f"dataset yielded no examples in {where} for a whole epoch: the stream is "
            "empty, or this reader's part of it is (fewer stream shards than DataLoader "
            "workers times ranks); check the stream's files, or use fewer workers")
