"""Command-line entry points: ``dataecho reproduce`` and ``dataecho report``.

``dataecho/cli.py`` dispatches the two subcommands here; ``python -m
dataecho.experiments reproduce ...`` works too. Both parse their flags before they
import torch or matplotlib, so ``--help`` needs numpy only; ``report`` needs no torch.
``reproduce --workload MODULE:ATTR`` runs a workload of the user's (see
:mod:`~dataecho.experiments.registry`), refusing a store begun with another version of it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .wallclock import DEFAULT as WALLCLOCK

STORE = "results.jsonl"
BUILT_IN = ("fmnist", "lm", "all")  # --workload's names; anything else is MODULE:ATTR
# protocol.BUDGETS, written out: protocol imports the workloads, hence torch, and the
# flags must parse (and --help print) without it. A test pins the two equal.
BUDGETS = ("smoke", "quick", "full")


def reproduce_main(argv: list[str] | None = None) -> int:
    """Runs (or resumes) the experiments of a budget, then writes the report.

    Example:
        >>> import contextlib, io
        >>> out = io.StringIO()
        >>> with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        ...     reproduce_main(["--help"])
        >>> out.getvalue().startswith("usage: dataecho reproduce")
        True
    """
    parser = argparse.ArgumentParser(
        prog="dataecho reproduce",
        description="Measure the findings of Choi et al. (2019) on real data: tuned, "
                    "repeated searches per condition, a resumable result store, and a "
                    "Markdown report with figures. Rerun the same command to resume.")
    parser.add_argument("--workload", type=_workload, default="all",
                        metavar="{fmnist,lm,all,MODULE:ATTR}",
                        help="a built-in workload (ignored by --budget smoke, which runs "
                             "digits), or one of yours: MODULE:ATTR names a Workload, or a "
                             "function called without arguments that returns one, run at "
                             "every budget (default all)")
    parser.add_argument("--budget", choices=BUDGETS, default="quick",
                        help="smoke: <1 min on digits; quick: ~20 min, reduced grids; "
                             "full: the whole protocol (hours; resumable)")
    parser.add_argument("--out", type=Path, default=None,
                        help="report directory (default reports/<budget>)")
    parser.add_argument("--store", type=Path, default=None,
                        help=f"result store (default <out>/{STORE})")
    parser.add_argument("--jobs", type=int, default=1,
                        help="parallel trial processes, one core each (default 1)")
    parser.add_argument("--verbose", action="store_true", help="print every evaluation")
    _wallclock_option(parser)
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    # After the flags: a missing torch or matplotlib fails here, before any training
    # (the dispatcher turns it into one line naming the extra).
    from .protocol import plan
    from .registry import claim, is_import, resolve
    from .report import write_report
    from .store import Store
    from .sweep import run

    try:
        wallclock = _wallclock(args.wallclock)  # checked before hours of training
    except FileNotFoundError as error:
        parser.error(str(error))
    out = args.out or Path("reports") / args.budget
    store = args.store or out / STORE
    if is_import(args.workload):
        names = [args.workload]
    else:
        names = ["digits"] if args.budget == "smoke" else (
            ["fmnist", "lm"] if args.workload == "all" else [args.workload])
        if args.budget == "smoke" and args.workload != "all":
            print("[reproduce] --budget smoke runs the digits workload only", file=sys.stderr)
    try:
        workloads = {name: resolve(name) for name in names}
    except (ImportError, ValueError, TypeError) as error:
        parser.error(f"argument --workload: {error}")
    try:  # before any training: a store begun with another workload is not resumed
        for name, workload in workloads.items():
            claim(Store(store), name, workload)
    except ValueError as error:
        print(f"dataecho reproduce: {error}", file=sys.stderr)
        return 2
    plans = [plan(name, args.budget) for name in names]
    start = time.monotonic()
    try:
        ran = run(plans, store, jobs=args.jobs, verbose=args.verbose,
                  echo=lambda line: print(line, file=sys.stderr, flush=True))
    except (FileNotFoundError, ImportError) as error:
        print(f"dataecho reproduce: missing data or dependency: {error}", file=sys.stderr)
        return 2
    path = write_report(store, out, wallclock)
    print(f"[reproduce] {ran} new trial(s) in {time.monotonic() - start:.0f} s; "
          f"store {store}; report {path}", file=sys.stderr)
    return 0


def _workload(value: str) -> str:
    """An argparse type: a built-in name or ``MODULE:ATTR`` (resolved after parsing)."""
    module, colon, attr = value.partition(":")
    if value in BUILT_IN or (colon and module and attr):
        return value
    raise argparse.ArgumentTypeError(
        f"must be {', '.join(BUILT_IN)} or MODULE:ATTR naming a Workload of yours (or a "
        f"function returning one), got {value!r}; pass e.g. --workload mypkg.work:make")


def report_main(argv: list[str] | None = None) -> int:
    """Writes the report of a result store (works on partial stores too)."""
    parser = argparse.ArgumentParser(prog="dataecho report",
                                     description="Markdown report and figures from a store.")
    parser.add_argument("--store", type=Path, required=True, help="a results.jsonl store")
    parser.add_argument("--out", type=Path, default=None,
                        help="report directory (default: the store's directory)")
    _wallclock_option(parser)
    args = parser.parse_args(argv)
    if not args.store.is_file():
        print(f"dataecho report: no store at {args.store}; run `dataecho reproduce` first "
              "or pass --store PATH", file=sys.stderr)
        return 2
    try:
        wallclock = _wallclock(args.wallclock)
    except FileNotFoundError as error:
        print(f"dataecho report: {error}", file=sys.stderr)
        return 2
    from .report import write_report  # matplotlib, for the figures; no torch

    print(write_report(args.store, args.out or args.store.parent, wallclock))
    return 0


def _wallclock_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wallclock", default="auto",
        help="summary of benchmarks/wallclock.py whose input-bound speedups judge finding "
             f"2; 'none' leaves it out (default 'auto': {WALLCLOCK}, from the root of a "
             "clone of the repository; required elsewhere, as an installed dataecho ships "
             "no benchmarks/)")


def _wallclock(value: str) -> Path | None:
    """The wall-clock summary to use: an explicit path must exist, and so must 'auto's."""
    if value == "none":
        return None
    if value == "auto":
        if WALLCLOCK.is_file():
            return WALLCLOCK
        # Outside a clone (an installed wheel has no benchmarks/): say so rather than
        # leave finding 2 out of the report without a word.
        raise FileNotFoundError(
            f"--wallclock is required here: its default, {WALLCLOCK}, is the summary "
            f"that benchmarks/wallclock.py writes in a clone of the repository, and "
            f"{Path.cwd()} has none (an installed dataecho ships no benchmarks/); pass "
            "--wallclock PATH to a wallclock-<tag>.json summary, or --wallclock none to "
            "leave finding 2's wall-clock evidence out of the report")
    path = Path(value)
    if not path.is_file():
        raise FileNotFoundError(f"--wallclock {value}: no such file; pass the .json summary "
                                f"of benchmarks/wallclock.py (e.g. {WALLCLOCK}), 'auto' or "
                                "'none'")
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m dataecho.experiments {reproduce,report} ...``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("reproduce", "report"):
        print("usage: python -m dataecho.experiments {reproduce,report} [options]",
              file=sys.stderr)
        return 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from ..cli import main as dataecho

    return dataecho(argv)  # one line naming the extra, not a traceback, if one is missing
