"""``llmguide cache stats | export FILE | clear``: the command-line view of the LM cache file."""

from __future__ import annotations

from pathlib import Path

from llmguide.core.errors import LLMGuideError
from llmguide.llm.cache import DEFAULT_MAX_BYTES, LLMCache, default_cache_path


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
    return 0
