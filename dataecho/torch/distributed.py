"""Cross-rank agreement for adaptive echoing, through ``torch.distributed``.

Two tools. :class:`RankAgreement`, for adaptive stages in the training process, makes
every rank take the same decisions. :class:`EqualSteps`, for adaptive echoing in
DataLoader workers (which have no process group), ends every rank's epoch at the same
step.

Adaptive echoing decides from local timing, so without agreement a rank with a slow
upstream would echo more, and take more steps per epoch, than the others: DDP would
then hang in a gradient all-reduce that only some ranks reach. With
:class:`RankAgreement` every rank votes before each decision (fresh items ready, echo
budget, upstream ended) and all ranks act on the combined vote: they take fresh items
only as fast as the slowest rank can supply them, echo together, and stop together
when any rank's upstream ends. Every take of a fresh item follows a vote: a rank that
must wait for one takes nothing until it has it or knows none will come, then votes
again, so an upstream that ends during the wait stops every rank at the same step.
Every rank thus takes the same number of steps and reads the same number of fresh
items (and a last partial batch is dropped everywhere).

Cost: one all-reduce of three integers per step, tens of microseconds on gloo, far
below a training step; one more after each wait for a fresh item, when the consumer
is blocked anyway. An upstream error on one rank ends the pass on every rank: that
rank raises it, the others see the pass end. A ``timeout`` (a hung reader) raises on
its rank alone and leaves the others waiting in the next all-reduce until the process
group's timeout, as any failure inside a DDP step does.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from .._checks import check_reiterable
from ..stats import EchoStats
from .ranks import Part


def collective_device(group: Any = None) -> torch.device:
    """Where a collective's tensors live: this thread's CUDA device under NCCL, else CPU.

    Example:
        >>> import torch.distributed as dist
        >>> collective_device() if not dist.is_initialized() else torch.device("cpu")
        device(type='cpu')
    """
    if dist.is_available() and dist.is_initialized() and dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class RankAgreement:
    """Combines each rank's vote: min fresh ready, min echo capacity, any ended.

    Pass it as ``agree=`` to :class:`~dataecho.adaptive.AdaptiveEcho` or
    :class:`~dataecho.adaptive.AdaptiveExamples` on every rank. The process
    group must be initialised first.

    Args:
        group: the process group; default the world.
        device: where the vote tensor lives; default the current CUDA device at the first
            vote for an NCCL group, else CPU.

    Example:
        >>> import os, tempfile, torch.distributed as dist
        >>> path = os.path.join(tempfile.mkdtemp(), "init")
        >>> dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
        >>> RankAgreement()(2, 1, False)
        (2, 1, False)
        >>> dist.destroy_process_group()
    """

    def __init__(self, group: Any = None, device: torch.device | str | None = None) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "RankAgreement needs an initialised torch.distributed process group, but "
                "none is; call torch.distributed.init_process_group(...) on every rank "
                "before building the adaptive stage")
        self.group = group
        self._device = None if device is None else torch.device(device)
        self.calls = 0  # all-reduces made: each rank must make the same number

    @property
    def device(self) -> torch.device:
        """The vote tensor's device, fixed at the first vote when not given.

        Not at construction: a script may build the stage before
        ``torch.cuda.set_device(local_rank)``, and every rank would then vote on cuda:0.
        Votes happen in the consumer's thread, whose current device the user set.
        """
        if self._device is None:
            self._device = collective_device(self.group)
        return self._device

    def __call__(self, ready: int, capacity: int, ended: bool) -> tuple[int, int, bool]:
        # min(a) = -max(-a): one MAX all-reduce combines all three fields.
        vote = torch.tensor([-ready, -capacity, int(ended)], dtype=torch.int64,
                            device=self.device)
        dist.all_reduce(vote, op=dist.ReduceOp.MAX, group=self.group)
        self.calls += 1
        low_ready, low_capacity, any_ended = vote.tolist()
        return -low_ready, -low_capacity, bool(any_ended)

    def __repr__(self) -> str:
        return f"RankAgreement(world_size={dist.get_world_size(self.group)})"


class EqualSteps:
    """Yields the loader's batches while every rank still has one; ends all ranks together.

    Wherever ranks' parts of an epoch have sizes known only once read, ranks emit
    different numbers of batches, and DDP would hang in the all-reduce of a step only
    some ranks take: adaptive echoing in DataLoader workers (``EchoDataset(...,
    factor=Auto())``), and streams or adaptive echoing under accelerate's sliced mode,
    where each process reads its own part. The ranks agree on each batch, one ahead:
    before yielding a batch they all-reduce whether each has the next one (one
    all-reduce of one integer per step, far below a training step), so
    :attr:`end_of_dataloader` is True at the epoch's last step, as in accelerate's
    loaders. The epoch ends on every rank at the first step some rank cannot take. The
    longer ranks' last batches of that epoch are not trained: :attr:`dropped` counts
    those this rank read. A loader whose iteration is a generator (accelerate's
    prepared loaders) is read to its end, so that its own end-of-epoch code runs
    (accelerate counts the epoch and releases the loader there); any other iteration
    is dropped there, and the rest of the epoch is not read.

    ``set_epoch`` is passed to the loader, so the Hugging Face ``Trainer`` can take it
    from ``get_train_dataloader`` (``EqualSteps(super().get_train_dataloader())``) and
    tell it each epoch as it tells its own loader.

    Args:
        loader: the rank's loader, re-iterable once per epoch.
        group: the process group; default the world.
        device: where the flag tensor lives; default as :class:`RankAgreement`.

    Example:
        >>> import os, tempfile, torch.distributed as dist
        >>> path = os.path.join(tempfile.mkdtemp(), "init")
        >>> dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
        >>> steps = EqualSteps([1, 2, 3])
        >>> list(steps), steps.dropped, steps.end_of_dataloader
        ([1, 2, 3], 0, True)
        >>> dist.destroy_process_group()
    """

    def __init__(self, loader: Iterable[Any], group: Any = None,
                 device: torch.device | str | None = None) -> None:
        self.loader = check_reiterable(loader, "loader", "iterated once per epoch",
                                       "later epochs would be empty")
        self._agree = RankAgreement(group, device)
        _tell_agreed(loader)
        #: Batches this rank read and did not yield, over all epochs.
        self.dropped = 0
        #: Whether the batch just yielded is the epoch's last on every rank.
        self.end_of_dataloader = False

    def set_epoch(self, epoch: int) -> None:
        """Passes ``epoch`` to the loader's ``set_epoch``, where it has one."""
        set_epoch = getattr(self.loader, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        self.end_of_dataloader = False
        it = iter(self.loader)
        batch = next(it, _END)
        more = self._every_rank_has(batch)
        while more:
            following = next(it, _END)
            more = self._every_rank_has(following)
            self.end_of_dataloader = not more
            yield batch
            batch = following
        self.dropped += batch is not _END
        if isinstance(it, Generator):  # let its end-of-epoch code run
            self.dropped += sum(1 for _ in it)

    def _every_rank_has(self, batch: Any) -> bool:
        # The minimum over ranks of "has a batch": one MAX all-reduce of -has.
        return self._agree(0 if batch is _END else 1, 0, False)[0] == 1

    def __repr__(self) -> str:
        return f"EqualSteps(<{type(self.loader).__name__}>, {self._agree!r})"


_END = object()


def _tell_agreed(loader: Any) -> None:
    """Tells an ``EchoDataset`` the loader reads (or accelerate's shard of it holds) that
    its processes' epochs end together, so it need not warn that they may not."""
    dataset = getattr(loader, "dataset", None)
    for held in (dataset, getattr(dataset, "dataset", None)):
        part = getattr(held, "part", None)
        if isinstance(part, Part):
            part.agreed = True


def stats_over_ranks(dataset: Any, group: Any = None) -> EchoStats:
    """The job's counts: every rank's ``dataset.stats()`` combined over the ranks.

    Call it on every rank (it is a collective). Under plain DDP or Lightning each rank
    reads its own part, so the counts add up. Under accelerate's prepared loaders
    (:mod:`dataecho.torch.accelerated`) an ``EchoDataset`` reads where accelerate has it
    read: the whole epoch on process 0 alone when batches are dispatched, each process
    its own part when each keeps a slice (the sums are right), and the whole epoch on
    every process when it is sliced inside a wrapper of the user's (each counts the same
    whole stream, so the job's count is one rank's). Without a process group it is
    ``dataset.stats()``.

    Args:
        dataset: an ``EchoDataset`` (or anything with ``stats()``).
        group: the process group (default: the world).

    Example:
        >>> from dataecho.torch import EchoDataset
        >>> ds = EchoDataset(list(range(4)), factor=2)
        >>> _ = list(ds)
        >>> stats_over_ranks(ds).emitted_examples
        8
    """
    own = dataset.stats()
    if not (dist.is_available() and dist.is_initialized()):
        return own  # type: ignore[no-any-return]
    counts = torch.tensor([own.fresh_examples, own.emitted_examples], dtype=torch.int64,
                          device=collective_device(group))
    part = getattr(dataset, "part", None)  # an EchoDataset's: how a trainer splits it
    sliced = isinstance(part, Part) and part.seen.get() == "sliced"
    dist.all_reduce(counts, op=dist.ReduceOp.MAX if sliced else dist.ReduceOp.SUM,
                    group=group)
    fresh, emitted = (int(v) for v in counts.tolist())
    return EchoStats.of_examples(fresh, emitted)
