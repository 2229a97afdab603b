"""Persistent LM cache: the :class:`LLMCache` key/value store in one SQLite (WAL) file.

One cache file is shared by every run, seed and process on the machine (default
``$LLMGUIDE_CACHE_DIR/llm_cache.sqlite``).  Safety properties:

- WAL journal with ``synchronous=NORMAL``: a committed ``put`` survives ``kill -9`` of the writer
  (only an OS crash / power cut can lose the last transactions; the file never corrupts).
- Each ``put`` is its own transaction; readers never see half-written entries.
- Several processes may share the file (``busy_timeout``); several threads share one connection
  behind a lock; after ``fork`` the child opens its own connection.

Hit/miss counters: kept per process in memory and added to a persistent ``counters`` table every
``flush_every`` lookups and on :meth:`LLMCache.flush`/:meth:`LLMCache.close`.  ``stats()`` reports
both the persistent totals (``hits``/``misses``, all processes ever, minus at most the unflushed
counts of processes that were killed) and this process's (``process_hits``/``process_misses``).

Size bound (``max_bytes``, default 256 MiB): every entry has a ``size`` (its key, value and meta in
bytes plus a fixed row overhead) and the persistent counter ``bytes`` is their sum, updated in the
same transaction as the write.  A ``put`` that takes ``bytes`` over ``max_bytes`` evicts the *least
recently used* entries (``accessed``: the write time, refreshed for entries read since the last
:meth:`~LLMCache.flush` -- so recency is exact to ``flush_every`` lookups and costs no write per hit)
until ``bytes <= 0.9 * max_bytes``.  Evictions are counted persistently (``evictions``,
``evicted_bytes``).  A single entry larger than ``max_bytes / 8`` is never stored.  The WAL is
checkpointed every 256 pages and truncated to 4 MiB, so the files on disk stay near ``max_bytes``
(SQLite page overhead included, roughly ``1.5 * max_bytes + 4 MiB`` at worst).

Warm start: :meth:`LLMCache.add_seen` / :meth:`LLMCache.seen` record and read back which *inputs* a
caller asked about (the :class:`~llmguide.llm.cache.seen.SeenLedger` in the same file).

A corrupt file (:mod:`llmguide.llm.cache.file`): with ``on_corrupt="move"`` (the default, what training
uses) it is moved aside to ``<file>.corrupt-<time>`` (never deleted), a warning is logged and an empty
cache takes its place; with ``on_corrupt="raise"`` opening raises :class:`CacheCorruptError`, one line
naming the file and the fix.

The :class:`~llmguide.llm.cache.cached_lm.CachedLM` wrapper answers from this store;
``llmguide cache stats|export|clear|check`` is in :mod:`llmguide.llm.cache.cli`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from llmguide.llm.base import canonical_json
from llmguide.llm.cache import file as cache_file
from llmguide.llm.cache.file import CacheCorruptError
from llmguide.llm.cache.seen import SCHEMA as _SEEN_SCHEMA
from llmguide.llm.cache.seen import SeenLedger

__all__ = ["DEFAULT_MAX_BYTES", "CacheCorruptError", "LLMCache", "canonical_json", "default_cache_path"]

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    backend TEXT,
    model_id TEXT,
    template_version TEXT,
    kind TEXT,
    meta TEXT,
    created REAL,
    size INTEGER,
    accessed REAL
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
""" + _SEEN_SCHEMA

DEFAULT_MAX_BYTES = 256 * 2**20
ROW_OVERHEAD = 64          # bytes charged per entry besides its text (row header, index entry)
LOW_WATER = 0.9            # eviction frees down to this fraction of max_bytes
WAL_AUTOCHECKPOINT = 256   # pages
WAL_SIZE_LIMIT = 4 * 2**20


def _entry_size(key: str, value: str, meta: str) -> int:
    return 2 * len(key.encode()) + len(value.encode()) + len(meta.encode()) + ROW_OVERHEAD


