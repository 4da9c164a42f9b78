"""The demo's model (the experiments' small CNN) and device choice."""

from __future__ import annotations

import torch
from torch import nn

from ..experiments.models import CNNConfig, SmallCNN


def small_cnn(width: int = 16, hidden: int = 128, classes: int = 10) -> nn.Module:
    """The experiments' :class:`~dataecho.experiments.models.SmallCNN` at the demo's size.

    Two strided convolutions (about 0.5 M multiply-adds per 28x28 image) keep a training
    step of a 128-image batch near 20 ms on one idle CPU core, so the demo's runs fit in
    minutes.

    Example:
        >>> small_cnn()(torch.zeros(2, 1, 28, 28)).shape
        torch.Size([2, 10])
    """
    return SmallCNN(CNNConfig(image_size=28, channels=(width, 2 * width), hidden=hidden,
                              classes=classes))


def pick_device(name: str = "auto", threads: int = 1) -> tuple[torch.device, str]:
    """The training device and a sentence saying what was chosen and why.

    On CPU the trainer is pinned to ``threads`` intra-op threads: the DataLoader worker
    needs a core of its own, or it and the training step starve each other and the
    measured ``R`` is about CPU contention, not the network.

    Example:
        >>> pick_device("cpu", 1)[0]
        device(type='cpu')
    """
    if name not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {name!r}")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch.cuda.is_available() is False; pass "
                         "--device cpu or --device auto")
    torch.set_num_threads(threads)
    if name != "cpu" and torch.cuda.is_available():
        device = torch.device("cuda")
        return device, (f"device: CUDA ({torch.cuda.get_device_name(0)}); the input "
                        f"pipeline runs on the CPU, trainer host threads pinned to {threads}")
    return torch.device("cpu"), (
        f"device: CPU; trainer pinned to {threads} thread(s) (torch.set_num_threads) so the "
        "DataLoader worker has a core of its own")
