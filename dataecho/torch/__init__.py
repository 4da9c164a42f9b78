"""PyTorch adapters: example echoing in DataLoader workers, batch echoing of loaders.

Neither subclasses ``DataLoader`` (trainer frameworks rebuild loaders and would drop a
subclass): :class:`EchoDataset` is an ``IterableDataset`` you hand to any loader, and
:class:`EchoBatches` wraps any iterable of batches, a loader included;
:class:`DeviceEcho` keeps decoded batches on the accelerator and re-augments them
there. A one-argument augmentation that draws from torch's global generator
(torchvision, kornia) runs :class:`Seeded` per copy.

For DDP, ``dataecho.torch.distributed.RankAgreement`` keeps adaptive echoing in step
across ranks; it is imported from there, so this package needs no process group.
"""

from .._extras import needs

try:  # first, so that every dataecho.torch module without torch fails with this one line
    import torch as _torch  # noqa: F401
except ModuleNotFoundError as error:
    raise needs(error, "dataecho.torch", "torch", "torch", "PyTorch",
                "(or the torch build for your accelerator, from pytorch.org)") from None

from .augment import Seeded
from .batches import EchoBatches
from .dataset import EchoDataset
from .device import DeviceEcho
from .ranks import shard_of
from .reading import Indexed, Streamed

__all__ = ["DeviceEcho", "EchoBatches", "EchoDataset", "Indexed", "Seeded", "Streamed", "shard_of"]
