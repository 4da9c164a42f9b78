"""Augmentations that draw from global generators, made a function of the copy.

torchvision transforms and kornia take one argument and draw from torch's global
generator (torchvision's ``RandomChoice`` and ``RandomOrder`` from Python's
``random``), not from the ``rng`` dataecho passes. Called as they are, the copies of an
example would take whatever the global stream holds: not reproducible, a resume not
exact, and the user's own stream advanced. :class:`Seeded` runs such a function with
those generators seeded from the copy's generator, keyed by (seed, epoch, shard,
position), and puts them back afterwards; ``EchoDataset`` applies it to every
one-argument ``augment`` (:func:`seeded`).
"""

from __future__ import annotations

import ctypes
import random
import reprlib
import struct
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .._checks import check_callable
from ..map import fn_name, takes_rng

#: The global generators :class:`Seeded` can seed, in the order their seeds are drawn.
GENERATORS = ("torch", "random", "numpy")

# The CPU generator only: DataLoader workers have no GPU, and seeding CUDA's would
# initialise it (torch.manual_seed does, at ~100 µs a call).
_TORCH = torch.default_generator
_WORDS = 624  # the Mersenne Twister's state: 624 32-bit words and an index


class _PythonRandom:
    """Python's global ``random`` generator, saved, seeded and restored.

    ``random.getstate()`` builds a tuple of 625 ints and ``random.setstate`` parses
    one: 8 µs a call together, against under 1 µs for copying the 2,500 bytes they
    describe (CPython's ``RandomObject``: the index and the words after the object
    header), which this does where that layout is checked to hold (once, against
    ``getstate()`` of a generator of its own); elsewhere (another interpreter) it
    uses the two calls. Both seed the same state.
    """

    def __init__(self) -> None:
        self.generator: Any = random._inst  # what the functions random.* call
        self.size = 4 + 4 * _WORDS
        self.at = id(self.generator) + object.__basicsize__ if self._raw_layout() else None
        self.head = struct.pack("=i", _WORDS)  # index 624: the next draw twists anew

    def _raw_layout(self) -> bool:
        if type(self.generator) is not random.Random or (
                random.Random.__basicsize__ < object.__basicsize__ + self.size):
            return False  # not CPython's object: reading that far could leave it
        probe = random.Random(5489)
        _, internal, _ = probe.getstate()
        raw = ctypes.string_at(id(probe) + object.__basicsize__, self.size)
        index, *words = struct.unpack(f"=i{_WORDS}I", raw)
        return bool((*words, index) == internal)

    def save(self) -> Any:
        if self.at is None:
            return random.getstate()
        return ctypes.string_at(self.at, self.size), self.generator.gauss_next

    def seed(self, words: bytes) -> None:
        """Sets the state to ``words``, 2,496 random bytes (never all zero)."""
        if self.at is None:
            state = (*np.frombuffer(words, np.uint32).tolist(), _WORDS)
            random.setstate((3, state, None))
        else:
            ctypes.memmove(self.at, self.head + words, self.size)
            self.generator.gauss_next = None

    def restore(self, saved: Any) -> None:
        if self.at is None:
            random.setstate(saved)
        else:
            ctypes.memmove(self.at, saved[0], self.size)
            self.generator.gauss_next = saved[1]


_RANDOM = _PythonRandom()


