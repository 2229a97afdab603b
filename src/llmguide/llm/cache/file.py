"""The LM cache's file on disk: migrating an older schema, telling a corrupt SQLite file from a busy one,
checking it, moving it aside.

A corrupt cache (a disk fault, a copy cut short, a file that is not SQLite) raises
:class:`CacheCorruptError`, one line naming the file and the fix.  A training run instead moves the
file aside (:func:`move_aside`: ``<file>.corrupt-<time>``, with its ``-wal`` / ``-shm`` companions;
never deleted), logs a warning and continues with a fresh cache.  Processes that share the file
serialise the move with a lock file (``<file>.lock``) and re-check first, so a cache another process
has just replaced is not moved again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from llmguide.core.errors import LLMGuideError

log = logging.getLogger(__name__)

_COMPANIONS = ("", "-wal", "-shm", "-journal")
# sqlite3.DatabaseError messages that mean the file's content is damaged (not: locked, busy, read-only, full)
_CORRUPT = ("not a database", "malformed", "corrupt", "file is encrypted", "unsupported file format")


class CacheCorruptError(LLMGuideError):
    """The LM cache file is damaged; the message names the file and the fix."""

    def __init__(self, path: Path, detail: str):
        self.path, self.detail = Path(path), detail
        super().__init__(f"LM cache {path} is corrupt ({detail}); fix: `llmguide cache clear --path {path}` "
                         "moves it aside and starts an empty cache (training does that by itself)")


def migrate(conn: sqlite3.Connection, row_overhead: int) -> None:
    """Add ``size``/``accessed`` to a cache file written before the size bound, and the ``bytes`` counter
    (an entry's size: its key twice, value and meta in bytes plus ``row_overhead``)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(entries)")}
    has_bytes = conn.execute("SELECT 1 FROM counters WHERE name = 'bytes'").fetchone() is not None
    if {"size", "accessed"} <= columns and has_bytes:
        conn.execute("CREATE INDEX IF NOT EXISTS entries_accessed ON entries (accessed)")
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(entries)")}
        for name, kind in (("size", "INTEGER"), ("accessed", "REAL")):
            if name not in columns:
                conn.execute(f"ALTER TABLE entries ADD COLUMN {name} {kind}")
        conn.execute(
            "UPDATE entries SET size = 2 * length(CAST(key AS BLOB)) + length(CAST(value AS BLOB)) + "
            f"length(CAST(coalesce(meta, '') AS BLOB)) + {int(row_overhead)} WHERE size IS NULL")
        conn.execute("UPDATE entries SET accessed = coalesce(created, 0) WHERE accessed IS NULL")
        conn.execute("INSERT OR REPLACE INTO counters (name, value) SELECT 'bytes', coalesce(SUM(size), 0) FROM entries")
        conn.execute("CREATE INDEX IF NOT EXISTS entries_accessed ON entries (accessed)")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def is_corruption(err: BaseException) -> bool:
    """Whether ``err`` says that a SQLite file's content is damaged."""
    return isinstance(err, sqlite3.DatabaseError) and any(text in str(err).lower() for text in _CORRUPT)


def check(path: str | Path, full: bool = True) -> list[str]:
    """Problems of the SQLite file at ``path`` (``[]``: sound): ``PRAGMA integrity_check`` (``full``) or
    ``quick_check`` (writes nothing); a missing file has none.  Errors other than corruption (locked) raise."""
    path = Path(path)
    if not path.exists():
        return []
    conn = sqlite3.connect(str(path), timeout=60.0)
    try:
        rows = conn.execute("PRAGMA integrity_check" if full else "PRAGMA quick_check").fetchall()
        problems = [str(r[0]) for r in rows if str(r[0]).lower() != "ok"]
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return problems
    except sqlite3.DatabaseError as err:
        if not is_corruption(err):
            raise
        return [str(err)]
    finally:
        conn.close()


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``<path>.lock`` (POSIX ``flock``; a no-op where there is none)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(f"{path}.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def move_aside(path: str | Path) -> Path:
    """Rename the file at ``path`` and its ``-wal`` / ``-shm`` / ``-journal`` files to ``<path>.corrupt-<time>``
    (never deleted); the new name of the main file."""
    path = Path(path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    if any(Path(f"{target}{s}").exists() for s in _COMPANIONS):
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{os.getpid()}")
    for suffix in _COMPANIONS:
        src = Path(f"{path}{suffix}")
        if src.exists():
            os.replace(src, f"{target}{suffix}")
    return target


def recover(path: Path, detail: str) -> Path | None:
    """Move the corrupt cache at ``path`` aside (unless another process already replaced it with a sound one)
    and log a warning; the new name of the corrupt file, or None when nothing was moved."""
    with file_lock(path):
        if not check(path, full=False):   # replaced by another process meanwhile
            return None
        moved = move_aside(path)
    log.warning("LM cache %s is corrupt (%s); moved it to %s and continuing with an empty cache", path, detail, moved)
    return moved


def enable_wal(conn: sqlite3.Connection, timeout: float) -> str:
    """``PRAGMA journal_mode=WAL``, retried for up to ``timeout`` seconds while the file is locked: SQLite can
    answer "database is locked" here at once, without waiting out the busy timeout, while another process opens
    the same file."""
    deadline, delay = time.monotonic() + timeout, 0.02
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
