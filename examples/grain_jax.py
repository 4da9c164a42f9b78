"""Example echoing in a Grain pipeline, training a small JAX model on Fashion-MNIST.

The workers of ``mp_prefetch`` decode each image once and echo it twice before the
augmentation, so every copy gets its own shift and flip; the training process sums
the fresh count from the workers' states. Run: python examples/grain_jax.py
(``--fresh 60000`` for the whole training set; ``--data digits`` for the 8x8 digits).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

import dataecho.grain
from dataecho.datasets import load_digits, load_fashion_mnist, split_train_test


@dataclass(frozen=True)
class Config:
    data: str = "fashion-mnist"  # "fashion-mnist" (28x28) or "digits" (8x8)
    fresh: int = 12_000  # fresh training examples read, each used `factor` times
    factor: float = 2.0  # example-echoing factor (copies per fresh example)
    batch_size: int = 128  # examples per step
    workers: int = 2  # mp_prefetch processes that decode, echo and augment
    lr: float = 0.1  # SGD learning rate
    seed: int = 0


class Examples:
    """The training split as a random-access source, loaded in each worker process.

    Pickling (to start the workers) drops the arrays, so each worker reads the files
    itself instead of receiving tens of MB through a pipe.
    """

    def __init__(self, data: str, n: int) -> None:
        self.data, self.n = data, n
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"data": self.data, "n": self.n, "_arrays": None}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if self._arrays is None:
            self._arrays = load(self.data, "train")
        images, labels = self._arrays
        # The "decode": uint8 to float in 0..1, the work echoing saves.
        return {"image": images[index].astype(np.float32) / 255.0, "label": labels[index]}


def load(data: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    if data == "fashion-mnist":
        return load_fashion_mnist(split)
    images, labels = load_digits()
    train_x, test_x, train_y, test_y = split_train_test(images, labels, seed=0)
    # Scaled back to uint8 so both data sets decode the same way.
    chosen = (train_x, train_y) if split == "train" else (test_x, test_y)
    return (chosen[0] * 255).astype(np.uint8), chosen[1]


def augment(example: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    image = np.roll(example["image"], rng.integers(-2, 3, size=2), axis=(0, 1))
    if rng.random() < 0.5:
        image = image[:, ::-1]
    return {"image": image.reshape(-1), "label": example["label"]}


def pipeline(config: Config) -> grain.IterDataset:
    n = len(load(config.data, "train")[1])
    source = grain.MapDataset.source(Examples(config.data, n)).shuffle(seed=config.seed)
    # One host's slice first, so each host echoes its own examples.
    host = source[jax.process_index()::jax.process_count()][:config.fresh]
    return (host.to_iter_dataset()
            .pipe(dataecho.grain.EchoIterDataset, factor=config.factor, seed=config.seed)
            .random_map(augment, seed=config.seed + 1)  # each copy its own shift and flip
            .batch(config.batch_size, drop_remainder=True)
            .mp_prefetch(grain.MultiprocessingOptions(num_workers=config.workers)))


def init(key: jax.Array, sizes: tuple[int, ...]) -> list[tuple[jax.Array, jax.Array]]:
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (a, b)) * jnp.sqrt(2.0 / a), jnp.zeros(b))
            for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)]


def logits(params: list[tuple[jax.Array, jax.Array]], x: jax.Array) -> jax.Array:
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_fn(params: list[tuple[jax.Array, jax.Array]], x: jax.Array, y: jax.Array) -> jax.Array:
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits(params, x)), y[:, None], 1))


def train(config: Config) -> None:
    @jax.jit
    def step(params: Any, x: jax.Array, y: jax.Array) -> tuple[Any, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - config.lr * g, params, grads), loss

    test_x, test_y = load(config.data, "test")
    test_x = test_x.reshape(len(test_x), -1).astype(np.float32) / 255.0
    params = init(jax.random.key(config.seed), (test_x.shape[1], 128, 10))
    it = iter(pipeline(config))
    steps, start = 0, time.perf_counter()
    for batch in it:
        params, loss = step(params, batch["image"], batch["label"])
        steps += 1
        if steps % 50 == 0:
            ms = 1e3 * (time.perf_counter() - start) / steps
            print(f"step {steps}: loss {float(loss):.3f} ({ms:.1f} ms/step)")
    counts = dataecho.grain.stats(it)  # summed over the workers' states
    it.close()
    accuracy = float(jnp.mean(jnp.argmax(logits(params, test_x), -1) == test_y))
    print(f"{steps} steps: {counts}; test accuracy {accuracy:.3f}")


def main(argv: list[str] | None = None) -> None:
    defaults = Config()
    parser = argparse.ArgumentParser(description=__doc__)
    for name, value in vars(defaults).items():
        parser.add_argument(f"--{name}", type=type(value), default=value)
    config = Config(**vars(parser.parse_args(argv)))
    # mp_prefetch reads absl flags, which absl.app.run would have parsed.
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    train(config)


if __name__ == "__main__":
    main()
