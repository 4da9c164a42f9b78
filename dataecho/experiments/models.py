"""The two small models the experiments train: a strided CNN and a character Transformer.

Both are sized for a 2-core CPU. On this machine (one torch thread) the CNN takes about
30 ms for a training step at batch 128 on 28x28 images; 3x3 convolutions at full
resolution were 2-4x slower for no gain at this accuracy, hence the stride-2 stem. The
Transformer follows nanoGPT's layout (pre-norm blocks, learned positions, causal
attention) at 2 layers of width 128.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class CNNConfig:
    """Shape of :class:`SmallCNN`.

    Example:
        >>> CNNConfig(image_size=8, channels=(8, 16), hidden=32).features
        64
    """

    image_size: int = 28  # side of the square input, pixels (one channel)
    channels: tuple[int, int] = (16, 32)  # output channels of the two stride-2 convolutions
    hidden: int = 64  # units of the fully connected layer before the classifier
    classes: int = 10  # number of output classes

    @property
    def features(self) -> int:
        """Inputs of the fully connected layer: channels times the twice-halved area."""
        half = -(-self.image_size // 2)  # each stride-2 convolution rounds up
        side = -(-half // 2)
        return self.channels[1] * side * side


class SmallCNN(nn.Module):
    """conv5x5/2 -> BN -> ReLU -> conv3x3/2 -> BN -> ReLU -> FC -> ReLU -> FC.

    Example:
        >>> model = SmallCNN(CNNConfig(image_size=8, channels=(4, 8), hidden=16))
        >>> model(torch.zeros(2, 1, 8, 8)).shape
        torch.Size([2, 10])
    """

    def __init__(self, config: CNNConfig) -> None:
        super().__init__()
        c1, c2 = config.channels
        self.net = nn.Sequential(
            nn.Conv2d(1, c1, 5, stride=2, padding=2, bias=False), nn.BatchNorm2d(c1), nn.ReLU(),
            nn.Conv2d(c1, c2, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c2), nn.ReLU(),
            nn.Flatten(), nn.Linear(config.features, config.hidden), nn.ReLU(),
            nn.Linear(config.hidden, config.classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[N, classes]`` for images ``[N, 1, H, W]``."""
        return self.net(x)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class GPTConfig:
    """Shape of :class:`CharTransformer` (nanoGPT's field names).

    Example:
        >>> GPTConfig(vocab_size=85).n_embd
        128
    """

    vocab_size: int  # characters in the alphabet (token ids 0..vocab_size-1)
    block_size: int = 64  # context length in characters (the example is block_size + 1)
    n_layer: int = 2  # Transformer blocks
    n_head: int = 4  # attention heads per block; n_embd must divide evenly
    n_embd: int = 128  # width of the residual stream
    mlp_ratio: int = 4  # hidden width of the MLP as a multiple of n_embd


class Block(nn.Module):
    """Pre-norm Transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        d = config.n_embd
        self.n_head = config.n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, config.mlp_ratio * d), nn.GELU(),
                                 nn.Linear(config.mlp_ratio * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Maps ``[B, T, n_embd]`` to the same shape, attending causally."""
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln_2(x))  # type: ignore[no-any-return]


class CharTransformer(nn.Module):
    """A character-level GPT: token + position embedding, blocks, final norm, head.

    Example:
        >>> model = CharTransformer(GPTConfig(vocab_size=5, block_size=8, n_embd=16))
        >>> model(torch.zeros(2, 8, dtype=torch.long)).shape
        torch.Size([2, 8, 5])
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError(
                f"GPTConfig: n_embd must be a multiple of n_head, got n_embd={config.n_embd} "
                f"and n_head={config.n_head}; change one of them"
            )
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.apply(_init)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, T, vocab_size]`` for token ids ``[B, T]`` (T <= block_size)."""
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # type: ignore[no-any-return]


def _init(module: nn.Module) -> None:
    # nanoGPT's initialisation: N(0, 0.02) weights, zero biases.
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
