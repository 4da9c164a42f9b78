"""The README's self-contained examples run and print what the README says they print."""
import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _block_after(heading: str) -> str:
    text = README.read_text()
    start = text.index(heading)
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    if match is None:
        raise LookupError(f"no python block after {heading!r}")
    return match.group(1)


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
