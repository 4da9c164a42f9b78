"""Every ```python block in README.md and docs/ runs as written, in a fresh process.

A block runs alone (no other block's names), from a temporary directory, so it must
bring its own imports and data. Two markers, on the line before a fence:

- ``<!-- continues -->``: the block goes on from the python block above it on the same
  page (a page that builds one example over several sections); the chain runs once,
  as one script, and each block is told apart by its lines.
- ``<!-- excerpt: examples/name.py -->``: the block shows lines of a runnable example
  that tests/test_examples.py runs (a multi-process job, say); every line of the block
  but ``...`` must be a line of that file, so the excerpt cannot drift from it.
- ``<!-- skip: the reason -->``: the block cannot run here; it is reported as a skip
  with that reason (which ``DATAECHO_REQUIRE_ALL=1`` counts as a failure).
- ``<!-- torchrun 2 -->``: the block (with the blocks that continue it) is a
  multi-process job: it runs as printed under ``torchrun --nproc_per_node 2`` (gloo on
  CPU), and its output is process 0's. Each such block is one launch (seconds): show
  several settings in one block rather than one block each.

A ```text block right after a python block is its printed output, and must match.
"""
import os
import pathlib
import re
import struct
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TIMEOUT_S = 120  # a hung block; they take seconds
WIDTH = 88  # characters of a code line
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
SKIP = re.compile(r"<!--\s*skip:\s*(.*?)\s*-->")
CONTINUES = re.compile(r"<!--\s*continues\s*-->")
EXCERPT = re.compile(r"<!--\s*excerpt:\s*(\S+)\s*-->")
TORCHRUN = re.compile(r"<!--\s*torchrun\s+(\d+)\s*-->")
MARK = "\x00block"  # printed before each block of a chain, to split their output


@dataclass(frozen=True)
class Block:
    path: pathlib.Path
    line: int  # 1-based line of the opening fence
    code: str
    output: str | None  # the ```text block that follows, if any
    skip: str | None
    continues: bool = False  # goes on from the page's python block above
    excerpt: str | None = None  # the example file the block's lines come from
    processes: int = 1  # run under torchrun with this many processes when more than 1

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
        excerpt = EXCERPT.search(before)
        torchrun = TORCHRUN.search(before)
        found.append(Block(path, start + 1, code, output, skip and skip.group(1),
                           bool(found) and CONTINUES.search(before) is not None,
                           excerpt and excerpt.group(1),
                           int(torchrun.group(1)) if torchrun else 1))
    return found


def chain_of(block: Block, page: list[Block]) -> list[Block]:
    """The blocks ``block`` runs after, then itself, then the blocks that continue it."""
    k = page.index(block)
    start, end = k, k + 1
    while page[start].continues:
        start -= 1
    while end < len(page) and page[end].continues:
        end += 1
    return page[start:end]


BY_PAGE = {page: blocks(page) for page in PAGES}
ALL = [block for found in BY_PAGE.values() for block in found]


def script_of(chain: list[Block]) -> str:
    """The chain's code, each block at its own lines of the page, so a traceback's line
    numbers are the page's; each fence line prints a mark that splits the output."""
    lines: list[str] = []
    for block in chain:
        lines += [""] * (block.line - 1 - len(lines))
        lines += [f"print({MARK!r}, flush=True)", *block.code.splitlines()]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Run:
    returncode: int | None  # None: it ran past the timeout
    outputs: dict[int, str]  # printed output per block, by fence line
    stderr: str
    failed_at: int | None  # the page line of the deepest traceback frame in the page


_RUNS: dict[tuple[pathlib.Path, int], Future[Run]] = {}
_LOCK = threading.Lock()


def run_chain(chain: list[Block], cwd: pathlib.Path,
              pool: ThreadPoolExecutor | None = None) -> Future[Run]:
    """The chain's one run per test session, as a script from ``cwd``: started in
    ``pool`` if given (the caller waits on the future), else here."""
    key = (chain[0].path, chain[0].line)
    with _LOCK:
        if key not in _RUNS:
            if pool is not None:
                _RUNS[key] = pool.submit(_run, chain, cwd)
            else:
                _RUNS[key] = Future()
                _RUNS[key].set_result(_run(chain, cwd))
        return _RUNS[key]


def _run(chain: list[Block], cwd: pathlib.Path) -> Run:
    # A module name: spawn and forkserver workers import the script by its path.
    script = cwd / (re.sub(r"\W", "_", chain[0].path.stem) + "_md.py")
    script.write_text(script_of(chain))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
           "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    processes = chain[0].processes
    command = [sys.executable, script.name]
    if processes > 1:  # each rank's streams to its own files: the output is rank 0's
        env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        command[1:1] = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                        str(processes), "--log-dir", "ranks", "--redirects", "3"]
    try:
        done = subprocess.run(command, cwd=cwd, env=env,
                              text=True, capture_output=True, timeout=TIMEOUT_S)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as error:
        code, out, err = None, str(error.stdout or ""), str(error.stderr or "")
    if processes > 1:  # <log-dir>/<run>/attempt_0/<local rank>/std{out,err}.log
        ranks = sorted((cwd / "ranks").rglob("std*.log"))
        outs = {p.parent.name: p.read_text() for p in ranks if p.name == "stdout.log"}
        err += "".join(f"\n[process {p.parent.name}]\n{p.read_text()}" for p in ranks
                       if p.name == "stderr.log")
        out = outs.get("0", out)
        if code == 0 and any(other != out for other in outs.values()):  # same on each
            code, err = 1, err + "".join(f"\n[process {k} printed]\n{v}"
                                         for k, v in outs.items())
    parts = out.split(MARK + "\n")[1:]
    frames = re.findall(rf'File "[^"]*{re.escape(script.name)}", line (\d+)', err)
    return Run(code, {b.line: p for b, p in zip(chain, parts, strict=False)}, err,
               int(frames[-1]) if frames else None)


