"""Is a job input-bound, and how much should it echo? Measure ``R``, then advise.

The ``dataecho profile`` command: :func:`~dataecho.profiler.profile` from the shell, on
a loader and a step named as ``MODULE:NAME`` or simulated by a duration. A step on an
accelerator is timed until the device has finished it (``--no-sync`` to not wait).
Given an ``EchoDataset`` loader, or the loader's two sides (``--read-ms`` and
``--augment-ms``), the advice is the model's prediction of each variant's gain.
Every number a flag takes is checked as it is parsed, so a bad one is a usage error
that names the flag (exit status 2), before anything is timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..adaptive import DEFAULT_MAX_FACTOR
from ..factor import AUGMENTED_MAX_FACTOR
from .measure import MIN_PASSES, profile


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


def _duration(flag: str, example: str) -> Callable[[str], float]:
    """An argparse type: milliseconds, finite and >= 0, returned as seconds.

    argparse puts ``argument FLAG:`` before the message, so it does not repeat the flag.
    """
    def parse(text: str) -> float:
        try:
            ms = float(text)
        except ValueError:
            ms = math.nan
        if not (math.isfinite(ms) and ms >= 0):
            raise argparse.ArgumentTypeError(
                f"must be a finite duration in milliseconds >= 0, got {text}; pass "
                f"the measured duration, e.g. {flag} {example}")
        return ms / 1e3
    return parse


def _count(flag: str, minimum: int, meaning: str) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(
                f"must be a whole number >= {minimum} ({meaning}), got {text}; pass "
                f"{flag} {minimum} or more")
        return value
    return parse


def main(argv: list[str] | None = None) -> int:
    """``dataecho profile``: measure R and the stall fraction over passes, print advice.

    Returns 0, or 2 where the loader or step cannot be loaded or profiled; a bad flag
    exits with status 2 and a usage message naming it.

    Example:
        >>> main(["--synthetic-upstream-ms", "1", "--step-ms", "5", "--batches", "3",
        ...       "--json"])  # doctest: +ELLIPSIS
        {"upstream_s": ..., "decided": true, "factor": 1.0, "variant": null, "prediction": null}
        0
    """
    parser = _parser()
    args = parser.parse_args(argv)
    _check_sides(parser, args)
    try:
        loader = _loader(args)
        step = args.step_ms if args.step is None else _load(args.step)
        result = profile(loader, step, batches=args.batches, warmup=args.warmup,
                         steps=min(args.batches, 20), passes=args.passes, sync=args.sync)
    except (ImportError, AttributeError, TypeError, ValueError) as err:
        print(f"dataecho profile: {err}", file=sys.stderr)
        return 2
    if args.read_ms is not None:  # given sides stand for the loader's, EchoDataset or not
        result = dataclasses.replace(result, read_s=args.read_ms, augment_s=args.augment_ms)
    if args.json:
        print(json.dumps(result.as_dict(args.max_factor)))
    else:
        print(f"{result}\n\n{result.recommendation(args.max_factor)}")
    return 0


def _loader(args: argparse.Namespace) -> Any:
    if args.module is not None:
        loader = _load(args.module)
        return loader() if callable(loader) and not isinstance(loader, Iterable) else loader
    if args.synthetic_upstream_ms is not None:
        return _Synthetic(args.synthetic_upstream_ms)
    return _Synthetic(args.read_ms + args.augment_ms)  # the loader the two sides describe


def _check_sides(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The two sides come together, and stand in for a loader only where none is named."""
    if (args.read_ms is None) != (args.augment_ms is None):
        given, missing = (("--read-ms", "--augment-ms") if args.augment_ms is None
                          else ("--augment-ms", "--read-ms"))
        parser.error(f"argument {given}: needs {missing} too (the loader's two sides per "
                     "batch come together); pass both, e.g. --read-ms 30 --augment-ms 5, "
                     "or neither")
    if args.read_ms is not None and args.synthetic_upstream_ms is not None:
        parser.error("argument --read-ms: not allowed with --synthetic-upstream-ms (the "
                     "stand-in loader then takes --read-ms + --augment-ms per batch); drop "
                     "--synthetic-upstream-ms")
    if args.read_ms is None and args.synthetic_upstream_ms is None and args.module is None:
        parser.error("one of the arguments --synthetic-upstream-ms --module is required, or "
                     "the loader's two sides --read-ms MS --augment-ms MS")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dataecho profile", description=__doc__.splitlines()[0] if __doc__ else None)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--synthetic-upstream-ms", metavar="MS",
                        type=_duration("--synthetic-upstream-ms", "40"),
                        help="a stand-in loader taking MS milliseconds per batch")
    source.add_argument("--module", metavar="MODULE:NAME",
                        help="a loader, or a function returning one (called without "
                             "arguments), e.g. mypkg.data:make_loader")
    work = parser.add_mutually_exclusive_group(required=True)
    work.add_argument("--step-ms", type=_duration("--step-ms", "25"), metavar="MS",
                      help="a stand-in training step taking MS milliseconds")
    work.add_argument("--step", metavar="MODULE:NAME",
                      help="the step, called as fn(batch); timed until the accelerator in "
                           "use (CUDA, MPS, XLA) has finished it")
    parser.add_argument("--read-ms", type=_duration("--read-ms", "30"), metavar="MS",
                        help="the loader's read and decoding per batch, over its workers "
                             "(with --augment-ms): the model's input where the loader "
                             "reads no EchoDataset; alone, a stand-in loader takes the sum")
    parser.add_argument("--augment-ms", type=_duration("--augment-ms", "5"), metavar="MS",
                        help="the loader's augmentation per batch, over its workers (with "
                             "--read-ms)")
    parser.add_argument("--no-sync", dest="sync", action="store_const", const=None,
                        default="auto",
                        help="time --step as it returns, without waiting for the "
                             "accelerator (a GPU step then counts only its launch)")
    parser.add_argument("--batches", type=_count("--batches", 1, "batches timed per pass"),
                        default=50, help="batches timed per pass (default 50)")
    parser.add_argument("--passes", default=MIN_PASSES,
                        type=_count("--passes", MIN_PASSES, "a median and a spread need 3"),
                        help=f"passes timed, each with its own warm-up; the advice needs "
                             f"them to agree (default and least {MIN_PASSES})")
    parser.add_argument("--warmup", type=_count("--warmup", 0, "untimed batches"), default=3,
                        help="untimed batches first in each pass, beyond what a "
                             "DataLoader's workers prefetch (default 3)")
    parser.add_argument("--max-factor",
                        type=_count("--max-factor", 1, "the largest factor to advise; 1 "
                                                       "rules echoing out"),
                        help=f"cap on the recommended factor (default {DEFAULT_MAX_FACTOR} "
                             f"from R alone; with the two sides, Auto's: "
                             f"{AUGMENTED_MAX_FACTOR} uses before augmentation, "
                             f"{DEFAULT_MAX_FACTOR} after)")
    parser.add_argument("--json", action="store_true",
                        help="print the numbers as JSON: medians, spreads, each pass, the "
                             "two sides per batch, the advised factor and variant and the "
                             "model's prediction (null where it gives none)")
    return parser
