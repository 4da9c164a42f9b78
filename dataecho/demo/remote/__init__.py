"""The demo's simulated remote object store: tar shards, a throttled server, a retrying fetch.

The paper's largest speedup (3.25x for ResNet-50) came from ImageNet read over a
network, where the input pipeline, not the accelerator, set the pace. This
subpackage reproduces that setting on one machine:

* ``write_shards`` turns arrays into WebDataset-style tar shards (PNG + label);
* ``ShardServer`` serves them on loopback with a shared bandwidth cap, a
  per-request latency and injectable faults;
* ``read_shards`` lists a served index's shard URLs and digests for
  :class:`dataecho.TarShards` (which downloads with :func:`dataecho.fetch`,
  re-exported here), and ``decode_sample`` decodes what it reads.

Only numpy and the standard library are needed; Pillow is imported by the image
codec when it is first used.
"""

from ...download import FetchError, fetch
from ...tarformat import ShardError
from .codec import decode_image, encode_image
from .server import ShardServer
from .shards import (
    Shards,
    decode_sample,
    image_and_label,
    iter_shard,
    read_index,
    read_shards,
    write_shards,
)
from .throttle import Throttle

__all__ = [
    "FetchError",
    "ShardError",
    "ShardServer",
    "Shards",
    "Throttle",
    "decode_image",
    "decode_sample",
    "encode_image",
    "fetch",
    "image_and_label",
    "iter_shard",
    "read_index",
    "read_shards",
    "write_shards",
]
