"""State that the DataLoader worker copies of an ``EchoDataset`` share.

DataLoader workers hold copies of the data set, new ones for each iteration without
persistent workers. What they must agree on lives in shared memory: which epoch an
iteration reads (:class:`EpochCounter`, the epoch source of the dataset's epoch loop)
and the fresh and emitted counts of every worker (:class:`SharedCounts`), so that the
training process sees one total. Everything else is in each copy's own epoch loop.
"""

from __future__ import annotations

import multiprocessing
import os
import weakref
from collections.abc import Callable
from typing import Any

from torch.utils.data import get_worker_info

from ..timing import SIZE, Sides, Timing, sides_of

#: Slots for per-worker counters in shared memory: (fresh examples, emitted examples)
#: per worker; the main process (num_workers=0) uses slot 0.
SLOTS = 256
# After the slots: the process that took slot 0 last (its pid), the training process or
# DataLoader worker 0. The training process writes its counts there only while it has it.
_SLOT0 = 2 * SLOTS

# Fields of the shared record: the epoch the next iteration reads, then the iteration
# that claimed an epoch last (its key: the DataLoader's base seed, the workers' own
# iteration count and the iteration's start stamp), the epoch it got, and how many of
# its workers claimed it; then the checkpoints loaded in the training process, the
# latest one an iteration took, and that iteration's key and workers.
(_NEXT, _SEED, _COUNT, _STAMP, _EPOCH, _CLAIMS, _LOADS, _TAKEN, _TSEED, _TCOUNT, _TSTAMP,
 _TCLAIMS) = range(12)
# The two records of "which iteration did it" (key fields, then its workers' count).
_EPOCH_CLAIM, _LOAD_CLAIM = (_SEED, _COUNT, _STAMP, _CLAIMS), (_TSEED, _TCOUNT, _TSTAMP,
                                                              _TCLAIMS)

# Worker processes this process has started: forks counted by the before-fork hook
# (the parent's count, incremented before each fork, is what the child inherits), and
# copies of an EpochCounter pickled for spawned or forkserver workers. A DataLoader
# starts its workers one after the other in the order of their ids, so worker i of one
# iteration sees the count at its start less i: the same for all of them, and new for
# every iteration, even one whose DataLoader draws the same base seed as the last.
_STARTED = [0]