@pytest.fixture(scope="module")
def started(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Starts every selected block's chain at once, two at a time: the blocks mostly
    wait for imports and worker start-up, so the docs test takes half as long."""
    name = test_every_python_block_in_the_docs_runs_as_written.__name__
    chosen = [item.callspec.params["block"] for item in request.session.items
              if getattr(item, "originalname", None) == name]
    with ThreadPoolExecutor(max_workers=2) as pool:
        for block in chosen:
            if not (block.skip or block.excerpt):
                run_chain(chain_of(block, BY_PAGE[block.path]),
                          tmp_path_factory.mktemp("block"), pool)
        yield


def _code_line(line: str) -> str:
    """A line without its indentation or trailing comment."""
    return re.sub(r"\s+#.*$", "", line).strip()


def lines_not_in(excerpt: str, source: str) -> list[str]:
    """The excerpt's lines, ``...`` aside, that are no line of ``source``."""
    have = {_code_line(line) for line in source.splitlines()}
    return [line for line in map(_code_line, excerpt.splitlines())
            if line and line != "..." and line not in have]


def _lines(output: str) -> list[str]:
    return [line.rstrip() for line in output.strip().splitlines()]


@pytest.mark.parametrize("block", ALL, ids=[b.name for b in ALL])
def test_every_python_block_in_the_docs_runs_as_written(block: Block, tmp_path: pathlib.Path,
                                                         started: None):
    if block.skip:
        pytest.skip(f"{block.name}: {block.skip}")
    if block.excerpt:
        missing = lines_not_in(block.code, (ROOT / block.excerpt).read_text())
        assert missing == [], f"{block.name}: lines not in {block.excerpt}"
        return
    chain = chain_of(block, BY_PAGE[block.path])
    run = run_chain(chain, tmp_path).result()
    end = block.line + block.code.count("\n")
    if run.returncode != 0 and (run.failed_at is None or run.failed_at <= end):
        where = (f"ran past {TIMEOUT_S} s" if run.returncode is None
                 else f"failed (exit {run.returncode})")
        if run.failed_at is not None and run.failed_at < block.line:
            where += f" in the block it continues, at line {run.failed_at}"
        pytest.fail(f"{block.name}: the block {where}:\n{run.stderr[-3000:]}",
                    pytrace=False)
    if block.output is not None:
        printed = _lines(run.outputs.get(block.line, ""))
        assert printed == _lines(block.output), (
            f"{block.name}: the block printed other than its page says")


def test_python_blocks_fit_the_page_without_clipping():
    # The site shows about 95 characters of code; excerpts are verbatim, at ruff's width.
    wide = [f"{b.path.relative_to(ROOT)}:{b.line + k}" for b in ALL if not b.excerpt
            for k, line in enumerate(b.code.splitlines(), 1) if len(line) > WIDTH]
    assert wide == [], f"python lines over {WIDTH} characters: wrap them"


def test_the_docs_hold_python_blocks_and_every_skip_says_why():
    assert len(ALL) >= 10, "the block pattern found too few ```python blocks"
    assert all(b.skip is None or b.skip.strip() for b in ALL)


def test_block_parsing_finds_indented_blocks_outputs_skips_and_chains(
        tmp_path: pathlib.Path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n<!-- skip: needs a GPU -->\n```python\nimport torch\n```\n\n"
                    "1. item\n\n   ```python\n   print(1)\n   ```\n\n   ```text\n   1\n"
                    "   ```\n\n<!-- continues -->\n```python\nprint(2)\n```\n")
    found = blocks(page)
    assert [(b.line, b.skip, b.output, b.continues) for b in found] == [
        (4, "needs a GPU", None, False), (10, None, "1", False), (19, None, None, True)]
    assert found[1].code == "print(1)\n"
    assert chain_of(found[2], found) == chain_of(found[1], found) == found[1:]


def test_a_block_marked_torchrun_runs_on_that_many_processes_and_the_rest_on_one(
        tmp_path: pathlib.Path):
    page = tmp_path / "page.md"
    page.write_text("<!-- torchrun 2 -->\n```python\nimport os\n```\n\n"
                    "<!-- continues -->\n```python\nprint(1)\n```\n\n```python\nx = 1\n```\n")
    found = blocks(page)
    assert [b.processes for b in chain_of(found[1], found)] == [2, 1]  # the first decides
    assert found[2].processes == 1
    assert sum(b.processes > 1 for b in ALL) <= 3  # each launch takes seconds


def test_a_chain_runs_once_and_each_block_gets_its_output_and_its_failure(
        tmp_path: pathlib.Path):
    page = tmp_path / "chain.md"
    page.write_text("```python\nx = 1\nprint(x)\n```\n\n<!-- continues -->\n"
                    "```python\nprint(x + 1)\nraise SystemExit(x / 0)\n```\n")
    found = blocks(page)
    run = run_chain(found, tmp_path).result()
    assert run.outputs == {1: "1\n", 7: "2\n"}
    assert run.returncode == 1 and run.failed_at == 9


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


def test_an_excerpt_must_be_lines_of_its_file():
    source = "def f(x):\n    y = x + 1  # why\n    return y\n"
    assert lines_not_in("def f(x):\n    ...\n    return y  # the result\n", source) == []
    assert lines_not_in("def f(x):\n    return x\n", source) == ["return x"]
