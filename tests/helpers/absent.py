"""Runs Python in a fresh interpreter where some packages cannot be imported.

As on an install without them: a finder ahead of the real ones refuses the packages
named (and their submodules), so it does not matter whether they are installed here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SHIM = textwrap.dedent("""
    import importlib.abc, json, sys
    BLOCKED = set(json.loads(sys.argv[1]))

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Absent())
    statement = sys.argv[2]
    del sys.argv[1:3]  # the statement sees only its own arguments
    exec(statement)
""")


def run_without(blocked: list[str], statement: str, *args: str,
                cwd: Path | str | None = None) -> subprocess.CompletedProcess[str]:
    """Runs ``statement`` (``sys.argv[1:]`` being ``args``) with ``blocked`` unimportable."""
    return subprocess.run([sys.executable, "-c", SHIM, json.dumps(blocked), statement, *args],
                          capture_output=True, text=True, timeout=120, cwd=cwd)
