"""The demo's simulated remote object store: tar shards, a throttled server, a retrying fetch.

The paper's largest speedup (3.25x for ResNet-50) came from ImageNet read over a
network, where the input pipeline, not the accelerator, set the pace. This
subpackage reproduces that setting on one machine:

* ``write_shards`` turns arrays into WebDataset-style tar shards (PNG + label);
* ``ShardServer`` serves them on loopback with a shared bandwidth cap, a
  per-request latency and injectable faults;
* ``fetch`` downloads with retries; ``decode_image`` decodes what it read
  (the demo's ``ShardStream`` reads shards through both).

Only numpy and the standard library are needed; Pillow is imported by the image
codec when it is first used.
"""

from .codec import decode_image, encode_image
from .reader import FetchError, fetch
from .server import ShardServer
from .shards import (
    ShardError,
    iter_shard,
    read_index,
    write_shards,
)
from .throttle import Throttle

__all__ = [
    "FetchError",
    "ShardError",
    "ShardServer",
    "Throttle",
    "decode_image",
    "encode_image",
    "fetch",
    "iter_shard",
    "read_index",
    "write_shards",
]
