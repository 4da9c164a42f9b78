"""Echoing a stream of tar shards read over HTTP, checkpointed mid-stream and resumed.

Writes 2,000 Fashion-MNIST images into PNG tar shards, serves them from a throttled
server on 127.0.0.1, and reads them with the demo's pipeline:
TarShards -> Map(decode) -> Echo -> Map(augment) -> Shuffle.
Run: python examples/remote_shards.py
"""

from __future__ import annotations

import json
import tempfile
from itertools import islice
from typing import Any

from dataecho import Echo, Map, Shuffle, TarShards
from dataecho.datasets import load_fashion_mnist
from dataecho.demo.augment import PaddedDecode, crop_flip
from dataecho.demo.remote import ShardServer, read_shards, write_shards


def pipeline(url: str) -> Shuffle[Any]:
    # Echo right after the expensive stages (download + PNG decode), before the
    # augmentation, so each of the 3 copies gets its own crop and flip; the shuffle
    # window then spreads the copies over 4 batches' worth of examples.
    shards = read_shards(url)  # the shard URLs and their digests, from the served index
    stream = Map(TarShards(shards.urls, seed=0, digests=shards.digests), PaddedDecode(pad=2))
    return Shuffle(Map(Echo(stream, factor=3, seed=1), crop_flip(pad=2), seed=2), 512, seed=3)


def main() -> None:
    images, labels = load_fashion_mnist("train")
    with tempfile.TemporaryDirectory(prefix="dataecho-shards-") as root:  # removed at the end
        write_shards(images[:2000], labels[:2000], root, shard_size=250)
        with ShardServer(root, bandwidth=4e6, latency=0.005) as server:
            stage = pipeline(server.url)
            first = list(islice(stage, 1000))
            state = json.loads(json.dumps(stage.state_dict()))  # what a checkpoint would hold
            stage.close()

            resumed = pipeline(server.url)
            resumed.load_state_dict(state)  # re-fetches the shard it was in, skips to the offset
            rest = list(resumed)
    print(f"read {len(first)} examples, checkpointed, resumed for {len(rest)} more")
    print(f"stats after resume: {resumed.stats()}")
    print(f"fresh images: {len({index for _, _, index in first + rest})} of 2000")


if __name__ == "__main__":
    main()
