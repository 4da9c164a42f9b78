"""On-disk cache of decoded arrays, keyed by the source files they came from.

Decoding a data set (gunzip plus parsing) costs far more than reading a ``.npy``
file, so loaders decode once and keep the arrays here. The key folds in each
source file's name, size and modification time: replacing a source file changes
the key, so a stale cache is never read, only left behind.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

ENV_CACHE = "DATAECHO_CACHE"


def cache_dir() -> Path:
    """Returns the cache directory: ``$DATAECHO_CACHE`` or ``~/.cache/dataecho``.

    Example:
        >>> isinstance(cache_dir(), Path)
        True
    """
    env = os.environ.get(ENV_CACHE)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dataecho"


def source_key(paths: Sequence[Path]) -> str:
    """Returns a short hex key that changes when any source file changes.

    The file's resolved path, size and nanosecond mtime: size plus mtime is what
    ``make`` and pip trust too (hashing the contents would cost as much as decoding
    them, which is what the cache avoids); the path keeps apart copies of a data set
    that kept their mtimes (``cp -p``, ``rsync -a``, ``tar x``) but differ.

    Example:
        >>> len(source_key([Path(__file__)]))
        16
    """
    digest = hashlib.sha256()
    for path in paths:
        stat = path.stat()
        digest.update(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _entry(name: str, key: str, field: str) -> Path:
    return cache_dir() / f"{name}-{key}.{field}.npy"


def load_arrays(name: str, key: str, fields: Sequence[str]) -> dict[str, np.ndarray] | None:
    """Returns the cached arrays for ``(name, key)``, or None when any is missing.

    Example:
        >>> load_arrays("no-such-entry", "0" * 16, ["x"]) is None
        True
    """
    paths = [_entry(name, key, field) for field in fields]
    if not all(path.is_file() for path in paths):
        return None
    try:
        return {field: np.load(path) for field, path in zip(fields, paths, strict=True)}
    except (OSError, ValueError):
        # A file truncated by a crash elsewhere is a miss, not an error: the
        # caller decodes again and overwrites it.
        return None


def save_arrays(name: str, key: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Writes each array atomically; failures to write leave the cache untouched.

    Each file is written under a temporary name in the same directory and then
    renamed, so a concurrent reader sees either no file or a complete one.

    Example:
        >>> save_arrays("doc", "0" * 16, {})  # nothing to write is fine
    """
    try:
        directory = cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        for field, array in arrays.items():
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as handle:
                    np.save(handle, array, allow_pickle=False)
                os.replace(tmp, _entry(name, key, field))
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
    except OSError:
        # A read-only home or a full disk must not stop training: loading still
        # works, it is just slower next time.
        return