class EpochCounter:
    """An epoch counter in shared memory that every DataLoader worker can advance.

    DataLoader workers hold copies of the data set: without persistent workers a new
    set of copies is made for each iteration, so a counter kept in the object would
    read the same epoch every time unless the training loop calls ``set_epoch`` (which
    Lightning never does for an ``IterableDataset``). This one lives in shared memory.
    The first worker of an iteration to start claims the next epoch; the other workers
    of that iteration get the same one. An iteration is known by the base seed that
    the DataLoader draws for it (every worker's ``seed - id``) and by how many
    iterations that worker process has begun (persistent workers keep one base seed),
    and by a stamp of when its workers were started (new for every iteration, so a
    DataLoader rebuilt with the same seeded generator each epoch advances, also after
    an iteration abandoned before all its workers started); at most ``num_workers``
    claims join one iteration. The caller that knows the epoch says so with
    :meth:`set`: the next iteration reads that one.

    As the epoch source of an epoch loop (``dataecho.loop.Epochs``), :meth:`begin`
    claims with this copy's own count of iterations begun.

    Example:
        >>> counter = EpochCounter()
        >>> counter.claim(started=0), counter.claim(started=1)  # the training process
        (0, 1)
        >>> counter.set(5); counter.claim(started=0)
        5
        >>> counter.begin(), counter.next()  # as an epoch source
        (6, 7)
    """

    def __init__(self) -> None:
        # A synchronized array (its own lock) from the spawn context, which also works
        # in forked workers and pickles into spawned ones.
        self._shared = multiprocessing.get_context("spawn").Array(
            "q", [0, 0, -1, 0, 0, 0, 0, 0, 0, -1, 0, 0])
        self._started = 0  # iterations begun by this copy (not shared: one per copy)
        self._stamp: int | None = None  # set in a copy pickled for a worker

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for a spawned or forkserver worker: the stamp of its start.
        _STARTED[0] += 1
        return {**self.__dict__, "_stamp": _STARTED[0]}

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
        key, workers = _iteration(started, self._stamp)
        with self._shared.get_lock():
            shared = self._shared
            if _joins(shared, _EPOCH_CLAIM, key, workers):
                return int(resume if resume is not None else shared[_EPOCH])
            epoch = int(shared[_NEXT] if resume is None else resume)
            shared[_NEXT], shared[_EPOCH] = epoch + 1, epoch
            _opens(shared, _EPOCH_CLAIM, key)
            return epoch

    def loaded(self) -> int:
        """Records a checkpoint loaded in the training process; returns its number.

        Every DataLoader iteration gets a copy of the data set holding that checkpoint
        (new copies for each iteration without persistent workers); :meth:`take` lets
        the first iteration after the load resume it, and only that one.
        """
        with self._shared.get_lock():
            self._shared[_LOADS] += 1
            return int(self._shared[_LOADS])

    def take(self, load: int) -> bool:
        """Whether the iteration now beginning in this copy resumes checkpoint ``load``.

        True for every worker of the first iteration that asks after the load, False
        for later iterations (whose copies still hold it) and for an older load.
        """
        key, workers = _iteration(self._started, self._stamp)
        with self._shared.get_lock():
            shared = self._shared
            if load != shared[_LOADS]:
                return False  # a newer checkpoint was loaded since
            if shared[_TAKEN] < load:
                shared[_TAKEN] = load
                _opens(shared, _LOAD_CLAIM, key)
                return True
            return _joins(shared, _LOAD_CLAIM, key, workers)

    def begin(self, resume: int | None = None) -> int:
        """Claims the epoch of the iteration now beginning in this copy (see :meth:`claim`)."""
        epoch = self.claim(self._started, resume)
        self._started += 1
        return epoch

    def ended(self, epoch: int) -> None:
        """Nothing to do: the next epoch was claimed when this one began."""


def _iteration(started: int, stamp: int | None) -> tuple[tuple[int, int, int] | None, int]:
    """This process's iteration key and its number of workers; no key in the main process.

    An iteration is known by the base seed the DataLoader drew for it (every worker's
    ``seed - id``), by how many iterations this copy began before it, and by the stamp
    of its workers' start less the worker id (``stamp``: the copy's own, pickled for
    it; else the forks counted when this process was forked).
    """
    info = get_worker_info()
    if info is None:
        return None, 1
    start = _STARTED[0] if stamp is None else stamp
    return (info.seed - info.id, started, start - info.id), info.num_workers


def _joins(shared: Any, fields: tuple[int, int, int, int], key: tuple[int, int, int] | None,
           workers: int) -> bool:
    """Whether this worker joins the iteration recorded in ``fields`` (lock held)."""
    seed, count, stamp, claims = fields
    if (key is None or (shared[seed], shared[count], shared[stamp]) != key
            or shared[claims] >= workers):
        return False
    shared[claims] += 1
    return True


def _opens(shared: Any, fields: tuple[int, int, int, int],
           key: tuple[int, int, int] | None) -> None:
    """Records this worker's iteration in ``fields`` as the one that did it (lock held)."""
    if key is not None:
        seed, count, stamp, claims = fields
        shared[seed], shared[count], shared[stamp], shared[claims] = (*key, 1)


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


