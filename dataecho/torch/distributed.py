"""Cross-rank agreement for adaptive echoing, through ``torch.distributed``.

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

from typing import Any

import torch
import torch.distributed as dist


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
            nccl = dist.get_backend(self.group) == "nccl"
            self._device = (torch.device("cuda", torch.cuda.current_device()) if nccl
                            else torch.device("cpu"))
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
