"""A simulated remote object store: tar shards, a throttled HTTP server and a retrying reader.

The paper's largest speedup (3.25x for ResNet-50) came from ImageNet read over a
network, where the input pipeline, not the accelerator, set the pace. This
subpackage reproduces that setting on one machine:

* ``write_shards`` turns arrays into WebDataset-style tar shards (PNG + label);
* ``ShardServer`` serves them on loopback with a shared bandwidth cap, a
  per-request latency and injectable faults;
* ``fetch`` and ``RemoteShards`` read them back with retries, decoding as they go.

Only numpy and the standard library are needed; Pillow is imported by the image
codec when it is first used.
"""

from dataecho.remote.codec import decode_image, encode_image
from dataecho.remote.reader import FetchError, RemoteShards, fetch
from dataecho.remote.server import ShardServer
from dataecho.remote.shards import (
    ShardError,
    iter_shard,
    read_index,
    write_shards,
)
from dataecho.remote.throttle import Throttle

__all__ = [
    "FetchError",
    "RemoteShards",
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
