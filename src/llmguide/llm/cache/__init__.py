"""The persistent LM cache: the SQLite store (:mod:`.store`), its file on disk (:mod:`.file`), the warm-start
ledger (:mod:`.seen`), the wrapper that answers any LM from it (:mod:`.cached_lm`) and ``llmguide cache``
(:mod:`.cli`)."""

from llmguide.llm.cache.cached_lm import CachedLM
from llmguide.llm.cache.store import LLMCache, default_cache_path

__all__ = ["CachedLM", "LLMCache", "default_cache_path"]
