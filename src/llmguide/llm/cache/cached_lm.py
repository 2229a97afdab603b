"""The :class:`CachedLM` wrapper: any :class:`LanguageModel` answered from an :class:`LLMCache`.

Only well-formed answers are stored: a generated text is a string of at most
``max_tokens * MAX_CHARS_PER_TOKEN`` characters, not cut by the backend, without control or
replacement characters; scores are finite floats, one per candidate.  Fallbacks and answers that
fail these checks are returned to the caller but never cached (counted ``uncached_errors`` /
``rejected``).  The store itself is :mod:`llmguide.llm.cache.store`.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llmguide.core.errors import LLMGuideError
from llmguide.llm.base import Completion, LanguageModel, char_cap

if TYPE_CHECKING:
    from llmguide.llm.cache.store import LLMCache

log = logging.getLogger(__name__)

_COMPLETION_FIELDS = ("text", "prompt_tokens", "completion_tokens", "finish_reason", "meta")


def _finite_scores(scores: Any) -> bool:
    try:
        return all(s is not None and not isinstance(s, bool) and math.isfinite(float(s)) for s in scores)
    except (TypeError, ValueError):
        return False


_BAD_CHARS = frozenset(chr(c) for c in range(32) if chr(c) not in "\t\n\r") | {"\x7f", "\ufffd"}


def well_formed_text(text: Any, max_tokens: int) -> bool:
    """A generated text fit for the cache: a string within ``char_cap(max_tokens)`` characters, valid
    UTF-8, without control characters (tab, newline, carriage return allowed) or U+FFFD."""
    if not isinstance(text, str) or len(text) > char_cap(max_tokens):
        return False
    if not _BAD_CHARS.isdisjoint(text):
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return False
    return True


def well_formed_completion(comp: Completion, max_tokens: int) -> bool:
    """Validator of ``generate`` answers before they are cached (see the module docstring)."""
    tokens_ok = all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                    for n in (comp.prompt_tokens, comp.completion_tokens))
    return (comp.error is None and tokens_ok and comp.completion_tokens <= max(int(max_tokens), 0)
            and not (comp.meta or {}).get("truncated") and well_formed_text(comp.text, max_tokens))


def well_formed_scores(scores: Any, n_candidates: int) -> bool:
    """Validator of ``score`` answers before they are cached: ``n_candidates`` finite numbers."""
    return isinstance(scores, list | tuple) and len(scores) == n_candidates and _finite_scores(scores)


class CachedLM(LanguageModel):
    """A :class:`LanguageModel` that answers from an :class:`LLMCache` and calls ``backend`` only on misses.

    Misses of one call are sent to the backend as one batch (identical prompts once).  Completions
    with ``error`` set (fallbacks) and non-finite scores are never stored (``uncached_errors``), nor
    are answers that fail :func:`well_formed_completion` / :func:`well_formed_scores` or the cache's
    entry size limit (``rejected``).  Sampling parameters, including ``seed``, are part of the key,
    so a sampled answer is replayed for the same seed.
    """

    def __init__(self, backend: LanguageModel, cache: LLMCache, template_version: str = "v0"):
        self.inner = backend
        self.cache = cache
        self.template_version = template_version
        self.backend = getattr(backend, "backend", "base")
        self.model_id = getattr(backend, "model_id", "unknown")
        # what the key names the model by: two servers serving other weights under one name, or two model files of
        # one name, must not share answers (a backend's ``cache_identity``: its address, its file's hash)
        self.identity = str(getattr(backend, "cache_identity", None) or self.model_id)
        self._lock = threading.Lock()
        self._stats = {"calls": 0, "lookups": 0, "hits": 0, "misses": 0, "backend_calls": 0,
                       "prompt_tokens": 0, "completion_tokens": 0, "tokens_saved": 0, "uncached_errors": 0,
                       "cache_errors": 0, "sent": 0, "rejected": 0}

    def key(self, kind: str, payload: dict[str, Any]) -> str:
        return self.cache.key(self.backend, self.identity, self.template_version, kind, payload)

    def _meta(self, kind: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
        """The entry's columns, and the request (prompt, or context and candidates) kept beside the answer
        for ``llmguide cache export``."""
        meta = {"backend": self.backend, "model_id": self.model_id, "template_version": self.template_version,
                "kind": kind}
        return {**meta, "request": request} if request is not None else meta

    def _get(self, key: str) -> dict[str, Any] | None:
        try:
            return self.cache.get(key)
        except sqlite3.Error as err:  # locked / disk error: answer from the backend instead
            self._count(cache_errors=1)
            log.warning("LLM cache %s read failed (%s); treated as a miss", self.cache.path, err)
            return None

    def _put(self, key: str, value: dict[str, Any], kind: str, request: dict[str, Any] | None = None) -> None:
        try:
            if not self.cache.put(key, value, self._meta(kind, request)):
                self._count(rejected=1)
        except (TypeError, ValueError):  # not JSON-serialisable (e.g. exotic meta): keep the core answer
            if "meta" in value:
                self._put(key, {**value, "meta": {}}, kind, request)
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
            self._count(sent=len(first))
            fresh = self.inner.generate([prompts[i] for i in first], max_tokens=max_tokens,
                                        temperature=temperature, stop=stop, seed=seed)
            if len(fresh) != len(first):
                raise LLMGuideError(f"{self.backend} returned {len(fresh)} completions for {len(first)} prompts")
            self._count(backend_calls=1, prompt_tokens=sum(c.prompt_tokens for c in fresh),
                        completion_tokens=sum(c.completion_tokens for c in fresh))
            for (k, idx), comp in zip(misses.items(), fresh, strict=True):
                if comp.error is not None:
                    self._count(uncached_errors=1)
                elif not well_formed_completion(comp, max_tokens):
                    self._count(rejected=1)
                else:
                    value = {"text": comp.text, "prompt_tokens": comp.prompt_tokens,
                             "completion_tokens": comp.completion_tokens, "finish_reason": comp.finish_reason,
                             "meta": comp.meta}
                    self._put(k, value, "generate", {"prompt": prompts[idx[0]]})
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
            self._count(sent=len(first))
            fresh = self.inner.score([contexts[i] for i in first], [list(candidates[i]) for i in first],
                                     normalize=normalize)
            if len(fresh) != len(first):
                raise LLMGuideError(f"{self.backend} returned {len(fresh)} score lists for {len(first)} contexts")
            self._count(backend_calls=1)
            for (k, idx), scores in zip(misses.items(), fresh, strict=True):
                if well_formed_scores(scores, len(candidates[idx[0]])):
                    self._put(k, {"scores": [float(s) for s in scores]}, "score",
                              {"context": contexts[idx[0]], "candidates": list(candidates[idx[0]])})
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

    def io_stats(self) -> dict[str, float]:
        """The backend's I/O counters plus this cache's: ``cache_hits``, ``cache_misses``, ``sent`` (requests
        passed to the backend), ``uncached_errors``, ``rejected``, ``cache_errors``, ``cache_evictions``
        (entries this process evicted) and ``cache_bytes`` (total entry size, last seen)."""
        out = dict(self.inner.io_stats())
        with self._lock:
            s = dict(self._stats)
        out.update({"cache_hits": s["hits"], "cache_misses": s["misses"], "sent": s["sent"],
                    "uncached_errors": s["uncached_errors"], "rejected": s["rejected"],
                    "cache_errors": s["cache_errors"], "cache_evictions": self.cache.process_evictions,
                    "cache_bytes": self.cache.bytes})
        return {k: float(v) for k, v in out.items()}

    def interrupt(self) -> None:
        getattr(self.inner, "interrupt", lambda: None)()

    def close(self) -> None:
        self.cache.flush()
        self.inner.close()