class Seeded:
    """Calls a one-argument ``fn(example)`` with global generators seeded per copy.

    For each call, the named global generators are seeded from ``rng`` (the copy's
    generator, keyed by seed, epoch, shard and position) and restored afterwards, as
    ``torch.random.fork_rng(devices=[])`` does for torch's. So the copies of an
    example get their own draws, a rerun with one seed repeats them, a restored
    checkpoint resumes them exactly, and the global streams are as they were:
    ``torch.get_rng_state()`` and ``random.getstate()`` are unchanged after iterating.

    ``EchoDataset`` wraps every one-argument ``augment`` in ``Seeded`` itself; pass it
    yourself to choose the generators. Per copy this costs (measured on 2 CPU cores,
    ``Map`` over 16-float tensors) about 3 µs for torch's CPU generator, 7 µs with
    Python's ``random`` too (the default) and 75 µs more with numpy's legacy global,
    against 16 µs for a torch-op crop and flip of a 32x32 image and 0.7 ms of a
    224x224 one. For a function that draws from none of them (a deterministic resize,
    or one that takes ``(example, rng)``'s generator instead), ``generators=()`` calls
    it as it is, at no cost.

    The generators are the process's: iterate in the thread that draws from them (the
    DataLoader workers, or the training loop with ``num_workers=0``). CUDA generators
    are left alone. torch seeds its CPU generator from 32 bits, so two copies of one
    example draw alike with probability about ``factor**2 / 2**33``.

    Args:
        fn: the augmentation, called as ``fn(example)``; one that takes a generator
            (``fn(example, rng)``) already gets dataecho's and is refused here.
        generators: which global generators ``fn`` draws from, names in
            :data:`GENERATORS`. Default: torch's and Python's ``random`` (torchvision
            v1's ``RandomChoice`` and ``RandomOrder`` draw from ``random``);
            ``("torch",)`` suffices for torchvision v2, kornia and torch ops, at about
            3 µs a copy less; add ``"numpy"`` for one that calls ``np.random`` (imgaug).

    Example:
        >>> import numpy as np
        >>> jitter = Seeded(lambda x: x + torch.rand(()))
        >>> a = jitter(torch.zeros(()), np.random.default_rng(1))
        >>> before = torch.get_rng_state()
        >>> b = jitter(torch.zeros(()), np.random.default_rng(1))
        >>> bool(a == b), torch.equal(before, torch.get_rng_state())
        (True, True)
    """

    def __init__(self, fn: Callable[[Any], Any], *,
                 generators: tuple[str, ...] | list[str] = ("torch", "random")) -> None:
        check_callable(fn, "fn", "fn(example)", optional=False)
        if isinstance(fn, Seeded) or takes_rng(fn):
            raise TypeError(
                f"Seeded(fn) is for a function of one argument that draws from global "
                f"generators, got {fn_name(fn)}, which takes dataecho's generator as "
                "fn(example, rng) already; pass it as augment= without Seeded")
        self.fn = fn
        self.generators = _check_generators(generators)
        self._torch, self._random, self._numpy = (name in self.generators
                                                  for name in GENERATORS)
        shown = "" if self.generators == ("torch", "random") else (
            f", generators={self.generators!r}")
        # What reprs and checkpoints name the augmentation by (see map.fn_name).
        self.__qualname__ = f"Seeded({fn_name(fn)}{shown})"

    def __call__(self, example: Any, rng: np.random.Generator) -> Any:
        if not self.generators:
            return self.fn(example)
        # The same draws whichever generators are named (torch's seed, numpy's seed,
        # Python's 624 words), so torch's seed for a copy is the same with or without
        # the others.
        bits = rng.bit_generator
        seeds = bits.random_raw(2).tolist()
        saved_torch = _TORCH.get_state() if self._torch else None
        saved_random = _RANDOM.save() if self._random else None
        saved_numpy = np.random.get_state() if self._numpy else None
        try:
            if self._torch:
                _TORCH.manual_seed(seeds[0])
            if self._random:
                _RANDOM.seed(bits.random_raw(_WORDS // 2).tobytes())
            if self._numpy:  # the legacy generator takes 32-bit words
                np.random.seed([seeds[1] & 0xFFFFFFFF, seeds[1] >> 32])
            return self.fn(example)
        finally:
            if saved_torch is not None:
                _TORCH.set_state(saved_torch)
            if saved_random is not None:
                _RANDOM.restore(saved_random)
            if saved_numpy is not None:
                np.random.set_state(saved_numpy)

    def __repr__(self) -> str:
        return self.__qualname__


def seeded(augment: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """The augmentation ``EchoDataset`` runs: a one-argument one :class:`Seeded`.

    A function of ``(example, rng)`` is called as it is, and so is one wrapped in
    ``Seeded(fn, generators=())``; None stays None.

    Example:
        >>> seeded(len), seeded(Seeded(len, generators=()))
        (Seeded(len), <built-in function len>)
    """
    if isinstance(augment, Seeded):
        return augment if augment.generators else augment.fn
    return augment if augment is None or takes_rng(augment) else Seeded(augment)


def warn_transform(dataset: Any, echo: object, factor: object) -> None:
    """Warns when ``dataset`` augments in ``dataset[i]``, before an example echo.

    A torchvision-style data set applies its ``transform`` attribute as it reads, so
    with ``echo="before_augmentation"`` every copy repeats one augmented example (the
    echo follows the read): example echoing turns into identical copies.

    Example:
        >>> class Images(list):
        ...     transform = None
        >>> warn_transform(Images([1]), "before_augmentation", 2.0)  # None: no warning
    """
    transform = getattr(dataset, "transform", None)
    if transform is None or echo != "before_augmentation" or factor == 1:
        return
    warnings.warn(
        f"dataset {type(dataset).__name__} augments as it reads (its transform, "
        f"{fn_name(transform)}), before the echo, so with "
        "echo='before_augmentation' every copy of an example is the same augmented "
        "example; set dataset.transform = None and pass the transform as "
        "EchoDataset(dataset, augment=transform), which augments each copy anew",
        UserWarning, stacklevel=4)  # the line that built the EchoDataset


def _check_generators(generators: object) -> tuple[str, ...]:
    """``generators`` as distinct names from :data:`GENERATORS`, in that order."""
    fix = ("pass e.g. generators=('torch',) for torchvision v2 or kornia, or () for a "
           "function that draws from none")
    if not isinstance(generators, list | tuple):
        raise TypeError(
            f"generators must be a tuple of names from {GENERATORS}, got "
            f"{reprlib.repr(generators)} of type {type(generators).__name__}; {fix}")
    if any(name not in GENERATORS for name in generators) or len(set(generators)) < len(
            generators):
        raise ValueError(
            f"generators must name distinct global generators from {GENERATORS}, the "
            f"ones fn draws from, got {reprlib.repr(generators)}; {fix}")
    return tuple(name for name in GENERATORS if name in generators)


def forked(fn: Callable[[Any], Any], value: Any, seed: int, device: torch.device) -> Any:
    """``fn(value)`` with torch's CPU generator and ``device``'s seeded from ``seed``.

    For a one-argument augmentation on the accelerator (kornia draws from torch's
    global generators only): both generators run under ``torch.random.fork_rng``, so
    they are as they were afterwards, and a call with the same seed draws the same.
    Unlike :class:`Seeded`, the device's generator is seeded too; other devices' are
    left alone.

    Example:
        >>> before = torch.get_rng_state()
        >>> a = forked(lambda x: x + torch.rand(()), 0.0, 7, torch.device("cpu"))
        >>> b = forked(lambda x: x + torch.rand(()), 0.0, 7, torch.device("cpu"))
        >>> bool(a == b), torch.equal(before, torch.get_rng_state())
        (True, True)
    """
    if device.type != "cuda":
        with torch.random.fork_rng(devices=[]):
            _TORCH.manual_seed(seed)
            return fn(value)
    index = device.index if device.index is not None else torch.cuda.current_device()
    with torch.random.fork_rng(devices=[index]):
        _TORCH.manual_seed(seed)
        torch.cuda.default_generators[index].manual_seed(seed)
        return fn(value)
