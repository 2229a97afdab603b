"""The warm-start ledger of the LM cache file: which *inputs* a caller asked about, per namespace.

The cache's keys are hashes, so the inputs behind its entries cannot be recovered from them.  A caller
that wants to rebuild its requests in a later run (the ELLM suggester: each answered state signature's
caption, per prompt and candidate list) records them here (:meth:`SeenLedger.add`) and reads them back
(:meth:`SeenLedger.items`) to look their answers up.  Rows are small and not counted in the cache's
``bytes``; :meth:`~llmguide.llm.cache.store.LLMCache.clear` empties the ledger too.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable

SCHEMA = "CREATE TABLE IF NOT EXISTS seen (namespace TEXT NOT NULL, item TEXT NOT NULL, PRIMARY KEY (namespace, item));"


class SeenLedger:
    """The ``seen`` table of a cache file, through the cache's connection and lock."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], lock: threading.RLock):
        self._connect, self._lock = connect, lock

    def add(self, namespace: str, items: Iterable[str]) -> None:
        """Record that ``items`` (e.g. state captions) were asked about under ``namespace`` (duplicates once)."""
        rows = [(namespace, str(i)) for i in items]
        if not rows:
            return
        with self._lock:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany("INSERT OR IGNORE INTO seen (namespace, item) VALUES (?, ?)", rows)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def items(self, namespace: str, limit: int | None = None) -> list[str]:
        """The items recorded under ``namespace`` (at most ``limit``; None or 0: all)."""
        with self._lock:
            if limit:
                cur = self._connect().execute("SELECT item FROM seen WHERE namespace = ? LIMIT ?",
                                              (namespace, int(limit)))
            else:
                cur = self._connect().execute("SELECT item FROM seen WHERE namespace = ?", (namespace,))
            return [row[0] for row in cur]

    @staticmethod
    def clear(conn: sqlite3.Connection) -> None:
        """Delete every row (inside the caller's transaction)."""
        conn.execute("DELETE FROM seen")