class SharedCounts:
    """The fresh and emitted examples of every DataLoader worker, in shared memory.

    Each worker adds to its own slot what its epoch loop counts (:meth:`publisher`); the
    training process sums the slots. Raw (no lock): one writer per slot. The training
    process's own iteration (``num_workers=0``) is read when the counts are asked for,
    not written after every example.

    Example:
        >>> counts = SharedCounts()
        >>> read = [3, 6]
        >>> publish = counts.publisher(lambda: (read[0], read[1]))  # from 3 and 6 on
        >>> read[:] = [5, 10]
        >>> publish is None, counts.total()  # in the training process: read when asked
        (True, (2, 4))
        >>> counts.reset(7, 14); counts.total()
        (7, 14)
    """

    def __init__(self) -> None:
        self._array = multiprocessing.get_context("spawn").RawArray("q", 2 * SLOTS + 1)
        # The training process's live iteration: writes its counts into slot 0.
        self._live: Callable[[], None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for spawned DataLoader workers: worker 0 starts from slot 0 as it is.
        self._read_live()
        return {"_array": self._array, "_live": None}  # a live pipeline stays here

    def total(self) -> tuple[int, int]:
        """(fresh, emitted) summed over every slot."""
        self._read_live()
        return sum(self._array[0:_SLOT0:2]), sum(self._array[1:_SLOT0:2])

    def reset(self, fresh: int, emitted: int) -> None:
        """Makes (fresh, emitted) the total, in the training process's slot."""
        self._live = None  # what the iteration read so far is replaced, not added
        self._array[:] = [0] * (2 * SLOTS + 1)
        self._array[0], self._array[1] = fresh, emitted

    def own(self) -> tuple[int, int]:
        """(fresh, emitted) in this process's slot: every iteration of this worker id."""
        self._read_live()
        slot = 2 * worker_slot()
        return self._array[slot], self._array[slot + 1]

    def restore(self, fresh: int, emitted: int) -> None:
        """Makes (fresh, emitted) this process's own counts: those a restored worker had."""
        self._live = None
        slot = 2 * worker_slot()
        self._array[slot], self._array[slot + 1] = fresh, emitted

    def publisher(self, counts: Callable[[], tuple[int, int]]) -> Callable[[], None] | None:
        """Makes this process's slot grow by what ``counts()`` grows by from now on.

        Args:
            counts: returns (fresh, emitted) of this process's live pipeline, cheaply.

        Returns:
            In a DataLoader worker, a function to call after every example, which
            writes the counts where the training process reads them. In the training
            process, None: ``counts`` is read whenever the totals are asked for, so the
            examples pay nothing for it.
        """
        worker = get_worker_info() is not None
        if worker:
            self._live = None  # a forked copy of the training process's: not ours
        self._read_live()  # an earlier iteration's counts stay in the slot
        array, slot = self._array, 2 * worker_slot()
        if slot == 0:
            array[_SLOT0] = os.getpid()
        fresh, emitted = counts()
        # Earlier epochs of this slot, minus what a restored pipeline had counted.
        base_fresh, base_emitted = array[slot] - fresh, array[slot + 1] - emitted

        def publish() -> None:
            fresh, emitted = counts()
            array[slot], array[slot + 1] = base_fresh + fresh, base_emitted + emitted

        if worker:
            return publish
        self._live = publish
        _LIVE.add(self)
        return None

    def _read_live(self) -> None:
        if self._live is None:
            return
        if self._array[_SLOT0] == os.getpid():
            self._live()
        else:  # DataLoader worker 0 took slot 0 since (or this is a forked copy)
            self._live = None


class SharedTimes:
    """Every reader's clocks of the read and the augmentation, in shared memory.

    Each DataLoader worker (and the training process, in slot 0) times its own pipeline
    (:class:`dataecho.timing.Timing` over its slot); :meth:`sides` combines them all.
    Written only when a call is timed, so it costs nothing per example.

    Example:
        >>> times = SharedTimes()
        >>> timing = times.timing()  # this process's slot
        >>> timing.read.add(2000, calls=31)
        >>> times.sides().read_s, times.sides().reads
        (2e-06, 31)
    """

    def __init__(self) -> None:
        self._array = multiprocessing.get_context("spawn").RawArray("q", 2 * SIZE * SLOTS)

    def timing(self) -> Timing:
        """The clocks of this process's slot: the worker id, 0 in the training process."""
        return Timing(self._array, 2 * SIZE * worker_slot())

    def sides(self) -> Sides:
        """Seconds per call of each side, over every reader's timed calls."""
        return sides_of([Timing(self._array, 2 * SIZE * slot) for slot in range(SLOTS)])


# Training-process counts read when asked, written into slot 0 before a fork (the
# default start of DataLoader workers on Linux), so that worker 0, which shares slot 0,
# starts from them.
_LIVE: weakref.WeakSet[SharedCounts] = weakref.WeakSet()


def _before_fork() -> None:
    _STARTED[0] += 1  # the child inherits the count that includes its own fork
    for counts in list(_LIVE):
        counts._read_live()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(before=_before_fork)
