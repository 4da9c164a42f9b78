"""The result store: one JSON line per finished trial or run, appended atomically.

Every record has a ``key``: the reproduction keys trials by
:func:`dataecho.experiments.record.trial_key`, the demo's grid
(:mod:`dataecho.demo.grid`) keys runs by their spec. A sweep asks the store before
running a trial and skips it when its key is present, so an interrupted sweep resumes
where it stopped and a finished trial is never redone. Appends from several processes
take an exclusive lock (``flock``; ``msvcrt.locking`` on Windows) and write the whole
line in one call, so lines never interleave; a line cut short by a crash is skipped
when reading (and the next append starts a new line), which only means that trial runs
again.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from .._json import finite
from .record import Record


class Store:
    """A JSON-lines file of records, each a dict with a ``key``.

    Args:
        path: the file; created (with its directory) on the first append.

    Example:
        >>> import tempfile
        >>> store = Store(Path(tempfile.mkdtemp()) / "results.jsonl")
        >>> store.append({"key": "abc", "status": "reached", "loss": float("nan")})
        {'key': 'abc', 'loss': None, 'status': 'reached'}
        >>> store.get("abc")["status"], len(store)
        ('reached', 1)
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __iter__(self) -> Iterator[Record]:
        """Every readable record, in the order written (later duplicates win in ``get``)."""
        if not self.path.exists():
            return
        with self.path.open("r", encoding="utf-8") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a crash: that trial simply reruns
                if isinstance(record, dict) and "key" in record:
                    yield record

    def __len__(self) -> int:
        return len(self.index())

    def index(self) -> dict[str, Record]:
        """Records by key."""
        return {record["key"]: record for record in self}

    def get(self, key: str) -> Record | None:
        """The record with ``key``, or None."""
        return self.index().get(key)

    def append(self, record: Record) -> Record:
        """Appends one record as a single line, under an exclusive lock, and syncs it.

        Returns the record as reading the store gives it back (NaN and infinity as
        None, tuples as lists, keys sorted), so a caller needs no re-read.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(finite(record), sort_keys=True, separators=(",", ":"))
        line = text + "\n"
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _lock(fd)
            size = os.fstat(fd).st_size
            if size:
                os.lseek(fd, size - 1, os.SEEK_SET)  # not os.pread: POSIX only
                if os.read(fd, 1) != b"\n":
                    line = "\n" + line  # the previous writer died mid-line
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)  # closing releases the lock
        stored: Record = json.loads(text)
        return stored


def _lock(fd: int) -> None:
    """Takes an exclusive lock on the open file ``fd``, held until it is closed.

    Imported here, not at the top: ``fcntl`` exists only on POSIX, ``msvcrt`` only on
    Windows, and the store's readers need neither.
    """
    if sys.platform == "win32":
        import msvcrt

        # Byte 0 stands for the whole file (every writer locks the same byte; a lock
        # past the end is allowed). LK_LOCK retries for about 10 s, then raises OSError.
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
