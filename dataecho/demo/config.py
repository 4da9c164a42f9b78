"""The demo's configuration: one frozen dataclass, three presets, one argparse."""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from ..pipeline import VARIANTS


@dataclass(frozen=True)
class DemoConfig:
    """Everything that decides a demo run. Seconds are wall-clock; sizes are examples."""

    preset: str = "default"  # which preset the other fields came from
    ratio: float = 5.0  # R to set up: seconds to fetch a batch / seconds per training step
    factor: float | None = None  # fixed echo factor of run (b); None: round(ratio)
    adaptive: bool = True  # also run adaptive echoing (c)
    # Where the echo stands: "before_augmentation" (the paper's best),
    # "after_augmentation" (identical copies) or "batch" (whole batches, in the trainer).
    variant: str = "before_augmentation"
    target: float = 0.88  # test accuracy (on the held-out subset) that ends a run
    budget_s: float | None = None  # training seconds a run may take; None: budget_steps
    budget_steps: int = 2000  # ...baseline steps at the calibrated R (it needs ~1,100)
    train_size: int | None = None  # training examples sharded and served; None: all 60,000
    eval_size: int = 2000  # fixed held-out test images evaluated
    eval_every: int = 100  # training steps between evaluations
    batch_size: int = 128  # examples per training step
    lr: float = 2e-3  # Adam learning rate, constant: time to target needs no schedule
    buffer_size: int = 1280  # shuffle window after the echo stage: ten batches
    pad: int = 2  # random-crop padding in pixels
    shard_size: int = 500  # examples per tar shard
    latency: float = 0.005  # seconds before each HTTP response starts
    calibration_steps: int = 30  # timed training steps that measure t_down
    calibrate_under_load: bool = True  # time t_down again while the baseline pipeline runs
    num_workers: int = 1  # DataLoader worker processes (the 2-core budget: 1 + trainer)
    threads: int = 1  # trainer intra-op threads on CPU
    device: str = "auto"  # "auto" (CUDA if available), "cpu" or "cuda"
    seed: int = 0  # seeds model init, shard order, echo draws, augmentation, shuffles
    out: str = ""  # output folder; "" means runs/demo-<timestamp>/

    @property
    def fixed_factor(self) -> float:
        """The factor of the fixed-echo run: ``factor``, else ``ratio`` rounded."""
        return float(self.factor) if self.factor is not None else float(max(2, round(self.ratio)))

    def as_dict(self) -> dict[str, object]:
        """The resolved configuration, for the result file."""
        return {**dataclasses.asdict(self), "fixed_factor": self.fixed_factor}


PRESETS: dict[str, dict[str, object]] = {
    # ~5 minutes on 2 CPU cores: the baseline needs ~1,300 steps at 5x the step time.
    "default": {},
    # under 2 minutes: a lower target, reached in about 400 steps.
    "quick": {"target": 0.83, "budget_steps": 800, "eval_every": 50},
    # seconds, for the test suite: a small subset, a low target, small batches.
    "smoke": {"target": 0.6, "budget_s": 8.0, "train_size": 2000, "eval_size": 500,
              "eval_every": 10, "batch_size": 64, "buffer_size": 256, "shard_size": 100,
              "calibration_steps": 5, "calibrate_under_load": False, "ratio": 2.0},
}


def parse_args(argv: list[str]) -> DemoConfig:
    """Parses ``dataecho demo`` arguments into a :class:`DemoConfig`.

    Example:
        >>> parse_args(["--quick", "--ratio", "4"]).ratio
        4.0
    """
    p = argparse.ArgumentParser(
        prog="dataecho demo",
        description="Train a small CNN on Fashion-MNIST streamed from a throttled local "
                    "HTTP server: no echoing, echoing at a fixed factor, adaptive echoing; "
                    "prints time and fresh examples to the target accuracy of each.")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="under 2 minutes (target 83%%)")
    size.add_argument("--smoke", action="store_true", help="seconds; for tests")
    p.add_argument("--ratio", type=float, help="R to set up, >= 1 (default 5)")
    p.add_argument("--factor", type=float, help="fixed echo factor (default: R rounded)")
    p.add_argument("--target", type=float, help="test accuracy that ends a run, in (0, 1)")
    p.add_argument("--budget", type=float, dest="budget_s",
                   help="training seconds per run (default: 2,000 baseline steps at R)")
    p.add_argument("--variant", choices=VARIANTS,
                   help="where echoing stands (default before_augmentation)")
    p.add_argument("--no-adaptive", dest="adaptive", action="store_false", default=None,
                   help="skip the adaptive run")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"))
    p.add_argument("--seed", type=int)
    p.add_argument("--out", help="folder for the table, plot and JSON (default runs/demo-TIME)")
    args = vars(p.parse_args(argv))
    smoke, quick = args.pop("smoke"), args.pop("quick")
    preset = "smoke" if smoke else "quick" if quick else "default"
    fields = {**PRESETS[preset], **{k: v for k, v in args.items() if v is not None}}
    cfg = DemoConfig(preset=preset, **fields)
    if not cfg.ratio >= 1:
        p.error(f"--ratio must be >= 1 (upstream at least as slow as a step), got {cfg.ratio}")
    if cfg.factor is not None and not cfg.factor >= 1:
        p.error(f"--factor must be >= 1, got {cfg.factor}")
    if not 0 < cfg.target < 1:
        p.error(f"--target must be an accuracy in (0, 1), got {cfg.target}")
    if cfg.budget_s is not None and not cfg.budget_s > 0:
        p.error(f"--budget must be > 0 seconds, got {cfg.budget_s}")
    if not cfg.out:
        cfg = dataclasses.replace(cfg, out=str(Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")))
    return cfg
