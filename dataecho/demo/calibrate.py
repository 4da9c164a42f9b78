"""Start-up calibration: time the training step, then throttle the server to a chosen R."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .augment import crop_flip
from .train import Step


@dataclass(frozen=True)
class Calibration:
    """What start-up measured and set.

    Attributes:
        t_down: median seconds of one training step (the downstream time per batch).
        ratio: the R asked for.
        bytes_per_batch: shard bytes holding one batch's worth of examples.
        bandwidth: bytes per second set on the server: one batch's bytes take
            ``ratio * t_down`` to arrive.
    """

    t_down: float
    ratio: float
    bytes_per_batch: float
    bandwidth: float

    @property
    def fetch_s(self) -> float:
        """Seconds to fetch one batch's bytes at ``bandwidth``."""
        return self.bytes_per_batch / self.bandwidth


def time_step(step: Step, images: np.ndarray, labels: np.ndarray, *, batch_size: int,
              steps: int, seed: int = 0) -> float:
    """Median seconds of ``steps`` training steps on augmented real batches (after 3 warm-up).

    Example:
        >>> from dataecho.demo.model import small_cnn
        >>> step = Step(small_cnn(), 1e-3, torch.device("cpu"))
        >>> x = np.zeros((64, 28, 28), np.uint8); y = np.zeros(64, np.int64)
        >>> time_step(step, x, y, batch_size=32, steps=2) > 0
        True
    """
    rng, augment = np.random.default_rng(seed), crop_flip(2)
    times = []
    for k in range(steps + 3):
        pick = rng.integers(0, len(images), batch_size)
        crops = [augment((np.pad(images[i], 2), int(labels[i]), 0), rng)[0] for i in pick]
        batch = (torch.from_numpy(np.stack(crops)), torch.from_numpy(labels[pick]), None)
        began = time.perf_counter()
        step(batch)
        if k >= 3:
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def time_step_streaming(step: Step, loader: Iterable[Any], *, steps: int) -> float:
    """Median seconds of ``steps`` training steps on batches from ``loader`` (after 3).

    Only the step is timed, not the wait for the next batch. Run on the baseline
    loader (``TarShards`` + decode + augment in the workers), this is ``t_down`` as the
    runs will see it: on a 2-core machine the worker's decoding competes with the
    trainer, and a step measured on an idle machine is faster, which would give an
    ``R`` larger than the one asked for. ``steps + 3`` must fit in one epoch.
    """
    times: list[float] = []
    it = iter(loader)
    try:
        for k, batch in enumerate(it):
            began = time.perf_counter()
            step(batch)
            if k >= 3:
                times.append(time.perf_counter() - began)
            if len(times) >= steps:
                break
    finally:
        close = getattr(it, "close", None)  # EchoBatches: stops its reader thread
        if callable(close):
            close()
    return statistics.median(times)


def calibrate(t_down: float, ratio: float, bytes_per_sample: float,
              batch_size: int) -> Calibration:
    """The bandwidth at which fetching a batch's shard bytes takes ``ratio * t_down``.

    Example:
        >>> c = calibrate(0.02, 5.0, 2000.0, 100)
        >>> round(c.bandwidth), round(c.fetch_s, 3)
        (2000000, 0.1)
    """
    per_batch = bytes_per_sample * batch_size
    return Calibration(t_down, ratio, per_batch, per_batch / (ratio * t_down))
