"""A plain-iterator pipeline (NumPy, JAX style) with a JSON checkpoint.

Run: python examples/numpy_iterator.py
"""

from __future__ import annotations

import json

import numpy as np

import dataecho


def augment(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return image[:, ::-1] if rng.random() < 0.5 else image


def build() -> dataecho.Stage[np.ndarray]:
    images = np.random.default_rng(0).random((500, 8, 8), dtype=np.float32)
    return dataecho.pipeline(dataecho.Source(images, seed=0, num_epochs=2), augment=augment,
                             echo="before_augmentation", factor=2.5, batch_size=50, seed=0)


def main() -> None:
    pipe = build()
    print(pipe)
    for _ in range(7):
        next(pipe)
    saved = json.dumps(pipe.state_dict())  # a few hundred bytes, no elements
    rest = [batch.sum() for batch in pipe]
    resumed = build()
    resumed.load_state_dict(json.loads(saved))
    assert [batch.sum() for batch in resumed] == rest
    print(f"checkpoint of {len(saved)} bytes resumed exactly; {pipe.stats()}")


if __name__ == "__main__":
    main()
