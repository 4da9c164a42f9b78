"""Every ```python block in README.md and docs/ runs as written, in a fresh process.

A block runs alone (no other block's names), from a temporary directory, so it must
bring its own imports and data. A ```text block right after it is its printed output,
and must match. A block that cannot run here carries ``<!-- skip: the reason -->`` on
the line before its fence; it is reported as a skip with that reason (which
``DATAECHO_REQUIRE_ALL=1`` counts as a failure).
"""
import os
import pathlib
import re
import struct
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TIMEOUT_S = 60
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
SKIP = re.compile(r"<!--\s*skip:\s*(.*?)\s*-->")


@dataclass(frozen=True)
class Block:
    path: pathlib.Path
    line: int  # 1-based line of the opening fence
    code: str
    output: str | None  # the ```text block that follows, if any
    skip: str | None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _fences(lines: list[str]) -> list[tuple[int, int, str, str]]:
    """(open index, close index, language, indent) of every fenced block."""
    out, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, lang = match.groups()
        end = next(j for j in range(i + 1, len(lines))
                   if lines[j].strip() == "```" and lines[j].startswith(indent))
        out.append((i, end, lang, indent))
        i = end + 1
    return out


def blocks(path: pathlib.Path) -> list[Block]:
    """The page's python blocks, each with its output block and skip reason."""
    lines = path.read_text().splitlines()
    fences = _fences(lines)
    found = []
    for k, (start, end, lang, _indent) in enumerate(fences):
        if lang != "python":
            continue
        code = textwrap.dedent("\n".join(lines[start + 1:end])) + "\n"
        before = next((line for line in reversed(lines[:start]) if line.strip()), "")
        skip = SKIP.search(before)
        output = None
        if k + 1 < len(fences) and fences[k + 1][2] == "text":
            nxt, nxt_end = fences[k + 1][0], fences[k + 1][1]
            if all(not line.strip() or line.strip().endswith(":")
                   for line in lines[end + 1:nxt]) and nxt - end <= 4:
                output = textwrap.dedent("\n".join(lines[nxt + 1:nxt_end]))
        found.append(Block(path, start + 1, code, output, skip and skip.group(1)))
    return found


ALL = [block for page in PAGES for block in blocks(page)]


def _run(block: Block, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    # Padding puts the block's first line at its line in the page, so a traceback's
    # line numbers are the page's.
    script = cwd / (block.path.name + ".py")
    script.write_text("\n" * block.line + block.code)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
           "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    return subprocess.run([sys.executable, script.name], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=TIMEOUT_S)


@pytest.mark.parametrize("block", ALL, ids=[b.name for b in ALL])
def test_every_python_block_in_the_docs_runs_as_written(block: Block, tmp_path: pathlib.Path):
    if block.skip:
        pytest.skip(f"{block.name}: {block.skip}")
    try:
        done = _run(block, tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.name}: the block ran past {TIMEOUT_S} s", pytrace=False)
    if done.returncode != 0:
        pytest.fail(f"{block.name}: the block failed (exit {done.returncode}):\n"
                    f"{done.stderr[-3000:]}", pytrace=False)
    if block.output is not None:
        printed = [line.rstrip() for line in done.stdout.strip().splitlines()]
        stated = [line.rstrip() for line in block.output.strip().splitlines()]
        assert printed == stated, f"{block.name}: the block printed other than its page says"


def test_the_docs_hold_python_blocks_and_every_skip_says_why():
    assert len(ALL) >= 10, "the block pattern found too few ```python blocks"
    assert all(b.skip is None or b.skip.strip() for b in ALL)


def test_block_parsing_finds_indented_blocks_outputs_and_skips(tmp_path: pathlib.Path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n<!-- skip: needs a GPU -->\n```python\nimport torch\n```\n\n"
                    "1. item\n\n   ```python\n   print(1)\n   ```\n\n   ```text\n   1\n"
                    "   ```\n")
    found = blocks(page)
    assert [(b.line, b.skip, b.output) for b in found] == [(4, "needs a GPU", None),
                                                           (10, None, "1")]
    assert found[1].code == "print(1)\n"


def _png_size(path: pathlib.Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def test_the_figure_script_redraws_every_figure_in_docs_figures(tmp_path: pathlib.Path):
    pytest.importorskip("matplotlib")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "figures.py"),
                           "--out", str(tmp_path)], cwd=ROOT, text=True,
                          capture_output=True, timeout=TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    committed = sorted((ROOT / "docs" / "figures").glob("*.png"))
    assert [p.name for p in committed] == sorted(p.name for p in tmp_path.glob("*.png"))
    # Bytes depend on the matplotlib and FreeType versions; the size does not.
    assert [_png_size(p) for p in committed] == [_png_size(tmp_path / p.name)
                                                 for p in committed]


def test_a_comment_above_a_constant_becomes_its_api_description():
    pytest.importorskip("griffe")
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from griffe_comments import comment_above
    finally:
        sys.path.remove(str(ROOT / "docs"))
    lines = ["X = 1", "#: Uses at most,", "#: by default.", "LIMIT = 4", "Y = 2"]
    assert comment_above(lines, 4) == "Uses at most,\nby default."
    assert comment_above(lines, 5) is None
