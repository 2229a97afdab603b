"""Persistent LM cache in SQLite (WAL) and the :class:`CachedLM` wrapper around any backend.

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
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmguide.core.errors import LLMGuideError
from llmguide.llm.base import Completion, LanguageModel

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
    created REAL
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


def _canonical(obj: Any) -> Any:
    """Make ``obj`` JSON-canonical: tuples -> lists, integral floats -> ints, sorted dict keys."""
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, list | tuple):
        return [_canonical(v) for v in obj]
    if isinstance(obj, float) and math.isfinite(obj) and obj.is_integer():
        return int(obj)
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _canonical(obj.item())
    return obj


def canonical_json(obj: Any) -> str:
    """Deterministic JSON used for cache keys and in-flight de-duplication."""
    return json.dumps(_canonical(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class LLMCache:
    """Key/value store of LM answers in one SQLite file (thread-, process- and kill-safe)."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 60.0, flush_every: int = 256):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.busy_timeout = busy_timeout
        self.flush_every = flush_every
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._process_hits = 0
        self._process_misses = 0
        self._unflushed = {"hits": 0, "misses": 0}
        self._connect()

    # -- connection -------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        conn = sqlite3.connect(str(self.path), timeout=self.busy_timeout, check_same_thread=False,
                               isolation_level=None)  # autocommit; explicit BEGIN where needed
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            log.warning("LLM cache %s: could not enable WAL (journal_mode=%s)", self.path, mode)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(_SCHEMA)
        self._conn, self._pid = conn, os.getpid()
        return conn

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), "busy_timeout": self.busy_timeout, "flush_every": self.flush_every}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], busy_timeout=state["busy_timeout"], flush_every=state["flush_every"])

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

    def put(self, key: str, value: dict[str, Any], meta: dict[str, Any] | None = None) -> None:
        """Store ``value`` (JSON-serialisable) under ``key``; ``meta`` may hold backend/model_id/... ."""
        meta = dict(meta or {})
        row = (key, json.dumps(value, ensure_ascii=False, allow_nan=False),
               str(meta.pop("backend", "")), str(meta.pop("model_id", "")),
               str(meta.pop("template_version", "")), str(meta.pop("kind", "")),
               json.dumps(meta, ensure_ascii=False, default=str), time.time())
        with self._lock:
            self._connect().execute(
                "INSERT OR REPLACE INTO entries (key, value, backend, model_id, template_version, kind, meta,"
                " created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._connect().execute("SELECT 1 FROM entries WHERE key = ?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return int(self._connect().execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    # -- statistics and maintenance ---------------------------------------------------------------
    def flush(self) -> None:
        """Add this process's unflushed hit/miss counts to the persistent counters."""
        with self._lock:
            pending = {k: v for k, v in self._unflushed.items() if v}
            if not pending:
                return
            conn = self._connect()
            for name, value in pending.items():
                conn.execute("INSERT INTO counters (name, value) VALUES (?, ?) "
                             "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value", (name, value))
            self._unflushed = {"hits": 0, "misses": 0}

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
        size = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))
                   if p.exists())
        lookups = hits + misses
        return {
            "path": str(self.path), "entries": entries, "hits": hits, "misses": misses,
            "hit_rate": hits / lookups if lookups else 0.0,
            "process_hits": self._process_hits, "process_misses": self._process_misses,
            "size_bytes": size, "per_model": per_model, "per_kind": per_kind,
        }

    def export(self, path: str | Path) -> int:
        """Write every entry as one JSON object per line; returns the number of entries written."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            rows = self._connect().execute(
                "SELECT key, value, backend, model_id, template_version, kind, meta, created FROM entries "
                "ORDER BY created").fetchall()
        with open(path, "w", encoding="utf-8") as f:
            for key, value, backend, model_id, version, kind, meta, created in rows:
                f.write(json.dumps({"key": key, "backend": backend, "model_id": model_id,
                                    "template_version": version, "kind": kind, "created": created,
                                    "value": json.loads(value), "meta": json.loads(meta or "{}")},
                                   ensure_ascii=False) + "\n")
        return len(rows)

    def clear(self) -> int:
        """Delete every entry and counter; returns the number of entries removed."""
        with self._lock:
            conn = self._connect()
            removed = int(conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0])
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("DELETE FROM entries")
            conn.execute("DELETE FROM counters")
            conn.execute("COMMIT")
            self._unflushed = {"hits": 0, "misses": 0}
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


_COMPLETION_FIELDS = ("text", "prompt_tokens", "completion_tokens", "finish_reason", "meta")


def _finite_scores(scores: Any) -> bool:
    try:
        return all(s is not None and math.isfinite(float(s)) for s in scores)
    except (TypeError, ValueError):
        return False


class CachedLM(LanguageModel):
    """A :class:`LanguageModel` that answers from an :class:`LLMCache` and calls ``backend`` only on misses.

    Misses of one call are sent to the backend as one batch (identical prompts once).  Completions
    with ``error`` set (fallbacks) and non-finite scores are never stored.  Sampling parameters,
    including ``seed``, are part of the key, so a sampled answer is replayed for the same seed.
    """

    def __init__(self, backend: LanguageModel, cache: LLMCache, template_version: str = "v0"):
        self.inner = backend
        self.cache = cache
        self.template_version = template_version
        self.backend = getattr(backend, "backend", "base")
        self.model_id = getattr(backend, "model_id", "unknown")
        self._lock = threading.Lock()
        self._stats = {"calls": 0, "lookups": 0, "hits": 0, "misses": 0, "backend_calls": 0,
                       "prompt_tokens": 0, "completion_tokens": 0, "tokens_saved": 0, "uncached_errors": 0,
                       "cache_errors": 0}

    def key(self, kind: str, payload: dict[str, Any]) -> str:
        return self.cache.key(self.backend, self.model_id, self.template_version, kind, payload)

    def _meta(self, kind: str) -> dict[str, Any]:
        return {"backend": self.backend, "model_id": self.model_id,
                "template_version": self.template_version, "kind": kind}

    def _get(self, key: str) -> dict[str, Any] | None:
        try:
            return self.cache.get(key)
        except sqlite3.Error as err:  # locked / disk error: answer from the backend instead
            self._count(cache_errors=1)
            log.warning("LLM cache %s read failed (%s); treated as a miss", self.cache.path, err)
            return None

    def _put(self, key: str, value: dict[str, Any], kind: str) -> None:
        try:
            self.cache.put(key, value, self._meta(kind))
        except (TypeError, ValueError):  # not JSON-serialisable (e.g. exotic meta): keep the core answer
            if "meta" in value:
                self._put(key, {**value, "meta": {}}, kind)
            else:
                self._count(uncached_errors=1)
        except sqlite3.Error as err:
            self._count(cache_errors=1)
            log.warning("LLM cache %s write failed (%s); answer used but not stored", self.cache.path, err)

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, value in deltas.items():
                self._stats[name] += value

    def generate(self, prompts: Sequence[str], *, max_tokens: int = 48, temperature: float = 0.0,
                 stop: Sequence[str] | None = None, seed: int | None = None) -> list[Completion]:
        params = {"max_tokens": max_tokens, "temperature": temperature,
                  "stop": list(stop) if stop else None, "seed": seed}
        keys = [self.key("generate", {"prompt": p, **params}) for p in prompts]
        results: list[Completion | None] = [None] * len(prompts)
        misses: dict[str, list[int]] = {}
        saved = 0
        for i, k in enumerate(keys):
            value = self._get(k)
            if value is not None:
                fields = {f: value[f] for f in _COMPLETION_FIELDS if f in value}
                results[i] = Completion(**{"text": "", **fields, "cached": True, "error": None})
                saved += value.get("prompt_tokens", 0) + value.get("completion_tokens", 0)
            else:
                misses.setdefault(k, []).append(i)
        self._count(calls=1, lookups=len(prompts), hits=len(prompts) - sum(map(len, misses.values())),
                    misses=sum(map(len, misses.values())), tokens_saved=saved)
        if misses:
            first = [idx[0] for idx in misses.values()]
            fresh = self.inner.generate([prompts[i] for i in first], max_tokens=max_tokens,
                                        temperature=temperature, stop=stop, seed=seed)
            if len(fresh) != len(first):
                raise LLMGuideError(f"{self.backend} returned {len(fresh)} completions for {len(first)} prompts")
            self._count(backend_calls=1, prompt_tokens=sum(c.prompt_tokens for c in fresh),
                        completion_tokens=sum(c.completion_tokens for c in fresh))
            for (k, idx), comp in zip(misses.items(), fresh, strict=True):
                if comp.error is None:
                    value = {"text": comp.text, "prompt_tokens": comp.prompt_tokens,
                             "completion_tokens": comp.completion_tokens, "finish_reason": comp.finish_reason,
                             "meta": comp.meta}
                    self._put(k, value, "generate")
                else:
                    self._count(uncached_errors=1)
                for j in idx:
                    results[j] = comp
        return results  # type: ignore[return-value]

    def score(self, contexts: Sequence[str], candidates: Sequence[Sequence[str]], *,
              normalize: bool = False) -> list[list[float]]:
        keys = [self.key("score", {"context": c, "candidates": list(cands), "normalize": normalize})
                for c, cands in zip(contexts, candidates, strict=True)]
        results: list[list[float] | None] = [None] * len(keys)
        misses: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            value = self._get(k)
            if value is not None:
                results[i] = list(value["scores"])
            else:
                misses.setdefault(k, []).append(i)
        n_miss = sum(map(len, misses.values()))
        self._count(calls=1, lookups=len(keys), hits=len(keys) - n_miss, misses=n_miss)
        if misses:
            first = [idx[0] for idx in misses.values()]
            fresh = self.inner.score([contexts[i] for i in first], [list(candidates[i]) for i in first],
                                     normalize=normalize)
            if len(fresh) != len(first):
                raise LLMGuideError(f"{self.backend} returned {len(fresh)} score lists for {len(first)} contexts")
            self._count(backend_calls=1)
            for (k, idx), scores in zip(misses.items(), fresh, strict=True):
                if _finite_scores(scores) and len(scores) == len(candidates[idx[0]]):
                    self._put(k, {"scores": [float(s) for s in scores]}, "score")
                else:
                    self._count(uncached_errors=1)
                for j in idx:
                    results[j] = list(scores)
        return results  # type: ignore[return-value]

    @property
    def stats(self) -> dict[str, Any]:
        """calls, lookups, hits, misses, hit_rate, backend_calls, tokens (spent), tokens_saved."""
        with self._lock:
            s = dict(self._stats)
        s["hit_rate"] = s["hits"] / s["lookups"] if s["lookups"] else 0.0
        s["tokens"] = s["prompt_tokens"] + s["completion_tokens"]
        return s

    def close(self) -> None:
        self.cache.flush()
        self.inner.close()


def default_cache_path() -> Path:
    """``default_cache_dir() / "llm_cache.sqlite"`` (honours ``$LLMGUIDE_CACHE_DIR``)."""
    from llmguide.core.config import default_cache_dir

    return default_cache_dir() / "llm_cache.sqlite"


def _human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def cache_command(action: str, file: str | None = None, path: str | None = None) -> int:
    """``llmguide cache stats | export FILE | clear`` on ``path`` (default: :func:`default_cache_path`)."""
    cache_path = Path(path).expanduser() if path else default_cache_path()
    if action == "export" and not file:
        raise LLMGuideError("cache export needs an output file: llmguide cache export FILE.jsonl")
    if action not in ("stats", "export", "clear"):
        raise LLMGuideError(f"unknown cache action '{action}' (choose stats, export or clear)")
    if not cache_path.exists():
        if action == "export":
            raise FileNotFoundError(f"no LM cache at {cache_path}")
        print(f"LM cache {cache_path}: no file yet (0 entries)")
        return 0
    with LLMCache(cache_path) as cache:
        if action == "stats":
            s = cache.stats()
            print(f"LM cache   {s['path']}")
            print(f"entries    {s['entries']}")
            print(f"size       {_human_size(s['size_bytes'])}")
            print(f"lookups    {s['hits'] + s['misses']} (hits {s['hits']}, misses {s['misses']}, "
                  f"hit rate {s['hit_rate']:.1%}; all processes, counted persistently)")
            for model, n in s["per_model"].items():
                print(f"  {model:<40} {n} entries")
            for kind, n in s["per_kind"].items():
                print(f"  kind {kind:<35} {n} entries")
        elif action == "export":
            n = cache.export(file)  # type: ignore[arg-type]
            print(f"exported {n} entries from {cache_path} to {file}")
        else:
            n = cache.clear()
            print(f"cleared {n} entries from {cache_path}")
    return 0
