"""Counter-keyed randomness, and the one registry of seed tags.

Every random decision in dataecho is a pure function of ``(seed, stage tag, counters)``
so a run is reproducible and a checkpoint needs only the counters. Nothing here
touches the global ``random``/numpy/torch generators, the clock or the pid.
"""

from __future__ import annotations

import ctypes

import numpy as np

# Stream tags: the second word of every PCG64 key, one per kind of random decision, so
# two stages given the same seed and counters still draw independent streams. Every
# tag used in the package is here; a repeated value would silently correlate two
# streams (tests/test_rng.py checks they are distinct). Never change a value: stored
# results depend on each of them.
SOURCE = 0x50  # Source: the per-epoch permutation
ECHO = 0xEC  # Echo: the fractional factor's extra copies
MAP = 0x3A  # Map: the per-item generator
SHUFFLE = 0x5F  # Shuffle: the window permutations
DERIVE = 0xDE  # derive_seed's sub-seeds
ADAPTIVE_PICKS = 0xAD  # AdaptiveEcho: which buffered batches to echo (several at once)
ADAPTIVE_PICK_BLOCKS = 0xAB  # AdaptiveEcho: blocks of draws for one pick per step
ADAPTIVE_COPIES = 0xA6  # AdaptiveExamples: the per-copy augmentation
SHARD_ORDER = 0x5D  # TarShards: the per-epoch shard order
DEVICE_ORDER = 0xD0  # DeviceEcho: the order of a group's copies, per pass

#: Every PCG64 stream tag, by name.
TAGS = {"SOURCE": SOURCE, "ECHO": ECHO, "MAP": MAP, "SHUFFLE": SHUFFLE, "DERIVE": DERIVE,
        "ADAPTIVE_PICKS": ADAPTIVE_PICKS, "ADAPTIVE_PICK_BLOCKS": ADAPTIVE_PICK_BLOCKS,
        "ADAPTIVE_COPIES": ADAPTIVE_COPIES,
        "SHARD_ORDER": SHARD_ORDER, "DEVICE_ORDER": DEVICE_ORDER}

# Sub-stream keys: the ``keys`` of ``derive_seed(seed, key, ...)`` that give each stage
# of a built pipeline its own seed. They only need to differ from each other within
# one pipeline builder; the values are fixed for the same reason as the tags.
ECHO_KEY = 1  # the echo stage (Echo, AdaptiveEcho, AdaptiveExamples)
AUGMENT_KEY = 2  # the augmentation Map
SHUFFLE_KEY = 3  # the shuffle buffer
NODE_ECHO_KEY = 1  # torchdata EchoNode: its Echo, per epoch
NODE_SHUFFLE_KEY = 2  # torchdata EchoNode: its Shuffle, per epoch


def rng(seed: int, tag: int, *counters: int) -> np.random.Generator:
    """A fresh generator for one (seed, tag, counters) key.

    Example:
        >>> float(rng(0, MAP, 5).random()) == float(rng(0, MAP, 5).random())
        True
    """
    return np.random.Generator(np.random.PCG64([seed, tag, *counters]))


def derive_seed(seed: int, *keys: int) -> int:
    """A new 63-bit seed for a sub-stream (an epoch, a rank, a worker).

    Example:
        >>> derive_seed(0, 1) != derive_seed(0, 2)
        True
    """
    state = np.random.SeedSequence([seed, DERIVE, *keys]).generate_state(2, np.uint64)
    return int(state[0]) >> 1


_MASK = (1 << 128) - 1
_LOW = (1 << 64) - 1
# PCG64's LCG multiplier (numpy's PCG_DEFAULT_MULTIPLIER_128): a step is s -> M*s + inc.
_MULT = (2549297995355413924 << 64) + 4865540595714422341


def _steps(n: int) -> tuple[int, int]:
    """``(a, g)`` such that ``n`` LCG steps map ``s`` to ``a*s + g*inc`` (mod 2**128)."""
    acc_mult, acc_plus, mult, plus = 1, 0, _MULT, 1
    while n:
        if n & 1:
            acc_mult, acc_plus = acc_mult * mult & _MASK, (acc_plus * mult + plus) & _MASK
        mult, plus = mult * mult & _MASK, (mult + 1) * plus & _MASK
        n >>= 1
    return acc_mult, acc_plus


# One substream further on is 2**64 steps: s -> _JUMP_MULT*s + _JUMP_INC*inc.
_JUMP_MULT, _JUMP_INC = _steps(1 << 64)


class _Head(ctypes.Structure):
    # numpy's pcg64_state: a pointer to {state, inc} (two 128-bit words) and the
    # buffered half of a 64-bit draw that next_uint32 keeps.
    _fields_ = [("pcg", ctypes.c_void_p), ("has_uint32", ctypes.c_int),
                ("uinteger", ctypes.c_uint32)]


