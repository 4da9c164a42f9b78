"""The demo's simulated remote object store: tar shards, a throttled server, a retrying fetch.

The paper's largest speedup (3.25x for ResNet-50) came from ImageNet read over a
network, where the input pipeline, not the accelerator, set the pace. This
subpackage reproduces that setting on one machine:

* ``write_shards`` turns arrays into WebDataset-style tar shards (PNG + label);
* ``ShardServer`` serves them on loopback with a shared bandwidth cap, a
  per-request latency and injectable faults;
* ``decode_image`` decodes what the demo's ``ShardStream`` reads through
  :class:`dataecho.TarShards` (which downloads with :func:`dataecho.fetch`,
  re-exported here).

Only numpy and the standard library are needed; Pillow is imported by the image
codec when it is first used.
"""

from ...download import FetchError, fetch
from ...tarformat import ShardError
from .codec import decode_image, encode_image
from .server import ShardServer
from .shards import image_and_label, iter_shard, read_index, write_shards
from .throttle import Throttle

__all__ = [
    "FetchError",
    "ShardError",
    "ShardServer",
    "Throttle",
    "decode_image",
    "encode_image",
    "fetch",
    "image_and_label",
    "iter_shard",
    "read_index",
    "write_shards",
]
