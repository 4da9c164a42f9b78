"""The demo's augmentation (numpy, in DataLoader workers) and normalisation (trainer)."""

from __future__ import annotations

import numpy as np
import torch

# Pixel mean and standard deviation of the Fashion-MNIST training images (0..1 scale).
MEAN, STD = 0.2860, 0.3530

Example = tuple[np.ndarray, int, int]  # (uint8 [H, W] image, label, index)


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 ``[N, H, W]`` -> float32 ``[N, 1, H, W]``, zero mean and unit variance.

    Done on whole batches in the trainer (on the GPU when there is one): workers ship
    uint8, a quarter of the bytes, and spend no time on it.

    Example:
        >>> normalize(torch.zeros(2, 28, 28, dtype=torch.uint8)).shape
        torch.Size([2, 1, 28, 28])
    """
    return ((images.float() * (1 / 255) - MEAN) * (1 / STD)).unsqueeze(1)


class CropFlip:
    """Random crop of the zero-padded image plus a horizontal flip with probability 1/2.

    Called as ``fn(example, rng)`` on ``(image, label, index)`` (what
    ``decode_sample`` gives): as ``EchoDataset(augment=...)``, the generator is keyed by
    the copy's position, so echoing before augmentation gives every copy of an example
    its own crop and flip (the paper's best variant).

    Args:
        pad: pixels of zero padding on each side; the crop shifts by up to ``pad``.

    Example:
        >>> image = np.arange(16, dtype=np.uint8).reshape(4, 4)
        >>> x, label, index = CropFlip(pad=0)((image, 3, 7), np.random.default_rng(0))
        >>> x.tolist() == image.tolist() or x.tolist() == image[:, ::-1].tolist(), label, index
        (True, 3, 7)
    """

    def __init__(self, pad: int = 2) -> None:
        if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad <= 8:
            raise ValueError(f"pad must be an int in [0, 8] pixels, got {pad!r}; pass pad=2")
        self.pad = pad
        self.__qualname__ = f"CropFlip(pad={pad})"  # what Map's repr shows

    def __call__(self, example: Example, rng: np.random.Generator) -> Example:
        image, label, index = example
        p = self.pad
        h, w = image.shape[:2]
        # One draw for all three decisions: each numpy call costs microseconds, and this
        # runs once per echoed copy.
        u = rng.random(3)
        dy, dx = int(u[0] * (2 * p + 1)) - p, int(u[1] * (2 * p + 1)) - p
        # The crop of the zero-padded image, without building the padded image.
        out = np.zeros_like(image)
        out[max(0, -dy) : h - max(0, dy), max(0, -dx) : w - max(0, dx)] = (
            image[max(0, dy) : h - max(0, -dy), max(0, dx) : w - max(0, -dx)])
        if u[2] < 0.5:
            out = np.ascontiguousarray(out[:, ::-1])
        return out, int(label), int(index)

    def __repr__(self) -> str:
        return self.__qualname__
