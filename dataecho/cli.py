"""The ``dataecho`` command line: one subcommand per job, each in its own module."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

# subcommand -> (module:function, one-line help). Modules load lazily so that
# `dataecho tour` needs numpy only and `dataecho demo` pays for torch alone.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("dataecho.demo:main",
             "train on Fashion-MNIST read over a throttled network: baseline vs echoing"),
    "tour": ("dataecho.tour:main", "a ten-second tour of the echo stages on toy data"),
    "profile": ("dataecho.profiler.cli:main",
                "measure whether a job is input-bound and which echo factor to use"),
    "reproduce": ("dataecho.experiments.cli:reproduce_main",
                  "run the paper's experiments on our workloads (resumable)"),
    "report": ("dataecho.experiments.cli:report_main",
               "write the Markdown report and figures from a result store"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return ("usage: dataecho COMMAND [ARGS...]\n\ncommands:\n" + "\n".join(lines)
            + "\n\n`dataecho COMMAND --help` describes each command's arguments.")


def _load(target: str) -> Callable[[list[str]], int]:
    module, _, func = target.partition(":")
    fn: Callable[[list[str]], int] = getattr(importlib.import_module(module), func)
    return fn


def main(argv: list[str] | None = None) -> int:
    """Runs ``dataecho COMMAND ARGS``; returns the exit status.

    Example:
        >>> main(["--help"])  # doctest: +ELLIPSIS
        usage: dataecho COMMAND [ARGS...]
        ...
        0
    """
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"dataecho: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    return int(_load(COMMANDS[name][0])(rest) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
