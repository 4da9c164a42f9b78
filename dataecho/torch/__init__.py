"""PyTorch adapters: example echoing in DataLoader workers, batch echoing of loaders.

Neither subclasses ``DataLoader`` (trainer frameworks rebuild loaders and would drop a
subclass): :class:`EchoDataset` is an ``IterableDataset`` you hand to any loader, and
:class:`EchoBatches` wraps any iterable of batches, a loader included. A one-argument
augmentation that draws from torch's global generator (torchvision, kornia) runs
:class:`Seeded` per copy.

For DDP, ``dataecho.torch.distributed.RankAgreement`` keeps adaptive echoing in step
across ranks; it is imported from there, so this package needs no process group.
"""

try:
    from .augment import Seeded
    from .batches import EchoBatches
    from .dataset import EchoDataset
    from .ranks import shard_of
    from .reading import Indexed, Streamed
except ModuleNotFoundError as error:
    if error.name != "torch":  # torch is there; something it needs is not: keep that error
        raise
    raise ModuleNotFoundError(
        "dataecho.torch needs PyTorch, which is not installed; pip install "
        "'dataecho[torch]' (or the torch build for your accelerator, from pytorch.org)",
        name="torch") from None

__all__ = ["EchoBatches", "EchoDataset", "Indexed", "Seeded", "Streamed", "shard_of"]
