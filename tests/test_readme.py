"""The README is a front door: short, its links absolute and pointing at files, its quick
start printing what it says.

Every README block also runs in tests/test_docs.py; this file pins what the README
itself promises.
"""
import contextlib
import io
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 160
# [text](target) with the target up to a space, ')' or '#'; images too.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)\s]*)?\)")
# The package index page shows the README without the repository around it, so its
# links are absolute: pages and the figure as the repository's main branch has them.
REPOSITORY = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"][
    "Repository"]
RAW = REPOSITORY.replace("https://github.com/", "https://raw.githubusercontent.com/")
INTO_REPOSITORY = (f"{REPOSITORY}/blob/main/", f"{REPOSITORY}/tree/main/", f"{RAW}/main/")
PAGES = ("issues", "pulls", "releases", "discussions")  # GitHub's, not files of ours


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


def _repository_paths(text: str) -> tuple[list[str], list[str]]:
    """The paths the links into the repository name, and its links of another shape."""
    paths, odd = [], []
    for target in LINK.findall(text):
        if not target.startswith((REPOSITORY, RAW)) or target.removeprefix(
                REPOSITORY).strip("/").partition("/")[0] in PAGES:
            continue
        prefix = next((p for p in INTO_REPOSITORY if target.startswith(p)), None)
        if prefix is None:
            odd.append(target)
        else:
            paths.append(target.removeprefix(prefix))
    return paths, odd


def test_every_link_in_the_readme_is_absolute_so_the_package_index_page_shows_it():
    assert _relative_links(README.read_text()) == []


def test_every_link_into_the_repository_points_to_an_existing_file():
    paths, odd = _repository_paths(README.read_text())
    assert paths, "README.md links into docs/; the pattern found none"
    assert odd == [], f"links into the repository must start with one of {INTO_REPOSITORY}"
    missing = [t for t in paths if not (ROOT / t).exists()]
    assert missing == []


def test_the_repository_link_pattern_maps_pages_and_the_figure_to_paths():
    text = (f"[a]({REPOSITORY}/blob/main/docs/x.md#y) ![b]({RAW}/main/docs/f.png) "
            f"[c]({REPOSITORY}/issues) [d]({REPOSITORY}/docs/w.md) [e](https://e.org/z.md)")
    assert _repository_paths(text) == (["docs/x.md", "docs/f.png"], [f"{REPOSITORY}/docs/w.md"])


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
