"""The ``dataecho`` command line: one subcommand per job, each in its own module.

A subcommand whose optional dependencies are missing ends with one line naming the
extra that installs them (``pip install 'dataecho[demo]'``), not a traceback; every
subcommand's ``--help`` needs numpy only.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

from ._extras import DISTRIBUTIONS, installed


@dataclass(frozen=True)
class Command:
    """A subcommand: where its ``main(argv) -> int`` lives, its extra, its help line."""

    target: str  # "module:function", imported only when the command runs
    extra: str | None  # the pip extra that installs what it needs beyond numpy, if any
    help: str  # one line, for `dataecho --help`


# Modules load lazily so that `dataecho tour` needs numpy only and `dataecho demo` pays
# for torch alone. reproduce and report name the demo extra: it holds torch, matplotlib
# and scikit-learn, which they need (there is no extra of their own).
COMMANDS: dict[str, Command] = {
    "demo": Command("dataecho.demo:main", "demo",
                    "train on Fashion-MNIST read over a throttled network: baseline vs echoing"),
    "tour": Command("dataecho.tour:main", None,
                    "a ten-second tour of the echo stages on toy data"),
    "profile": Command("dataecho.profiler.cli:main", None,
                       "measure whether a job is input-bound and which echo factor to use"),
    "reproduce": Command("dataecho.experiments.cli:reproduce_main", "demo",
                         "run the paper's experiments on our workloads (resumable)"),
    "report": Command("dataecho.experiments.cli:report_main", "demo",
                      "write the Markdown report and figures from a result store"),
}

class MissingExtra(ModuleNotFoundError):
    """An optional dependency of a subcommand is not installed; the message names its extra."""


def missing(*modules: str) -> list[str]:
    """The ``modules`` (import names) that are not installed, in the order given.

    Example:
        >>> missing("json", "no_such_module_here")
        ['no_such_module_here']
    """
    return [name for name in modules if not installed(name)]


def require(command: str, extra: str, *modules: str) -> None:
    """Raises :class:`MissingExtra` unless every one of ``modules`` is installed.

    Example:
        >>> require("demo", "demo", "json")  # installed: nothing happens
        >>> require("demo", "demo", "json", "no_such_module_here")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        dataecho.cli.MissingExtra: dataecho demo needs no_such_module_here, which is not ...
    """
    absent = missing(*modules)
    if absent:
        raise MissingExtra(extra_message(command, extra, absent), name=absent[0])


def extra_message(command: str, extra: str, modules: list[str]) -> str:
    """One line: what ``command`` needs, that it is not installed, and the pip command."""
    names = [DISTRIBUTIONS.get(name, name) for name in modules]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    verb = "is" if len(names) == 1 else "are"
    return (f"dataecho {command} needs {listed}, which {verb} not installed; "
            f"pip install 'dataecho[{extra}]'")


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {cmd.help}" for name, cmd in COMMANDS.items()]
    return ("usage: dataecho [--version] COMMAND [ARGS...]\n\ncommands:\n" + "\n".join(lines)
            + "\n\n`dataecho COMMAND --help` describes each command's arguments.")


def _load(target: str) -> Callable[[list[str]], int]:
    module, _, func = target.partition(":")
    fn: Callable[[list[str]], int] = getattr(importlib.import_module(module), func)
    return fn


def _run(name: str, rest: list[str]) -> int:
    cmd = COMMANDS[name]
    try:
        return int(_load(cmd.target)(rest) or 0)
    except MissingExtra as error:
        print(error, file=sys.stderr)
        return 1
    except ModuleNotFoundError as error:
        # Only a dependency that is absent: a module that is installed but fails to
        # import (a broken build, a bug) keeps its traceback.
        root = (error.name or "").partition(".")[0]
        if cmd.extra is None or not root or root == "dataecho" or installed(root):
            raise
        print(extra_message(name, cmd.extra, [root]), file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """Runs ``dataecho COMMAND ARGS``; returns the exit status.

    Example:
        >>> main(["--help"])  # doctest: +ELLIPSIS
        usage: dataecho [--version] COMMAND [ARGS...]
        ...
        0
        >>> main(["--version"])  # doctest: +ELLIPSIS
        dataecho ...
        0
    """
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from . import __version__

        print(f"dataecho {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"dataecho: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    return _run(name, rest)


if __name__ == "__main__":
    raise SystemExit(main())
