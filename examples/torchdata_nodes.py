"""Example echoing inside a torchdata.nodes graph, with a mid-epoch checkpoint.

The slow part (here a sleep standing in for reading and decoding) runs once per fresh
example; EchoNode repeats each decoded example twice, a shuffle window spreads the
copies, and the augmentation after it sees every copy separately: its randomness is
keyed by the copy's position in the epoch (a small node numbers them and checkpoints
the count), so the two copies of an example get different noise, and a resumed run
the same noise as the original.

Run: python examples/torchdata_nodes.py
"""

from __future__ import annotations

import json
import time

import numpy as np
from torchdata.nodes import BaseNode, Batcher, IterableWrapper, Loader, ParallelMapper

from dataecho.torch.nodes import EchoNode


def read_and_decode(i: int) -> np.ndarray:
    time.sleep(0.002)  # the expensive, upstream work
    return np.full(4, i, dtype=np.float32)


class Numbered(BaseNode[tuple[int, int, np.ndarray]]):
    """Yields (epoch, position, item); the count travels in the checkpoint."""

    def __init__(self, source: BaseNode[np.ndarray]) -> None:
        super().__init__()
        self.source, self.epoch, self.position = source, -1, 0

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        if initial_state is None:
            self.source.reset()
            self.epoch, self.position = self.epoch + 1, 0
        else:
            self.source.reset(initial_state["source"])
            self.epoch, self.position = initial_state["epoch"], initial_state["position"]

    def next(self) -> tuple[int, int, np.ndarray]:
        item = next(self.source)
        self.position += 1
        return self.epoch, self.position - 1, item

    def get_state(self) -> dict:
        return {"source": self.source.state_dict(), "epoch": self.epoch,
                "position": self.position}


def augment(numbered: tuple[int, int, np.ndarray]) -> np.ndarray:
    # Keyed by (epoch, position), not a global RNG: every copy gets its own noise, and a
    # resumed run augments identically.
    epoch, position, x = numbered
    rng = np.random.default_rng((0, epoch, position))
    return x + rng.normal(size=x.shape).astype(np.float32)


def build() -> tuple[EchoNode[np.ndarray], Loader[list[np.ndarray]]]:
    node = ParallelMapper(IterableWrapper(range(512)), map_fn=read_and_decode, num_workers=4)
    echo = EchoNode(node, factor=2, buffer_size=256, seed=0)
    node = ParallelMapper(Numbered(echo), map_fn=augment, num_workers=2)
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
