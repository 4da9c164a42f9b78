"""What `pip install dataecho` gets: the wheel and sdist hold what they should, on any OS."""

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

import dataecho

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """The sdist and the wheel, built from a copy of the sources (no build/ left here)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "dataecho", src / "dataecho",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (src / "tests").mkdir()  # as in the repository: the sdist must leave it out
    shutil.copy(ROOT / "tests" / "test_packaging.py", src / "tests")
    out = tmp_path_factory.mktemp("dist")
    build = textwrap.dedent(f"""
        import setuptools.build_meta as b
        b.build_sdist({str(out)!r}); b.build_wheel({str(out)!r})
    """)
    done = subprocess.run([sys.executable, "-c", build], cwd=src, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return next(out.glob("*.tar.gz")), next(out.glob("*.whl"))


def test_the_wheel_holds_py_typed_the_license_and_the_metadata(dists):
    with zipfile.ZipFile(dists[1]) as wheel:
        names = set(wheel.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(info).decode()
    assert "dataecho/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert f"\nVersion: {dataecho.__version__}\n" in metadata
    assert "\nLicense-Expression: Apache-2.0\n" in metadata
    assert "\nProject-URL: Repository, https://github.com/dataecho/dataecho\n" in metadata
    assert "\nClassifier: Typing :: Typed\n" in metadata


def test_the_package_index_page_s_links_and_figure_are_absolute(dists):
    # The index shows the README from the wheel's metadata, away from the repository:
    # a relative link there leads nowhere and a relative figure does not load.
    with zipfile.ZipFile(dists[1]) as wheel:
        info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        description = wheel.read(info).decode().partition("\n\n")[2]
    targets = re.findall(r"\]\(([^)\s]+)\)", description)
    assert "![" in description and len(targets) > 10
    assert [t for t in targets if not t.startswith("https://")] == []


def test_the_wheel_ships_no_benchmarks_so_report_asks_for_the_wall_clock_summary(dists):
    # `dataecho report` and `reproduce` say so when --wallclock is left out (test_cli).
    with zipfile.ZipFile(dists[1]) as wheel:
        assert not [n for n in wheel.namelist() if n.startswith("benchmarks/")]


def test_the_sdist_holds_the_license_and_leaves_the_tests_out(dists):
    with tarfile.open(dists[0]) as sdist:
        names = {name.partition("/")[2] for name in sdist.getnames()}
    assert {"LICENSE", "dataecho/py.typed", "pyproject.toml", "dataecho/cli.py"} <= names
    assert not [name for name in names if name.startswith("tests")]


def test_the_license_is_the_apache_2_0_text():
    text = (ROOT / "LICENSE").read_text()
    assert text.strip().startswith("Apache License\n                           Version 2.0")
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 11000


def test_the_version_has_one_source():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "\nversion =" not in pyproject.partition("[project.optional-dependencies]")[0]
    assert importlib.metadata.version("dataecho") == dataecho.__version__


def test_the_store_and_the_demo_report_import_without_posix_only_modules():
    # fcntl and resource do not exist on Windows: they are imported where used.
    code = textwrap.dedent("""
        import importlib.abc, sys

        class Windows(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name in ("fcntl", "resource"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.modules.pop("fcntl", None); sys.modules.pop("resource", None)
        sys.meta_path.insert(0, Windows())
        import dataecho.experiments.store
        from dataecho.demo.report import peak_rss_mb
        print(peak_rss_mb([]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "{'main_mb': None, 'largest_worker_mb': None, 'sum_mb': None}\n"


def test_published_extras_are_ranges_and_the_exact_versions_live_in_the_constraints():
    # A pin in an extra would make pip replace a user's own (CUDA) torch; the exact
    # versions this repository tests with are in constraints.txt, which the Makefile uses.
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    pinned = [req for reqs in extras.values() for req in reqs if "==" in req]
    assert pinned == []
    constraints = [line.split("==")[0] for line in (ROOT / "constraints.txt").read_text()
                   .splitlines() if line and not line.startswith("#")]
    assert "torch" in constraints
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()
