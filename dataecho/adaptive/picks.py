"""The echo pick: which buffered item step ``k`` echoes, keyed by ``(seed, k)``.

An adaptive stage picks on most steps when it is input-bound, so the pick is on the hot
path. :class:`Picks` gives exactly ``Stream(seed, tag).at(k).integers(n)`` (the same
numbers, so the same decisions) by doing PCG64's arithmetic on Python integers: a
numpy generator's state setter, jump and ``integers`` cost about 15 µs per pick right
after a training step (caches cold), this about 6 µs.
"""

from __future__ import annotations

import numpy as np

from .. import _rng

_MASK = (1 << 128) - 1
_LOW64 = (1 << 64) - 1
_LOW32 = (1 << 32) - 1
# PCG64's LCG multiplier (numpy's PCG_DEFAULT_MULTIPLIER_128): one draw is s -> M*s + inc.
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


class Picks:
    """Counter-keyed integer draws: ``below(k, n)`` is ``Stream(seed, tag).at(k).integers(n)``.

    Positions usually grow by a few between picks; the state of the last one is kept,
    and reaching the next costs one multiplication per set bit of the distance.

    Example:
        >>> picks = Picks(0, 0xAD)
        >>> [picks.below(k, 4) for k in range(6)] == [
        ...     int(picks.at(k).integers(4)) for k in range(6)]
        True
    """

    def __init__(self, seed: int, tag: int) -> None:
        self._stream = _rng.Stream(seed, tag)  # for draws other than one integer
        state = np.random.PCG64(np.random.SeedSequence([seed, tag])).state["state"]
        self._origin, self._inc = int(state["state"]), int(state["inc"])
        # Jumps of 2**i substreams (2**(64 + i) draws), as s -> a*s + c.
        self._jumps = []
        for i in range(64):
            a, g = _steps(1 << (64 + i))
            self._jumps.append((a, g * self._inc & _MASK))
        self._position, self._state = 0, self._origin

    def at(self, position: int) -> np.random.Generator:
        """The generator at the start of substream ``position`` (``Stream.at``)."""
        return self._stream.at(position)

    def below(self, position: int, n: int) -> int:
        """The first ``integers(n)`` draw of substream ``position``, for ``n >= 1``."""
        if n >= 1 << 32:
            return int(self._stream.at(position).integers(n))
        if position < self._position:
            self._position, self._state = 0, self._origin
        distance, state, bit = position - self._position, self._state, 0
        while distance:
            if distance & 1:
                a, c = self._jumps[bit]
                state = (a * state + c) & _MASK
            distance >>= 1
            bit += 1
        self._position, self._state = position, state
        # numpy's integers(n) below 2**32: Lemire's method on the 32-bit halves of
        # 64-bit draws, low half first; a draw under the threshold would favour low
        # numbers and is redrawn.
        threshold = ((1 << 32) - n) % n
        while True:
            state = (state * _MULT + self._inc) & _MASK
            x, rot = (state >> 64) ^ (state & _LOW64), state >> 122  # PCG64's XSL-RR output
            raw = ((x >> rot) | (x << (64 - rot))) & _LOW64
            for half in (raw & _LOW32, raw >> 32):
                m = half * n
                if m & _LOW32 >= threshold:
                    return m >> 32