class Stream:
    """Generators for every position of one ``(seed, tag)`` key, cheaply.

    Position ``p`` gets the substream that starts ``p * 2**64`` draws into one PCG64
    stream (period ``2**128``): substreams never overlap unless an item draws more than
    ``2**64`` numbers. The next position is one affine step of the generator's state
    (~0.3 µs, written into it directly), any other a jump (~1.5 µs), against ~20 µs for
    seeding a new generator; per-example augmentation calls this once per item. The
    generator returned is reused by the next call: use it within the call it was
    passed to.

    Example:
        >>> s = Stream(0, MAP)
        >>> a = s.at(7).random()
        >>> _ = s.at(3).random()
        >>> s.at(7).random() == a
        True
    """

    def __init__(self, seed: int, tag: int) -> None:
        self._key = (seed, tag)
        self._bits = np.random.PCG64(np.random.SeedSequence([seed, tag]))
        self._start = self._bits.state
        self._generator = np.random.Generator(self._bits)
        inc = self._start["state"]["inc"]
        self._jump_inc = _JUMP_INC * inc & _MASK
        self._position = 0  # the position whose start state is self._state
        self._state: int = self._start["state"]["state"]
        head = _Head.from_address(self._bits.ctypes.state_address)
        words = (ctypes.c_uint64 * 4).from_address(head.pcg or 0) if head.pcg else None
        # The direct write is used only where the memory holds exactly the state numpy
        # reports (little-endian 128-bit words); anywhere else every call jumps.
        start = self._start["state"]["state"]
        self._direct = words is not None and list(words) == [
            start & _LOW, start >> 64, inc & _LOW, inc >> 64]
        self._head, self._words = head, words

    def __reduce__(self) -> tuple[type[Stream], tuple[int, int]]:
        # A copy (pickle, deepcopy, a spawned DataLoader worker) must get its own state
        # pointers, never this generator's memory.
        return (Stream, self._key)

    def at(self, position: int) -> np.random.Generator:
        """The generator positioned at the start of substream ``position``."""
        if position == self._position + 1 and self._direct:
            state = self._state = (_JUMP_MULT * self._state + self._jump_inc) & _MASK
            words, head = self._words, self._head
            words[0], words[1] = state & _LOW, state >> 64  # type: ignore[index]
            head.has_uint32 = head.uinteger = 0
            self._position = position
            return self._generator
        self._bits.state = self._start
        self._bits.advance(position << 64)
        if self._direct:
            words = self._words
            self._state = words[0] | words[1] << 64  # type: ignore[index]
            self._position = position
        return self._generator


class Picks:
    """Counter-keyed picks among ``n`` items: ``below(k, n)`` is a function of (seed, k).

    ``below(k, n) = (u_k * n) >> 32``, where ``u_k`` is draw ``k mod 1024`` of the
    1,024 32-bit draws of substream ``k // 1024`` of the ``(seed, block_tag)`` stream.
    One numpy call fills a block for 1,024 positions; a pick is then a multiply and a
    shift, which keeps the adaptive echo's per-step cost near a fixed factor's copy.
    The multiply-shift maps 2**32 values onto ``n``, so each pick's chance is off from
    ``1/n`` by less than ``1 / 2**32`` (numpy's ``integers(n)`` redraws to remove that;
    here it is far below any effect a training run could show). ``n >= 2**32`` takes a
    draw of ``Stream(seed, tag).at(k)``, as :meth:`at` does for draws of several items.

    Example:
        >>> picks = Picks(0, ADAPTIVE_PICKS, ADAPTIVE_PICK_BLOCKS)
        >>> [picks.below(k, 4) for k in (5, 3000, 5)] == [picks.below(5, 4),
        ...     Picks(0, ADAPTIVE_PICKS, ADAPTIVE_PICK_BLOCKS).below(3000, 4), picks.below(5, 4)]
        True
    """

    BLOCK = 1024  # positions per block of draws

    def __init__(self, seed: int, tag: int, block_tag: int) -> None:
        self._stream = Stream(seed, tag)  # for draws other than one pick
        self._blocks = Stream(seed, block_tag)
        self._first = -self.BLOCK  # the first position of the loaded block: none yet
        self._block: list[int] = []

    def at(self, position: int) -> np.random.Generator:
        """The generator at the start of substream ``position`` (``Stream.at``)."""
        return self._stream.at(position)

    def below(self, position: int, n: int) -> int:
        """The pick of ``position`` among ``n >= 1`` items: an int in ``[0, n)``."""
        i = position - self._first
        if 0 <= i < self.BLOCK and n < 1 << 32:
            return (self._block[i] * n) >> 32
        if n >= 1 << 32:
            return int(self._stream.at(position).integers(n))
        block = position // self.BLOCK
        self._block = self._blocks.at(block).integers(
            0, 1 << 32, size=self.BLOCK, dtype=np.uint64).tolist()
        self._first = block * self.BLOCK
        return (self._block[position - self._first] * n) >> 32


