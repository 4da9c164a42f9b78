"""Per-example image augmentation in numpy: random crop of a pre-padded image plus flip."""

from __future__ import annotations

from typing import Any

import numpy as np


class CropFlip:
    """Crops a random ``size x size`` window of a padded image and maybe flips it.

    The image arrives padded by ``pad`` pixels on each side (the workload pads the
    training set once, so each call is a slice, not an ``np.pad``: 80 µs saved per
    example). One scalar draw decides both offsets and the flip (a scalar draw costs
    about 2 µs, an array draw about 12 µs). The example is a tuple whose first field is
    the image (``(image, label)``, the demo's ``(image, label, index)``); the other
    fields pass through. The experiments and the demo share this one augmentation.

    Args:
        size: side of the output image; None: the input's side less ``2 * pad``.
        pad: padding on each side of the stored image.
        flip: whether to flip horizontally with probability 1/2.

    Example:
        >>> image = np.arange(36, dtype=np.uint8).reshape(6, 6)
        >>> out, label = CropFlip(4, 1, flip=False)((image, 3), np.random.default_rng(0))
        >>> out.shape, label
        ((4, 4), 3)
    """

    def __init__(self, size: int | None, pad: int, flip: bool = True) -> None:
        self.size, self.pad, self.flip = size, pad, flip
        self._side = 2 * pad + 1
        self._choices = self._side * self._side * (2 if flip else 1)
        # Map stages name their function in the pipeline's repr; give the parameters.
        self.__qualname__ = f"CropFlip(size={size}, pad={pad}, flip={flip})"

    def __call__(self, example: tuple[Any, ...], rng: np.random.Generator) -> Any:
        image, *rest = example
        flip, offset = divmod(int(rng.integers(0, self._choices)), self._side * self._side)
        i, j = divmod(offset, self._side)
        h, w = (self.size, self.size) if self.size is not None else (
            image.shape[0] - 2 * self.pad, image.shape[1] - 2 * self.pad)
        out = image[i:i + h, j:j + w]
        # Contiguous: torch's default collate cannot take a flipped view (negative stride).
        return (np.ascontiguousarray(out[:, ::-1]) if flip else out, *rest)

    def __repr__(self) -> str:
        return self.__qualname__
