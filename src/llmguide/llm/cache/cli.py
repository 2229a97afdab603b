"""``llmguide cache stats | export FILE | clear | check``: the command-line view of the LM cache file.

``stats`` and ``export`` on a corrupt file fail with one line naming it and the fix; ``clear`` on a
corrupt file moves it aside (``<file>.corrupt-<time>``, never deleted) and leaves an empty cache;
``check`` runs SQLite's integrity check and exits 1 when the file is damaged.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from llmguide.core.errors import LLMGuideError
from llmguide.llm.cache import file as cache_file
from llmguide.llm.cache.store import DEFAULT_MAX_BYTES, CacheCorruptError, LLMCache, default_cache_path


def _human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def cache_command(action: str, file: str | None = None, path: str | None = None) -> int:
    """``llmguide cache stats | export FILE | clear | check`` on ``path`` (default: :func:`default_cache_path`);
    the exit status (``check``: 1 when the file is corrupt)."""
    cache_path = Path(path).expanduser() if path else default_cache_path()
    if action == "export" and not file:
        raise LLMGuideError("cache export needs an output file: llmguide cache export FILE.jsonl")
    if action not in ("stats", "export", "clear", "check"):
        raise LLMGuideError(f"unknown cache action '{action}' (choose stats, export, clear or check)")
    if not cache_path.exists():
        if action == "export":
            raise FileNotFoundError(f"no LM cache at {cache_path}")
        print(f"LM cache {cache_path}: no file yet (0 entries)")
        return 0
    if action == "check":
        return _check(cache_path)
    try:
        return _run(action, cache_path, file)
    except CacheCorruptError as err:
        if action != "clear":
            raise
        with cache_file.file_lock(cache_path):
            moved = cache_file.move_aside(cache_path)
        LLMCache(cache_path).close()
        print(f"LM cache {cache_path} was corrupt ({err.detail}): moved it to {moved} (delete that file when you "
              "no longer need it); the cache is empty now")
        return 0


def _run(action: str, cache_path: Path, file: str | None) -> int:
    """``stats``, ``export`` or ``clear`` of a cache file; :class:`CacheCorruptError` when it is damaged."""
    cache = LLMCache(cache_path, on_corrupt="raise")
    try:
        if action == "stats":
            s = cache.stats()
            print(f"LM cache   {s['path']}")
            print(f"entries    {s['entries']}")
            print(f"bytes      {s['bytes']} ({_human_size(s['bytes'])} in entries; each run bounds them by its "
                  f"llm.cache.max_bytes, default {_human_size(DEFAULT_MAX_BYTES)})")
            print(f"size       {_human_size(s['size_bytes'])} on disk ({s['size_bytes']} bytes, WAL included)")
            print(f"evictions  {s['evictions']} ({_human_size(s['evicted_bytes'])} evicted, least recently used first)")
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
    except sqlite3.DatabaseError as err:   # damage deeper in the file than opening reads
        if not cache_file.is_corruption(err):
            raise
        raise CacheCorruptError(cache_path, str(err)) from None
    finally:
        try:
            cache.close()
        except sqlite3.DatabaseError:
            pass
    return 0


def _check(cache_path: Path) -> int:
    problems = cache_file.check(cache_path, full=True)
    if not problems:
        with LLMCache(cache_path, on_corrupt="raise") as cache:
            print(f"LM cache {cache_path}: ok ({len(cache)} entries, integrity check passed)")
        return 0
    shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
    print(f"LM cache {cache_path} is corrupt ({shown}); fix: `llmguide cache clear --path {cache_path}` moves it "
          "aside and starts an empty cache")
    return 1
