"""Which epoch each DataLoader iteration reads, agreed by all of its workers."""

from __future__ import annotations

import multiprocessing

from torch.utils.data import get_worker_info

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
