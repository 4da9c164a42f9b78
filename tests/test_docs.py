"""The README stays a front door: short, and every relative link points at a file."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 160
# [text](target) with the target up to a space, ')' or '#'; images too.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


def _relative_links(text: str) -> list[str]:
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


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
