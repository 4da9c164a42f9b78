"""The workloads: data, model, augmentation, evaluation and target, one frozen dataclass each.

``WORKLOADS`` maps a name to its definition; trial processes look workloads up by name,
so nothing but the name crosses a process boundary. Loaded data is cached per process.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .augment import CropFlip
from .data import Data, image_data, text_data
from .models import CharTransformer, CNNConfig, GPTConfig, SmallCNN


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What every workload defines; subclasses add the model and the data.

    The learning-rate schedule is a function of the step: ``linear`` decays from the
    trial's learning rate to 0 at the step where the fresh-example budget runs out
    (``budget * factor / batch_size``), so every condition sees the same schedule as a
    function of fresh examples; ``constant`` keeps it fixed (the paper's Transformer).
    """

    name: str
    metric: str  # "accuracy" (higher is better) or "loss" (nats per token, lower is better)
    target: float  # the out-of-sample value a trial must reach
    target_why: str  # why this target, for the report
    batch_size: int  # the default condition's batch size
    fresh_budget: int  # fresh examples a trial may read before it counts as not reaching
    evals: int = 50  # evaluations spread evenly over the budget (50: every 2%)
    schedule: str = "linear"  # "linear" decay to 0 at the budget, or "constant"
    lr_range: tuple[float, float] = (0.01, 1.0)  # searched log-uniformly
    one_minus_momentum_range: tuple[float, float] = (0.01, 0.3)  # searched log-uniformly
    variants: tuple[str, ...] = ("before_augmentation", "after_augmentation", "batch")
    clip_norm: float | None = None  # gradient-norm clipping, None for none
    trial_seconds: float = 30.0  # CPU seconds of a baseline trial to the target (for the ETA)

    @property
    def higher_is_better(self) -> bool:
        """True for accuracy, False for a loss."""
        return self.metric == "accuracy"

    def reached(self, value: float) -> bool:
        """Whether ``value`` is at or beyond the target."""
        return value >= self.target if self.higher_is_better else value <= self.target

    def budget(self, batch_size: int) -> int:
        """The fresh-example budget at ``batch_size``: ``fresh_budget`` up to the default
        batch size, growing with its square root above it (large batches need more
        examples to reach a target, and a budget of a few hundred steps would cut them
        off before the schedule ends).

        Example:
            >>> w = Workload(name="x", metric="loss", target=1.0, target_why="",
            ...              batch_size=128, fresh_budget=1000)
            >>> w.budget(64), w.budget(512)
            (1000, 2000)
        """
        return round(self.fresh_budget * math.sqrt(max(1.0, batch_size / self.batch_size)))

    def config(self) -> dict[str, Any]:
        """The resolved definition, JSON-serialisable, stored with every trial."""
        return {"kind": type(self).__name__, **asdict(self)}

    def data(self) -> Data:
        """The data set (cached per process)."""
        raise NotImplementedError

    def augment(self) -> Callable[[Any, np.random.Generator], Any] | None:
        """The per-example augmentation ``fn(example, rng)``, or None."""
        return None

    def model(self) -> nn.Module:
        """A freshly initialised model (seed torch first)."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """Mean training loss of one collated batch."""
        raise NotImplementedError

    def evaluate(self, model: nn.Module, data: Data) -> float:
        """The metric on the fixed evaluation set."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class ImageWorkload(Workload):
    """Image classification with random-crop (zero padding) and flip augmentation.

    Training images are stored padded, so the augmentation is a slice and an optional
    reversal; examples are ``(padded uint8 image, label)`` tuples.
    """

    source: str  # "fashion_mnist" or "digits"
    pad: int = 2  # pixels of zero padding on each side before the random crop
    flip: bool = True  # random horizontal flips (off for digits, where they change meaning)
    cnn: CNNConfig = field(default_factory=CNNConfig)
    eval_size: int = 10_000  # evaluation examples, a fixed subset of the test split
    mean: float = 0.286  # pixel mean of the training set (0..1 scale), for normalisation
    std: float = 0.353  # pixel standard deviation of the training set

    def data(self) -> Data:
        return image_data(self.source, self.pad, self.eval_size, self.mean, self.std)

    def augment(self) -> CropFlip:
        return CropFlip(self.cnn.image_size, self.pad, self.flip)

    def model(self) -> nn.Module:
        return SmallCNN(self.cnn)

    def inputs(self, images: np.ndarray) -> torch.Tensor:
        """Normalised float ``[N, 1, H, W]`` from raw ``[N, H, W]`` images."""
        x = torch.from_numpy(np.ascontiguousarray(images)).float()
        scale = 255.0 if images.dtype == np.uint8 else 1.0
        return ((x / scale - self.mean) / self.std).unsqueeze(1)

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        images, labels = batch
        return F.cross_entropy(model(self.inputs(images)), torch.from_numpy(labels))

    def evaluate(self, model: nn.Module, data: Data) -> float:
        correct = 0
        with torch.no_grad():
            for i in range(0, len(data.eval_targets), 1000):
                logits = model(data.eval_inputs[i:i + 1000])
                correct += int((logits.argmax(1) == data.eval_targets[i:i + 1000]).sum())
        return correct / len(data.eval_targets)


