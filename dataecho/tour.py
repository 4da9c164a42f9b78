"""A ten-second tour: the three echoing variants on toy data, and what they echoed."""

from __future__ import annotations

import argparse
import collections
from typing import Any

import numpy as np

from ._checks import check_factor, check_positive_int, check_seed, flag
from .pipeline import VARIANTS, pipeline


def _augment(example: int, rng: np.random.Generator) -> str:
    # A stand-in augmentation: tag the example with a random view id.
    return f"{example}.{int(rng.integers(10))}"


def main(argv: list[str] | None = None) -> int:
    """Prints the first batches of each variant and its fresh/emitted counts.

    Example:
        >>> main(["--examples", "8", "--batch-size", "4"])  # doctest: +ELLIPSIS
        dataecho tour: 8 examples, factor 2.0, batch size 4
        ...
        0
    """
    summary = (main.__doc__ or "").split("\n\n")[0]  # not the docstring's doctest
    parser = argparse.ArgumentParser(prog="dataecho tour", description=summary)
    # Checked as the flags are parsed: a bad value is a usage error naming its flag,
    # before any of the tour is printed.
    parser.add_argument("--examples", type=flag(check_positive_int, "--examples", int),
                        default=12, help="data set size, >= 1 (default 12)")
    parser.add_argument("--factor", type=flag(check_factor, "--factor"), default=2.0,
                        help="echo factor, a number >= 1 (default 2)")
    parser.add_argument("--batch-size", type=flag(check_positive_int, "--batch-size", int),
                        default=4, help="examples per batch, >= 1 (default 4)")
    parser.add_argument("--seed", type=flag(check_seed, "--seed", int), default=0,
                        help="the pipeline seed, in [0, 2**63) (default 0)")
    args = parser.parse_args(argv)
    data = list(range(args.examples))
    print(f"dataecho tour: {args.examples} examples, factor {args.factor}, "
          f"batch size {args.batch_size}")
    for variant in (None, *VARIANTS):
        p = pipeline(data, augment=_augment, echo=variant,
                     factor=args.factor if variant else 1,  # the baseline echoes nothing
                     batch_size=args.batch_size, seed=args.seed, collate=list)
        batches: list[Any] = list(p)
        views = collections.Counter(v.split(".")[0] for b in batches for v in b)
        print(f"\n{variant or 'baseline'}: {p!r}")
        for b in batches[:3]:
            print("   ", " ".join(b))
        s = p.stats()
        print(f"    {len(batches)} batches; {s}; each example used "
              f"{min(views.values())}-{max(views.values())} times")
    return 0
