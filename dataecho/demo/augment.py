"""The demo's augmentation (numpy, in DataLoader workers) and normalisation (trainer)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..experiments.augment import CropFlip
from .remote import decode_sample

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


class PaddedDecode:
    """The demo's decode: ``decode_sample``, then the image zero-padded by ``pad`` pixels.

    Padding once per fresh example, in the decode, lets the shared
    :class:`dataecho.experiments.augment.CropFlip` crop every echoed copy with a slice.

    Args:
        pad: pixels of zero padding on each side, the crop's largest shift.

    Example:
        >>> from dataecho.demo.remote import encode_image
        >>> sample = {"__key__": "00000007", "__url__": "s.tar", "png": encode_image(
        ...     np.zeros((4, 4), np.uint8)), "cls": b"3"}
        >>> image, label, index = PaddedDecode(pad=2)(sample)
        >>> image.shape, label, index
        ((8, 8), 3, 7)
    """

    def __init__(self, pad: int = 2) -> None:
        if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad <= 8:
            raise ValueError(f"pad must be an int in [0, 8] pixels, got {pad!r}; pass pad=2")
        self.pad = pad
        self.__qualname__ = f"PaddedDecode(pad={pad})"  # what Map's repr shows

    def __call__(self, sample: dict[str, Any]) -> Example:
        image, label, index = decode_sample(sample)
        p = self.pad
        if not p:
            return image, label, index
        # A slice into zeros: the array np.pad returns, without its general machinery.
        h, w = image.shape
        padded = np.zeros((h + 2 * p, w + 2 * p), image.dtype)
        padded[p:-p, p:-p] = image
        return padded, label, index

    def __repr__(self) -> str:
        return self.__qualname__


def crop_flip(pad: int = 2) -> CropFlip:
    """The shared augmentation for the demo's images, padded by ``pad`` in the decode.

    Example:
        >>> crop_flip()
        CropFlip(size=None, pad=2, flip=True)
    """
    return CropFlip(None, pad, flip=True)


class BatchCropFlip:
    """The demo's crop and flip for a whole batch of padded images, where the trainer runs.

    For the ``device`` arm (:class:`dataecho.torch.DeviceEcho`): every image of a batch
    of ``(images, labels, indices)``, ``images`` uint8 ``[N, H + 2 pad, W + 2 pad]``,
    gets its own crop offsets and flip, drawn from ``generator`` on the batch's device,
    the same distribution :func:`crop_flip` draws in the workers.

    Example:
        >>> images = torch.arange(2 * 6 * 6, dtype=torch.uint8).reshape(2, 6, 6)
        >>> out, labels, _ = BatchCropFlip(pad=1)(
        ...     (images, torch.tensor([3, 4]), torch.tensor([0, 1])), torch.Generator())
        >>> tuple(out.shape), labels.tolist()
        ((2, 4, 4), [3, 4])
    """

    def __init__(self, pad: int = 2) -> None:
        if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad <= 8:
            raise ValueError(f"pad must be an int in [0, 8] pixels, got {pad!r}; pass pad=2")
        self.pad = pad
        self.__qualname__ = repr(self)  # what DeviceEcho's repr shows

    def __call__(self, batch: tuple[torch.Tensor, ...],
                 generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        images, *rest = batch
        n, height, width = images.shape
        p, device = self.pad, images.device
        h, w = height - 2 * p, width - 2 * p
        dy = torch.randint(0, 2 * p + 1, (n, 1), generator=generator, device=device)
        dx = torch.randint(0, 2 * p + 1, (n, 1), generator=generator, device=device)
        flip = torch.rand(n, 1, generator=generator, device=device) < 0.5
        rows = dy + torch.arange(h, device=device)
        cols = dx + torch.arange(w, device=device)
        cols = torch.where(flip, cols.flip(1), cols)
        # One gather for the whole batch: image i's rows[i] x cols[i] window.
        picked = images[torch.arange(n, device=device)[:, None, None], rows[:, :, None],
                        cols[:, None, :]]
        return (picked, *rest)

    def __repr__(self) -> str:
        return f"BatchCropFlip(pad={self.pad})"
