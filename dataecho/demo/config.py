"""The demo's configuration: one frozen dataclass, three presets, one argparse."""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

from ..datasets.fashion_mnist import DEFAULT_ROOT, FILES, missing_files
from ..factor import AUGMENTED_MAX_FACTOR, DEFAULT_MAX_FACTOR
from ..pipeline import VARIANTS

#: Where the demo's echo can stand: dataecho's variants, and "device" (DeviceEcho:
#: decoded batches echoed where the trainer runs, each copy augmented there).
ARMS = (*VARIANTS, "device")


@dataclass(frozen=True)
class DemoConfig:
    """Everything that decides a demo run. Seconds are wall-clock; sizes are examples."""

    preset: str = "default"  # which preset the other fields came from
    ratio: float = 5.0  # R to set up: seconds to fetch a batch / seconds per training step
    factor: float | None = None  # fixed echo factor of run (b); None: default_factor(ratio)
    adaptive: bool = True  # also run adaptive echoing (c)
    max_factor: int | None = None  # adaptive echoing's most uses of one example; None: Auto's
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
    buffer_size: int = 1280  # shuffle window: ten batches of distinct examples (x factor copies)
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
    # Folder of the four Fashion-MNIST .gz files; None: Debian's, /usr/share/datasets/...
    data: str | None = None

    @property
    def fixed_factor(self) -> float:
        """The factor of the fixed-echo run: ``factor``, else :func:`default_factor` of R."""
        return float(self.factor) if self.factor is not None else default_factor(self.ratio)

    def as_dict(self) -> dict[str, object]:
        """The resolved configuration, for the result file."""
        return {**dataclasses.asdict(self), "fixed_factor": self.fixed_factor}


def default_factor(ratio: float) -> float:
    """The fixed factor of run (b) without ``--factor``: ``R`` rounded half up, at least 2.

    Half up (``floor(R + 0.5)``), not Python's ``round`` (halves to even, which gives
    2.5 -> 2 but 3.5 -> 4). At least 2 because ``e = 1`` is no echoing: for ``R``
    below 1.5 run (b) would repeat the baseline.

    Example:
        >>> default_factor(4.76), default_factor(4.5), default_factor(2.5), default_factor(1.2)
        (5.0, 5.0, 3.0, 2.0)
    """
    return float(max(2, math.floor(ratio + 0.5)))


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
    p.add_argument("--factor", type=float,
                   help="fixed echo factor, >= 1 (default: R rounded half up, at least 2, "
                        "since e=1 is no echoing)")
    p.add_argument("--target", type=float, help="test accuracy that ends a run, in (0, 1)")
    p.add_argument("--budget", type=float, dest="budget_s",
                   help="training seconds per run (default: 2,000 baseline steps at R)")
    p.add_argument("--variant", choices=ARMS,
                   help="where echoing stands (default before_augmentation; device: "
                        "DeviceEcho, copies augmented where the trainer runs)")
    p.add_argument("--max-factor", type=int,
                   help=f"adaptive echoing's most uses of one example, >= 1 (default "
                        f"{AUGMENTED_MAX_FACTOR} before augmentation, {DEFAULT_MAX_FACTOR} "
                        "after it and for batches)")
    p.add_argument("--no-adaptive", dest="adaptive", action="store_false", default=None,
                   help="skip the adaptive run")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"),
                   help="training device (default auto: CUDA if available)")
    p.add_argument("--seed", type=int, help="the one seed, >= 0 (default 0)")
    p.add_argument("--out", help="folder for the table, plot and JSON (default runs/demo-TIME)")
    p.add_argument("--data", metavar="DIR",
                   help=f"folder holding the four Fashion-MNIST files ({', '.join(FILES)}), "
                        f"as downloaded (default {DEFAULT_ROOT})")
    args = vars(p.parse_args(argv))
    smoke, quick = args.pop("smoke"), args.pop("quick")
    preset = "smoke" if smoke else "quick" if quick else "default"
    fields = {**PRESETS[preset], **{k: v for k, v in args.items() if v is not None}}
    cfg = DemoConfig(preset=preset, **fields)
    try:
        check_config(cfg)
    except ValueError as error:
        p.error(str(error))  # the message and exit status 2, before any data or training
    if not cfg.out:
        cfg = dataclasses.replace(cfg, out=str(Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")))
    return cfg


def check_config(cfg: DemoConfig) -> DemoConfig:
    """Returns ``cfg`` after checking every field a flag sets; a ValueError names the flag.

    Runs before any data is prepared, so a bad value fails at once, not after minutes
    of calibration and a baseline run.

    Example:
        >>> try:
        ...     check_config(DemoConfig(ratio=float("inf")))
        ... except ValueError as e:
        ...     print(str(e)[:40])
        --ratio must be a finite number >= 1 (se
    """
    if not (math.isfinite(cfg.ratio) and cfg.ratio >= 1):
        raise ValueError(
            f"--ratio must be a finite number >= 1 (seconds to fetch a batch over seconds "
            f"per training step: upstream at least as slow as a step), got {cfg.ratio:g}; "
            "pass e.g. --ratio 5")
    if cfg.factor is not None and not (math.isfinite(cfg.factor) and cfg.factor >= 1):
        raise ValueError(
            f"--factor must be a finite number >= 1 (uses of each fresh example; 1 is no "
            f"echoing), got {cfg.factor:g}; pass e.g. --factor 4, or leave it out for R "
            f"rounded half up (here {default_factor(cfg.ratio):g})")
    if cfg.max_factor is not None and (isinstance(cfg.max_factor, bool) or not isinstance(
            cfg.max_factor, int) or cfg.max_factor < 1):
        raise ValueError(
            f"--max-factor must be an int >= 1 (the most uses of one example in adaptive "
            f"echoing; 1 is no echoing), got {cfg.max_factor!r}; pass e.g. --max-factor 8 "
            f"for an R above {DEFAULT_MAX_FACTOR}")
    if not 0 < cfg.target < 1:
        raise ValueError(
            f"--target must be an accuracy in (0, 1), got {cfg.target:g}; pass e.g. "
            "--target 0.88 for 88%")
    if cfg.budget_s is not None and not (math.isfinite(cfg.budget_s) and cfg.budget_s > 0):
        raise ValueError(
            f"--budget must be a finite number of seconds > 0, got {cfg.budget_s:g}; pass "
            "e.g. --budget 300, or leave it out for 2,000 baseline steps at the calibrated R")
    if not 0 <= cfg.seed < 2**63:
        raise ValueError(
            f"--seed must be an int in [0, 2**63), got {cfg.seed}; pass e.g. --seed 0")
    if cfg.data is not None and missing_files(cfg.data):
        raise ValueError(
            f"--data must be a folder holding the four Fashion-MNIST files, but "
            f"{cfg.data} lacks {', '.join(missing_files(cfg.data))}; pass the folder you "
            f"downloaded them to (the gzip files as published, names unchanged), or leave "
            f"--data out for {DEFAULT_ROOT}")
    if cfg.device not in ("auto", "cpu", "cuda"):
        raise ValueError(
            f"--device must be auto, cpu or cuda, got {cfg.device!r}; pass --device auto")
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError(
                f"--device cuda needs a CUDA GPU, but torch.cuda.is_available() is False "
                f"(torch {torch.__version__}); pass --device cpu, or --device auto to use a "
                "GPU only where there is one")
    return cfg