class LLMCache:
    """Key/value store of LM answers in one SQLite file (thread-, process- and kill-safe)."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 60.0, flush_every: int = 256,
                 max_bytes: int = DEFAULT_MAX_BYTES, on_corrupt: str = "move"):
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        if on_corrupt not in ("move", "raise"):
            raise ValueError(f"on_corrupt must be 'move' or 'raise', got {on_corrupt!r}")
        self.on_corrupt = on_corrupt
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.busy_timeout = busy_timeout
        self.flush_every = flush_every
        self.max_bytes = int(max_bytes)
        self._process_evictions = 0
        self._process_rejected = 0
        self._bytes = 0  # last known total of entry sizes (persistent counter ``bytes``)
        self._touched: dict[str, float] = {}
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._process_hits = 0
        self._process_misses = 0
        self._unflushed = {"hits": 0, "misses": 0}
        self._ledger = SeenLedger(self._connect, self._lock)
        self._connect()

    # -- connection -------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        try:
            conn = self._open()
        except sqlite3.DatabaseError as err:
            if not cache_file.is_corruption(err):
                raise
            if self.on_corrupt == "raise":
                raise CacheCorruptError(self.path, str(err)) from None
            cache_file.recover(self.path, str(err))
            try:
                conn = self._open()
            except sqlite3.DatabaseError as again:
                if not cache_file.is_corruption(again):
                    raise
                raise CacheCorruptError(self.path, str(again)) from None
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _open(self) -> sqlite3.Connection:
        """A configured connection to a sound file (schema created, migrated); closed again on any error."""
        conn = sqlite3.connect(str(self.path), timeout=self.busy_timeout, check_same_thread=False,
                               isolation_level=None)  # autocommit; explicit BEGIN where needed
        try:
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            mode = cache_file.enable_wal(conn, self.busy_timeout)
            if str(mode).lower() != "wal":
                log.warning("LLM cache %s: could not enable WAL (journal_mode=%s)", self.path, mode)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT}")
            conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            conn.executescript(_SCHEMA)
            cache_file.migrate(conn, ROW_OVERHEAD)
            problems = [r[0] for r in conn.execute("PRAGMA quick_check") if r[0] != "ok"]   # ~0.1 s per 100 MiB
            if problems:
                raise sqlite3.DatabaseError(f"database disk image is malformed: {'; '.join(problems[:3])}")
        except BaseException:
            conn.close()
            raise
        return conn

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), "busy_timeout": self.busy_timeout, "flush_every": self.flush_every,
                "max_bytes": self.max_bytes, "on_corrupt": self.on_corrupt}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], busy_timeout=state["busy_timeout"], flush_every=state["flush_every"],
                      max_bytes=state.get("max_bytes", DEFAULT_MAX_BYTES), on_corrupt=state.get("on_corrupt", "move"))

    @property
    def journal_mode(self) -> str:
        with self._lock:
            return str(self._connect().execute("PRAGMA journal_mode").fetchone()[0]).lower()

    # -- keys and entries -------------------------------------------------------------------------
    @staticmethod
    def key(backend: str, model_id: str, template_version: str, kind: str, payload: dict[str, Any]) -> str:
        """sha256 over the canonical JSON of every component (payload holds prompt + sampling params)."""
        material = {"backend": backend, "model_id": model_id, "template_version": template_version,
                    "kind": kind, "payload": payload}
        return hashlib.sha256(canonical_json(material).encode("utf-8")).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored value for ``key`` or None (counted as a hit or a miss)."""
        with self._lock:
            row = self._connect().execute("SELECT value FROM entries WHERE key = ?", (key,)).fetchone()
            name = "hits" if row is not None else "misses"
            self._unflushed[name] += 1
            if row is not None:
                self._process_hits += 1
                self._touched[key] = time.time()
            else:
                self._process_misses += 1
            if sum(self._unflushed.values()) >= self.flush_every:
                self.flush()
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except json.JSONDecodeError:  # cannot happen through put(); treat a foreign bad row as a miss
            log.warning("LLM cache %s: unreadable entry %s ignored", self.path, key[:12])
            return None

    def put(self, key: str, value: dict[str, Any], meta: dict[str, Any] | None = None) -> bool:
        """Store ``value`` (JSON-serialisable) under ``key``; ``meta`` may hold backend/model_id/... .

        Returns False (nothing stored) for an entry larger than ``max_bytes / 8``.  Evicts the least
        recently used entries when the total goes over ``max_bytes`` (same transaction).
        """
        meta = dict(meta or {})
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        backend, model_id = str(meta.pop("backend", "")), str(meta.pop("model_id", ""))
        version, kind = str(meta.pop("template_version", "")), str(meta.pop("kind", ""))
        meta_text = json.dumps(meta, ensure_ascii=False, default=str)
        size = _entry_size(key, text, meta_text) + len(backend) + len(model_id) + len(version) + len(kind)
        if size > self.max_bytes // 8:
            with self._lock:
                self._process_rejected += 1
            log.debug("LLM cache %s: entry of %d bytes not stored (limit %d)", self.path, size, self.max_bytes // 8)
            return False
        now = time.time()
        with self._lock:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            try:
                old = conn.execute("SELECT size FROM entries WHERE key = ?", (key,)).fetchone()
                conn.execute(
                    "INSERT OR REPLACE INTO entries (key, value, backend, model_id, template_version, kind, meta,"
                    " created, size, accessed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (key, text, backend, model_id, version, kind, meta_text, now, size, now))
                total = self._add(conn, "bytes", size - int((old[0] or 0) if old else 0))
                if total > self.max_bytes:
                    total = self._evict(conn, total, keep=key)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self._bytes = total
            self._touched.pop(key, None)
        return True

    @staticmethod
    def _add(conn: sqlite3.Connection, name: str, delta: int) -> int:
        """Add ``delta`` to the persistent counter ``name``; its new value (inside the caller's transaction)."""
        conn.execute("INSERT INTO counters (name, value) VALUES (?, ?) "
                     "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value", (name, delta))
        return int(conn.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()[0])

    def _evict(self, conn: sqlite3.Connection, total: int, keep: str) -> int:
        """Delete least recently used entries (never ``keep``) until ``total <= LOW_WATER * max_bytes``."""
        target = int(self.max_bytes * LOW_WATER)
        victims: list[tuple[str]] = []
        freed = 0
        for old_key, size in conn.execute(
                "SELECT key, size FROM entries WHERE key != ? ORDER BY accessed ASC, created ASC", (keep,)):
            if total - freed <= target:
                break
            victims.append((old_key,))
            freed += int(size or 0)
        if victims:
            conn.executemany("DELETE FROM entries WHERE key = ?", victims)
            self._add(conn, "evictions", len(victims))
            self._add(conn, "evicted_bytes", freed)
            self._process_evictions += len(victims)
            for (old_key,) in victims:
                self._touched.pop(old_key, None)
        return self._add(conn, "bytes", -freed)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._connect().execute("SELECT 1 FROM entries WHERE key = ?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return int(self._connect().execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    # -- statistics and maintenance ---------------------------------------------------------------
    def flush(self) -> None:
        """Add this process's unflushed hit/miss counts to the persistent counters; refresh read entries'
        ``accessed`` times (the recency used by eviction)."""
        with self._lock:
            pending = {k: v for k, v in self._unflushed.items() if v}
            touched = [(t, k) for k, t in self._touched.items()]
            if not pending and not touched:
                return
            conn = self._connect()
            for name, value in pending.items():
                conn.execute("INSERT INTO counters (name, value) VALUES (?, ?) "
                             "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value", (name, value))
            if touched:
                conn.executemany("UPDATE entries SET accessed = max(coalesce(accessed, 0), ?) WHERE key = ?",
                                 touched)
            self._unflushed = {"hits": 0, "misses": 0}
            self._touched = {}

    @property
    def bytes(self) -> int:
        """Total size of the entries as last seen by this process (persistent counter ``bytes``)."""
        return self._bytes

    @property
    def process_evictions(self) -> int:
        """Entries this process evicted."""
        return self._process_evictions

    def stats(self) -> dict[str, Any]:
        """Entries, hits/misses (persistent totals and this process), size on disk, per-model counts."""
        with self._lock:
            conn = self._connect()
            entries = int(conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0])
            counters = dict(conn.execute("SELECT name, value FROM counters").fetchall())
            per_model = {f"{b}/{m}": int(n) for b, m, n in conn.execute(
                "SELECT backend, model_id, COUNT(*) FROM entries GROUP BY backend, model_id ORDER BY 3 DESC")}
            per_kind = {k: int(n) for k, n in conn.execute("SELECT kind, COUNT(*) FROM entries GROUP BY kind")}
            hits = int(counters.get("hits", 0)) + self._unflushed["hits"]
            misses = int(counters.get("misses", 0)) + self._unflushed["misses"]
            self._bytes = int(counters.get("bytes", 0))
        size = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))
                   if p.exists())
        lookups = hits + misses
        return {
            "path": str(self.path), "entries": entries, "hits": hits, "misses": misses,
            "hit_rate": hits / lookups if lookups else 0.0,
            "process_hits": self._process_hits, "process_misses": self._process_misses,
            "size_bytes": size, "per_model": per_model, "per_kind": per_kind,
            "bytes": self._bytes, "max_bytes": self.max_bytes,
            "evictions": int(counters.get("evictions", 0)), "evicted_bytes": int(counters.get("evicted_bytes", 0)),
            "process_evictions": self._process_evictions, "process_rejected": self._process_rejected,
        }

    def export(self, path: str | Path) -> int:
        """Write every entry as one JSON object per line, what the LM was asked beside its answer (``prompt``;
        for scores ``context`` and ``candidates``; null for entries stored without it); returns the count."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            rows = self._connect().execute(
                "SELECT key, value, backend, model_id, template_version, kind, meta, created FROM entries "
                "ORDER BY created").fetchall()
        with open(path, "w", encoding="utf-8") as f:
            for key, value, backend, model_id, version, kind, meta, created in rows:
                extra = json.loads(meta or "{}")   # put() writes a dict; "request" is what the LM was asked
                asked = extra.pop("request", None) or ({"context": None, "candidates": None} if kind == "score"
                                                       else {"prompt": None})
                f.write(json.dumps({"key": key, "backend": backend, "model_id": model_id,
                                    "template_version": version, "kind": kind, "created": created,
                                    **asked, "value": json.loads(value), "meta": extra},
                                   ensure_ascii=False) + "\n")
        return len(rows)

    def add_seen(self, namespace: str, items: list[str]) -> None:
        """Record that ``items`` (e.g. state captions) were asked about under ``namespace`` (warm start)."""
        self._ledger.add(namespace, items)

    def seen(self, namespace: str, limit: int | None = None) -> list[str]:
        """The items recorded under ``namespace`` (at most ``limit``)."""
        return self._ledger.items(namespace, limit)

    def clear(self) -> int:
        """Delete every entry and counter; returns the number of entries removed."""
        with self._lock:
            conn = self._connect()
            removed = int(conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0])
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("DELETE FROM entries")
                conn.execute("DELETE FROM counters")
                SeenLedger.clear(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self._unflushed = {"hits": 0, "misses": 0}
            self._touched, self._bytes = {}, 0
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")
        return removed

    def close(self) -> None:
        """Flush counters and close this process's connection (reopened on next use)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                try:
                    self.flush()
                finally:
                    self._conn.close()
            self._conn = None

    def __enter__(self) -> LLMCache:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def default_cache_path() -> Path:
    """``default_cache_dir() / "llm_cache.sqlite"`` (honours ``$LLMGUIDE_CACHE_DIR``)."""
    from llmguide.core.config import default_cache_dir

    return default_cache_dir() / "llm_cache.sqlite"
