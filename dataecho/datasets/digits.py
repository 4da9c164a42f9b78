"""The 8x8 handwritten digits shipped inside scikit-learn: a workload for smoke tests.

1,797 images that load in milliseconds without a download, so tests and examples
can train a real classifier end to end in well under a second. scikit-learn is
imported only when the data is loaded; the core of dataecho needs numpy alone.
"""

from __future__ import annotations

import numpy as np


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """Loads the scikit-learn digits.

    Returns:
        ``(images, labels)``: float32 ``[1797, 8, 8]`` scaled to 0..1 (the raw
        pixel values are 0..16) and int64 ``[1797]`` in 0..9.

    Raises:
        ImportError: scikit-learn is not installed.

    Example:
        >>> images, labels = load_digits()
        >>> images.shape, images.dtype, float(images.max()), labels.dtype
        ((1797, 8, 8), dtype('float32'), 1.0, dtype('int64'))
    """
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as error:
        raise ImportError(
            "load_digits needs scikit-learn: `pip install scikit-learn` "
            "(or `pip install dataecho[demo]`)"
        ) from error
    bunch = sklearn_digits()
    images = (np.asarray(bunch.images, dtype=np.float32) / 16.0).astype(np.float32)
    return images, np.asarray(bunch.target, dtype=np.int64)


def split_train_test(
    images: np.ndarray, labels: np.ndarray, *, test_fraction: float = 0.25, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Splits a labelled set into train and test parts, the same way for the same seed.

    The split is stratified: each class gives ``round(test_fraction * count)`` of
    its examples to the test part. With 1,797 digits a plain random split leaves
    class shares a few percent off, which shows up as noise in smoke-test accuracy.
    Both parts keep the original order of their examples.

    Args:
        images: ``[N, ...]`` examples.
        labels: ``[N]`` integer labels.
        test_fraction: Share of each class held out; in (0, 1).
        seed: Seed of the per-class permutations.

    Returns:
        ``(train_images, train_labels, test_images, test_labels)``.

    Raises:
        TypeError: ``seed`` is not an int.
        ValueError: The lengths differ, or ``test_fraction`` or ``seed`` is out of range.

    Example:
        >>> x_train, y_train, x_test, y_test = split_train_test(*load_digits(), seed=0)
        >>> len(x_train), len(x_test)
        (1347, 450)
    """
    if len(images) != len(labels):
        raise ValueError(
            f"split_train_test: images and labels must have the same length, got "
            f"{len(images)} and {len(labels)}; pass the arrays from one load"
        )
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(
            f"split_train_test: test_fraction must lie strictly between 0 and 1, got "
            f"{test_fraction}; use e.g. 0.25"
        )
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"split_train_test: seed must be an int, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"split_train_test: seed must be >= 0, got {seed}")
    labels = np.asarray(labels)
    is_test = np.zeros(len(labels), dtype=bool)
    for rank, cls in enumerate(np.unique(labels)):
        members = np.flatnonzero(labels == cls)
        # Keyed by (seed, class rank) so each class's draw is independent of the others.
        order = np.random.default_rng((seed, rank)).permutation(members)
        is_test[order[: round(test_fraction * len(members))]] = True
    return images[~is_test], labels[~is_test], images[is_test], labels[is_test]
