"""A condition: workload, echoing variant, factor, batch size and post-echo shuffle buffer.

Variants:

* ``baseline``: no echo stage.
* ``before_augmentation`` / ``after_augmentation``: example echoing on either side of
  the augmentation map; copies get independent or identical augmentations.
* ``example``: example echoing on a workload without augmentation, where the two
  positions build the same pipeline (read -> echo -> shuffle -> batch).
* ``batch``: batch echoing (whole batches repeated).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

VARIANT_NAMES = {
    "baseline": "baseline",
    "before_augmentation": "example echoing, before augmentation",
    "after_augmentation": "example echoing, after augmentation",
    "example": "example echoing",
    "batch": "batch echoing",
}
EXAMPLE_LEVEL = ("before_augmentation", "after_augmentation", "example")


@dataclass(frozen=True, order=True)
class Condition:
    """One cell of the protocol; every field is resolved (no defaults left implicit).

    Attributes:
        workload: the workload: a built-in name or an import string (``pkg.mod:attr``).
        variant: a key of ``VARIANT_NAMES``.
        factor: echoing factor (1 for the baseline).
        batch_size: examples per training step.
        buffer_size: items in the shuffle window after the echo stage; 1 is none.
            Items are examples for example echoing and batches for batch echoing.

    Example:
        >>> c = Condition("fmnist", "batch", 2, 128, 1)
        >>> c.pipeline_kwargs()["echo"], c.buffer_batches
        ('batch', 0.0)
    """

    workload: str
    variant: str
    factor: int
    batch_size: int
    buffer_size: int

    def __post_init__(self) -> None:
        if self.variant not in VARIANT_NAMES:
            raise ValueError(
                f"Condition: variant must be one of {', '.join(VARIANT_NAMES)}, got "
                f"{self.variant!r}"
            )
        if (self.variant == "baseline") != (self.factor == 1):
            raise ValueError(
                f"Condition: the baseline and only the baseline has factor 1, got variant "
                f"{self.variant!r} with factor {self.factor}"
            )
        if self.variant == "baseline" and self.buffer_size != 1:
            raise ValueError("Condition: the baseline has no echo stage, so buffer_size must be 1")

    @classmethod
    def default(cls, workload: str, variant: str, factor: int, batch_size: int,
                buffer_batches: float | None = None) -> Condition:
        """Builds a condition with the pipeline's default buffer unless one is given.

        ``buffer_batches`` is the window in batches' worth of examples: 0 is none, the
        default is 10 for example echoing and 0 for batch echoing (dataecho's defaults).

        Example:
            >>> Condition.default("lm", "example", 2, 32).buffer_size
            320
        """
        if variant == "baseline":
            return cls(workload, variant, 1, batch_size, 1)
        if buffer_batches is None:
            buffer_batches = 10 if variant in EXAMPLE_LEVEL else 0
        per_batch = batch_size if variant in EXAMPLE_LEVEL else 1
        return cls(workload, variant, factor, batch_size,
                   max(1, round(buffer_batches * per_batch)))

    @property
    def buffer_batches(self) -> float:
        """The shuffle window in batches' worth of examples (0 when there is none)."""
        if self.buffer_size <= 1:
            return 0.0
        per_batch = self.batch_size if self.variant in EXAMPLE_LEVEL else 1
        return self.buffer_size / per_batch

    def pipeline_kwargs(self) -> dict[str, Any]:
        """The arguments of ``dataecho.pipeline`` this condition needs."""
        if self.variant == "baseline":
            return {"echo": None, "factor": 1.0, "batch_size": self.batch_size,
                    "buffer_size": 1}
        echo = "before_augmentation" if self.variant == "example" else self.variant
        return {"echo": echo, "factor": float(self.factor), "batch_size": self.batch_size,
                "buffer_size": self.buffer_size}

    def label(self) -> str:
        """A short human label, e.g. ``batch e=2 B=128 buf=0``."""
        name = {"before_augmentation": "before", "after_augmentation": "after"}.get(
            self.variant, self.variant)
        return f"{name} e={self.factor} B={self.batch_size} buf={self.buffer_batches:g}"

    def as_dict(self) -> dict[str, Any]:
        """The fields, for records and keys."""
        return asdict(self)
