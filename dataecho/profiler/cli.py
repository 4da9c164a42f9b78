"""Is a job input-bound, and how much should it echo? Measure ``R``, then advise.

The ``dataecho profile`` command: :func:`~dataecho.profiler.profile` from the shell, on
a loader and a step named as ``MODULE:NAME`` or simulated by a duration. A step on an
accelerator is timed until the device has finished it (``--no-sync`` to not wait).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from .._checks import check_positive_int
from ..adaptive import DEFAULT_MAX_FACTOR
from .measure import profile


class _Synthetic:
    """An endless upstream taking ``seconds`` per batch, read in the loop; re-iterable."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __iter__(self) -> Iterator[list[int]]:
        while True:
            time.sleep(self.seconds)
            yield [0] * 32


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    if "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: modules in the working directory
    obj: Any = importlib.import_module(module)
    for part in filter(None, name.split(".")):
        obj = getattr(obj, part)
    return obj


def _check_ms(ms: float, flag: str, example: str) -> float:
    if not (math.isfinite(ms) and ms >= 0):
        raise ValueError(f"{flag} must be a finite duration in milliseconds >= 0, got {ms:g}; "
                         f"pass the measured duration, e.g. {flag} {example}")
    return ms / 1e3


def main(argv: list[str] | None = None) -> int:
    """``dataecho profile``: measure R and the stall fraction, print advice.

    Example:
        >>> main(["--synthetic-upstream-ms", "2", "--step-ms", "1", "--batches", "3",
        ...       "--json"])  # doctest: +ELLIPSIS
        {"upstream_s": ...}
        0
    """
    parser = argparse.ArgumentParser(
        prog="dataecho profile", description=__doc__.splitlines()[0] if __doc__ else None)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--synthetic-upstream-ms", type=float, metavar="MS",
                        help="a stand-in loader taking MS milliseconds per batch")
    source.add_argument("--module", metavar="MODULE:NAME",
                        help="a loader, or a function returning one (called without "
                             "arguments), e.g. mypkg.data:make_loader")
    work = parser.add_mutually_exclusive_group(required=True)
    work.add_argument("--step-ms", type=float, metavar="MS",
                      help="a stand-in training step taking MS milliseconds")
    work.add_argument("--step", metavar="MODULE:NAME",
                      help="the step, called as fn(batch); timed until the accelerator in "
                           "use (CUDA, MPS, XLA) has finished it")
    parser.add_argument("--no-sync", dest="sync", action="store_const", const=None,
                        default="auto",
                        help="time --step as it returns, without waiting for the "
                             "accelerator (a GPU step then counts only its launch)")
    parser.add_argument("--batches", type=int, default=50, help="batches timed per pass")
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches first")
    parser.add_argument("--max-factor", type=int, default=DEFAULT_MAX_FACTOR,
                        help="cap on the recommended factor")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    try:
        loader = (_Synthetic(_check_ms(args.synthetic_upstream_ms, "--synthetic-upstream-ms",
                                        "40")) if args.module is None
                  else _load(args.module))
        if callable(loader) and not isinstance(loader, Iterable):
            loader = loader()
        step = (_check_ms(args.step_ms, "--step-ms", "25") if args.step is None
                else _load(args.step))
        check_positive_int(args.max_factor, "max_factor")
        result = profile(loader, step, batches=args.batches, warmup=args.warmup,
                         steps=min(args.batches, 20), sync=args.sync)
    except (ImportError, AttributeError, TypeError, ValueError) as err:
        print(f"dataecho profile: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        print(f"{result}\n\n{result.recommendation(args.max_factor)}")
    return 0
