"""Echoing on the accelerator: decoded batches kept in device memory, re-augmented there."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import torch

from .._checks import check_callable, check_positive_int, check_reiterable, check_seed
from ..factor import Auto, as_factor, most_copies
from ..loop import Epochs
from ..map import fn_name
from ..readers import as_stage
from ..stage import Stage, State
from ..stats import EchoStats
from .batches import tell_epoch
from .ordering import ordering_for
from .ring import Shared
from .ringpass import RingPass

MODES = ("examples", "batches")


@dataclass(frozen=True)
class DeviceStats(EchoStats):
    """:class:`~dataecho.stats.EchoStats` plus the device memory the ring holds.

    Attributes:
        device_bytes: bytes of the preallocated ring (0 before the first batch).

    Example:
        >>> DeviceStats(4, 8, 1, 2, 2, device_bytes=1024).realised_factor
        2.0
    """

    device_bytes: int = 0


class DeviceEcho:
    """Keeps ``window`` fresh batches on ``device`` and hands out re-augmented copies.

    For jobs that augment on the accelerator (kornia, torchvision v2 on CUDA tensors):
    each fresh batch is copied once into a preallocated ring of ``window`` slots, and
    each step gathers a batch of the loader's size from the ring on the device and
    passes it through ``augment``, so every copy is augmented anew where the
    augmentation runs: example echoing before augmentation, without a second
    host-to-device copy.

    - ``mode="examples"``: every example of a fresh batch goes out ``factor`` times
      (fractional factors: ``floor(factor)`` copies plus one with probability
      ``factor - floor(factor)``, keyed by (seed, epoch, example)), its copies spread
      over the steps of its group of ``window // 2`` batches and mixed with theirs by
      a permutation (drawn on the host, so fresh counts are exact and a CPU run hands
      out the same examples as a CUDA one; its index goes to the device once per group,
      8 bytes a copy), gathered on the device. ``mode="batches"``: every slot is
      gathered and augmented ``factor`` times, in an order shuffled within the group.
    - One group is handed out while the next lands in the ring's other half: the copy
      runs on a side stream from pinned memory, after the gathers that last read its
      slot, and the first gather of a batch waits for its copy (CUDA events; on the CPU
      the same code with no streams). A step's batch is a new tensor, so an in-place
      training step cannot change a later copy.
    - ``augment(batch, generator)`` gets a ``torch.Generator`` on ``device`` seeded
      from (seed, epoch, step); a one-argument ``augment(batch)`` (kornia, which draws
      from torch's global generators) runs under ``torch.random.fork_rng`` seeded the
      same way, so the global streams are untouched and a rerun is identical.
      torchvision v2 draws one set of parameters per call: for per-example randomness,
      augment per example (``torch.stack([t(x) for x in batch])``) or use kornia.
    - ``factor=Auto()``: a thread reads the loader, and a group is passed over again
      (each example once a pass, at most ``Auto``'s cap of 8 passes) only while the
      next group has not landed (read, and its copies complete); ranks agree through
      ``Auto(agree=RankAgreement())``. Not bit-reproducible.

    Memory: ``window`` times one batch's tensors, known from the first batch, which is
    when a ring over ``max_bytes`` is refused; ``stats().device_bytes`` reports it.
    Tensors with a row per example live in the ring; other values (a batch-level
    tensor, strings) are carried through from the first batch of the step's group.
    Every step but an epoch's last has the loader's batch size; the loader's last batch
    may be smaller.

    Checkpoints: ``state_dict()`` is small JSON (counters, the position in the current
    group, the loader's state before that group); :meth:`load_state_dict` resumes
    exactly by re-reading at most ``window // 2`` batches, under the same conditions
    as :class:`~dataecho.torch.EchoBatches` (a loader with its own ``state_dict``
    restores itself; a plain one is re-iterated and skipped, exact when its order is
    a function of the epoch). Under DDP each rank has its own ring.

    Args:
        loader: a re-iterable of fixed-size batches (a tensor, or a tuple, dict or
            dataclass of tensors), decoded, on the host (pinned) or on ``device``.
        augment: ``augment(batch, generator)`` or ``augment(batch)``, run on the
            device; None: copies as they are.
        factor: uses of each fresh example, a real >= 1, or :class:`dataecho.Auto`.
        device: where the ring lives and augmentation runs: ``"cuda"``, ``"cpu"``...
        window: batches the ring holds, an int >= 2; groups of ``window // 2`` mix.
        seed: seed of the permutations, the fractional draws and the augmentations.
        mode: ``"examples"`` (example echoing) or ``"batches"`` (batch echoing).
        max_bytes: the most device bytes the ring may take; None: no bound.

    Example:
        >>> loader = [torch.arange(4) + 4 * k for k in range(2)]
        >>> echo = DeviceEcho(loader, augment=None, factor=2, device="cpu", window=2, seed=0)
        >>> sorted(torch.cat(list(echo)).tolist())
        [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7]
        >>> echo.stats().fresh_examples, echo.stats().emitted_examples, echo.stats().device_bytes
        (8, 16, 64)
    """

    def __init__(self, loader: Iterable[Any], *, augment: Callable[..., Any] | None,
                 factor: float | Auto | str, device: torch.device | str, window: int,
                 seed: int, mode: str = "examples", max_bytes: int | None = None) -> None:
        self.loader = check_reiterable(loader, "loader", "iterated once per epoch",
                                       "later epochs would be empty")
        self.augment = check_callable(
            augment, "augment", "augment(batch, generator) or augment(batch)",
            "pass a function of the batch on the device, or None for copies as they are")
        self.factor = as_factor(factor)  # type: ignore[arg-type]
        self.device = _check_device(device)
        self.window = check_positive_int(window, "window", minimum=2)
        self.seed = check_seed(seed)
        if mode not in MODES:
            raise ValueError(
                f"mode must be one of {MODES}, got {mode!r}; pass mode='examples' to echo "
                "examples before augmentation, or mode='batches' to re-augment whole batches")
        self.mode = mode
        self.max_bytes = (None if max_bytes is None
                          else check_positive_int(max_bytes, "max_bytes"))
        self._shared = Shared(self.factor, mode, self.window, self.seed, self.device,
                              self.augment, self.max_bytes, ordering_for(self.device))
        # A function of the parameters, not a bound method (see EchoBatches).
        self._loop = Epochs(partial(_make_pass, self.loader, self._shared))

    @property
    def epoch(self) -> int:
        """The epoch the current or next iteration reads."""
        return self._loop.epoch

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch for this wrapper and passes it on to the loader's sampler.

        As :meth:`dataecho.torch.EchoBatches.set_epoch`: ``loader.sampler``,
        ``loader.batch_sampler``, its sampler, or the loader, the first with a
        ``set_epoch``.
        """
        self._loop.set_epoch(epoch)
        tell_epoch(self.loader, self.epoch)

    def __iter__(self) -> Iterator[Any]:
        ring = self._loop.start()
        try:
            yield from ring
        finally:
            ring.close()
        self._loop.end()

    def stats(self) -> DeviceStats:
        """Fresh and emitted counts over all epochs (items: fresh batches, steps), and the
        ring's device bytes."""
        ring = self._shared.ring
        return DeviceStats(**asdict(self._loop.stats()),
                           device_bytes=0 if ring is None else ring.nbytes)

    def state_dict(self) -> State:
        """Epoch, totals of finished epochs, and the position in this one: JSON, no tensors."""
        return self._loop.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Makes the next iteration resume where the checkpoint was taken.

        The current group's batches are read again (at most ``window // 2``) and its
        order drawn again, so the rest of the epoch is the same, as are the later ones.
        """
        self._loop.load_state_dict(state, "DeviceEcho", most_copies=most_copies(self.factor))
        self.set_epoch(self.epoch)

    def __repr__(self) -> str:
        bound = "" if self.max_bytes is None else f", max_bytes={self.max_bytes}"
        shown = "" if self.augment is None else f"augment={fn_name(self.augment)}, "
        return (f"DeviceEcho(<{type(self.loader).__name__}>, {shown}factor={self.factor!r}, "
                f"device={str(self.device)!r}, window={self.window}, seed={self.seed}, "
                f"mode={self.mode!r}{bound})")


def _make_pass(loader: Iterable[Any], shared: Shared, epoch: int) -> Stage[Any]:
    return RingPass(as_stage(loader), shared, epoch)


def _check_device(device: object) -> torch.device:
    if not isinstance(device, str | torch.device):
        raise TypeError(
            f"device must be a torch.device or a name such as 'cuda' or 'cpu', got "
            f"{device!r} of type {type(device).__name__}; pass device='cuda'")
    try:
        value = torch.device(device)
    except RuntimeError:
        raise ValueError(
            f"device must name a torch device such as 'cuda', 'cuda:1' or 'cpu', got "
            f"{device!r}; pass device='cuda' or device='cpu'") from None
    if value.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device is {device!r} but torch sees no CUDA device here; pass "
            "device='cuda' if torch.cuda.is_available() else 'cpu'")
    return value