@dataclass(frozen=True, kw_only=True)
class TextWorkload(Workload):
    """Character-level language modelling on Shakespeare's complete works.

    An example is a non-overlapping window of ``seq_len + 1`` characters from the first
    90% of the text; evaluation is the mean next-character cross-entropy (nats) over a
    fixed subset of windows from the last 10%. There is no augmentation, so echoing
    before and after augmentation build the same pipeline; the variants are example
    echoing (named ``example``) and batch echoing.
    """

    seq_len: int = 32  # characters of context per example
    n_layer: int = 2  # Transformer blocks
    n_embd: int = 128  # model width
    n_head: int = 4  # attention heads
    eval_size: int = 256  # validation windows in the fixed evaluation subset

    def data(self) -> Data:
        return text_data(self.seq_len, self.eval_size)

    def model(self) -> nn.Module:
        config = GPTConfig(vocab_size=self.data().num_classes, block_size=self.seq_len,
                           n_layer=self.n_layer, n_head=self.n_head, n_embd=self.n_embd)
        return CharTransformer(config)

    def _nll(self, model: nn.Module, rows: torch.Tensor) -> torch.Tensor:
        logits = model(rows[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        return self._nll(model, torch.from_numpy(np.asarray(batch, dtype=np.int64)))

    def evaluate(self, model: nn.Module, data: Data) -> float:
        with torch.no_grad():
            total = sum(float(self._nll(model, data.eval_inputs[i:i + 64])) * len(
                data.eval_inputs[i:i + 64]) for i in range(0, len(data.eval_inputs), 64))
        return total / len(data.eval_inputs)


FMNIST = ImageWorkload(
    name="fmnist",
    metric="accuracy",
    target=0.87,
    target_why=(
        "87% test accuracy on all 10,000 test images. The CPU-sized CNN (16/32 "
        "channels) with crop+flip augmentation ends near 89% at the end of the "
        "192k-example budget (linear decay to zero) and reaches 87% after about 750 "
        "steps at batch 128: about 2 points below its final accuracy, like the paper's "
        "91% for a ResNet-32 that ends near 92.5%. 90% is beyond this model within the "
        "budget, and the 4x costlier 32/64-channel CNN needed 2,000-2,500 steps for it "
        "in a pilot, which the full protocol's CPU budget cannot afford."
    ),
    batch_size=128,
    fresh_budget=192_000,
    # All 10,000 test images: the accuracy estimate's standard error is then 0.34
    # points at 87% (0.48 with 5,000), which matters because the curve is shallow there.
    evals=48,
    source="fashion_mnist",
    lr_range=(0.01, 0.4),
    one_minus_momentum_range=(0.03, 0.3),
    trial_seconds=30.0,
)

DIGITS = ImageWorkload(
    name="digits",
    metric="accuracy",
    target=0.80,
    target_why="smoke-test workload: a target the tiny CNN reaches in about 100 steps",
    batch_size=32,
    fresh_budget=4_800,
    evals=12,
    source="digits",
    pad=1,
    flip=False,
    cnn=CNNConfig(image_size=8, channels=(8, 16), hidden=32),
    eval_size=450,
    mean=0.30,
    std=0.40,
    lr_range=(0.05, 0.5),
    one_minus_momentum_range=(0.05, 0.2),
    trial_seconds=0.6,
)

LM = TextWorkload(
    name="lm",
    metric="loss",
    target=2.1,
    target_why=(
        "2.1 nats per character on held-out text. With SGD + Nesterov momentum (the "
        "paper's optimizer for its Transformers) this 2-layer, width-128 model leaves the "
        "unigram plateau (about 2.45) after 300-500 steps and reaches 2.1 in about 600 "
        "steps at batch 32 (about 19k fresh windows). The first quick run used 2.0: the "
        "curve flattens there (0.03 nats per 100 steps), so evaluation noise moves the "
        "crossing by a larger share; 2.0 took 1.5x the steps (920); 1.8 takes more "
        "than twice as long, which the full protocol's CPU budget does not allow. The "
        "quick run's echo/baseline ratios were 0.77 (example) and 0.95 (batch) at 2.0 "
        "and 0.80 and 0.89 at 2.1: the move does not favour echoing."
    ),
    batch_size=32,
    fresh_budget=48_000,
    evals=50,
    schedule="constant",
    clip_norm=1.0,
    lr_range=(0.02, 0.6),
    one_minus_momentum_range=(0.03, 0.3),
    variants=("example", "batch"),
    trial_seconds=40.0,
)

WORKLOADS: dict[str, Workload] = {w.name: w for w in (FMNIST, LM, DIGITS)}
