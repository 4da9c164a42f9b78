"""Workload data in memory: training examples plus a fixed evaluation set, cached.

Each process loads a data set once (``functools.lru_cache``); the loaders of
``dataecho.datasets`` cache the decoded arrays on disk, so a new trial process pays
about a second, not a decode.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class Data:
    """A workload's data in memory: training examples and the fixed evaluation set."""

    train: Any  # map-style (len and indexing); indexing is the read that echoing saves
    eval_inputs: torch.Tensor
    eval_targets: torch.Tensor
    num_classes: int  # classes, or the vocabulary size for a language model


@functools.lru_cache(maxsize=4)
def image_data(source: str, pad: int, eval_size: int, mean: float, std: float) -> Data:
    """Training examples ``(padded uint8 image, label)`` and normalised evaluation images.

    Example:
        >>> d = image_data("digits", 1, 450, 0.3, 0.4)
        >>> len(d.train), d.train[0][0].shape, tuple(d.eval_inputs.shape)
        (1347, (10, 10), (450, 1, 8, 8))
    """
    if source == "fashion_mnist":
        from dataecho.datasets import load_fashion_mnist

        x_train, y_train = load_fashion_mnist("train")
        x_test, y_test = load_fashion_mnist("test")
    elif source == "digits":
        from dataecho.datasets import load_digits, split_train_test

        x_train, y_train, x_test, y_test = split_train_test(*load_digits(), seed=0)
    else:
        raise ValueError(f"source must be 'fashion_mnist' or 'digits', got {source!r}")
    padded = np.pad(x_train, ((0, 0), (pad, pad), (pad, pad)))
    train = list(zip(padded, y_train.tolist(), strict=True))
    # A fixed subset, the same for every trial, drawn once with its own seed.
    pick = np.sort(np.random.default_rng(0).permutation(len(x_test))[:eval_size])
    scale = 255.0 if x_test.dtype == np.uint8 else 1.0
    inputs = ((torch.from_numpy(x_test[pick]).float() / scale - mean) / std).unsqueeze(1)
    return Data(train, inputs, torch.from_numpy(y_test[pick]), int(y_train.max()) + 1)


@functools.lru_cache(maxsize=2)
def text_data(seq_len: int, eval_size: int) -> Data:
    """Training windows of ``seq_len + 1`` token ids and a fixed set of validation windows.

    Example:
        >>> d = text_data(32, 256)
        >>> d.train.shape[1], tuple(d.eval_inputs.shape), d.num_classes
        (33, (256, 33), 85)
    """
    from dataecho.datasets import lm_splits, load_shakespeare

    splits = lm_splits(load_shakespeare(), seq_len, 0.1)
    pick = np.sort(np.random.default_rng(0).permutation(len(splits.val))[:eval_size])
    rows = torch.from_numpy(splits.val[pick].astype(np.int64))
    return Data(splits.train, rows, rows, len(splits.vocab))
