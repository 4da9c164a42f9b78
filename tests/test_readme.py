"""The README is a front door: short, its links point at files, its quick start prints
what it says.

Every README block also runs in tests/test_docs.py; this file pins what the README
itself promises.
"""
import contextlib
import io
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 160
# [text](target) with the target up to a space, ')' or '#'; images too.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


def _relative_links(text: str) -> list[str]:
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def _block_after(heading: str) -> str:
    text = README.read_text()
    start = text.index(heading)
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    if match is None:
        raise LookupError(f"no python block after {heading!r}")
    return match.group(1)


def test_readme_fits_on_two_screens():
    lines = README.read_text().count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_every_relative_link_in_the_readme_points_to_an_existing_file():
    links = _relative_links(README.read_text())
    assert links, "README.md links into docs/; the pattern found none"
    missing = [t for t in links if not (ROOT / t).exists()]
    assert missing == []


def test_the_link_pattern_skips_urls_and_keeps_anchored_paths():
    text = "[a](docs/x.md#y) [b](https://e.org/z.md) [c](mailto:q@e.org) [d](docs/w.md)"
    assert _relative_links(text) == ["docs/x.md", "docs/w.md"]


def test_quick_start_runs_and_prints_the_counts_its_comment_states():
    code = _block_after("## Quick start")
    printed = re.search(r"print\(pipe.stats\(\)\)\s+# (.*)", code)
    assert printed is not None, "the quick start no longer documents its output"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    lines = out.getvalue().splitlines()
    assert lines[0] == printed.group(1).strip()
    assert lines[1].startswith("Batch(Shuffle(Map(Echo(Source(")
