"""Example echoing inside a torchdata.nodes graph, with a mid-epoch checkpoint.

The slow part (here a sleep standing in for reading and decoding) runs once per fresh
example; EchoNode repeats each decoded example twice, a shuffle window spreads the
copies, and the augmentation after it sees every copy separately.

Run: python examples/torchdata_nodes.py
"""

from __future__ import annotations

import json
import time

import numpy as np
from torchdata.nodes import Batcher, IterableWrapper, Loader, ParallelMapper

from dataecho.torch.nodes import EchoNode


def read_and_decode(i: int) -> np.ndarray:
    time.sleep(0.002)  # the expensive, upstream work
    return np.full(4, i, dtype=np.float32)


def augment(x: np.ndarray) -> np.ndarray:
    # Keyed by the values, not a global RNG, so a resumed run augments identically.
    rng = np.random.default_rng(int(x[0]))
    return x + rng.normal(size=x.shape).astype(np.float32)


def build() -> tuple[EchoNode[np.ndarray], Loader[list[np.ndarray]]]:
    node = ParallelMapper(IterableWrapper(range(512)), map_fn=read_and_decode, num_workers=4)
    echo = EchoNode(node, factor=2, buffer_size=256, seed=0)
    node = ParallelMapper(echo, map_fn=augment, num_workers=2)
    return echo, Loader(Batcher(node, batch_size=64))


def main() -> None:
    echo, loader = build()
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = json.dumps(loader.state_dict())  # what a training checkpoint would save
    rest = [np.stack(b) for b in it]
    print(f"epoch 0: {5 + len(rest)} batches; {echo.stats()}")

    echo2, loader2 = build()
    loader2.load_state_dict(json.loads(state))
    resumed = [np.stack(b) for b in loader2]
    same = len(resumed) == len(rest) and all(np.array_equal(a, b)
                                             for a, b in zip(resumed, rest, strict=True))
    print(f"resumed after 5 batches: {len(resumed)} batches, identical: {same}; "
          f"{echo2.stats()}")


if __name__ == "__main__":
    main()
