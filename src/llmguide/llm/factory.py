"""Build the LM backend chosen by the ``llm=`` config group (``conf/llm/*.yaml``), cached if enabled."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmguide.core.config import (
    cfg_get,
    default_cache_dir,
    in_range,
    non_negative,
    one_of,
    plain_dict,
    positive,
    register_rule,
)
from llmguide.core.errors import ConfigError
from llmguide.core.plugins import entries, load
from llmguide.llm.base import LanguageModel
from llmguide.llm.cache.cached_lm import CachedLM
from llmguide.llm.cache.store import DEFAULT_MAX_BYTES, LLMCache

log = logging.getLogger(__name__)

# backends that answer from ground truth: the oracle and the counterfactual LMs built on it (they take answerers)
GROUND_TRUTH_BACKENDS = ("oracle", "random", "shuffled", "constant")
BACKEND_GROUP = "llmguide.llm_backends"   # the entry points that name the backends (llmguide.core.plugins)


def _url(value: Any) -> str | None:
    ok = isinstance(value, str) and value.startswith(("http://", "https://"))
    return None if ok else f"must be an http(s):// URL, got {value!r}"


def _device(value: Any) -> str | None:
    ok = isinstance(value, str) and value.split(":")[0] in ("cpu", "cuda", "mps", "xpu")
    return None if ok else f"must be cpu, cuda, cuda:N, mps or xpu, got {value!r}"


def _env_var_name(value: Any) -> str | None:
    ok = isinstance(value, str) and value.replace("_", "").isalnum() and not value[:1].isdigit()
    return None if ok else "must be the NAME of an environment variable (never the key itself), got a bad name"


LLM_RULES = {
    "llm.backend": lambda v: one_of(*entries(BACKEND_GROUP))(v),
    "llm.n_ctx": positive,
    "llm.n_threads": lambda v: None if v == "auto" else positive(v),
    "llm.max_retries": non_negative,
    "llm.max_batch": positive,
    "llm.base_url": _url,
    "llm.api_key_env": _env_var_name,
    "llm.dtype": one_of("float32", "bfloat16", "float16"),
    "llm.attn_implementation": one_of(None, "sdpa", "eager"),   # None: transformers' default
    "llm.device": _device,
    "llm.timeout": positive,
    "llm.backoff_base": non_negative,
    "llm.backoff_max": non_negative,
    "llm.max_response_bytes": positive,
    "llm.cache.max_bytes": positive,
    "llm.positive_rate": in_range(0.0, 1.0),
    "llm.tie_rate": in_range(0.0, 1.0),
    "llm.window": non_negative,
    "llm.table_fallback": one_of("miss", "nearest"),
    "llm.match_table": lambda v: None if v is None or (isinstance(v, str) and v) else f"must be a table file, got {v!r}",
    "llm.chat": lambda v: None if v in ("auto", True, False) else f"must be auto, true or false, got {v!r}",
}
for _key, _rule in LLM_RULES.items():
    register_rule(_key, _rule, any_type=_key in ("llm.n_threads", "llm.chat", "llm.match_table"))   # "auto" or a number / bool


def _validate(cfg: Any) -> None:
    from llmguide.core.config import RULES

    for key, rule in RULES.items():
        if not key.startswith("llm."):
            continue
        value: Any = cfg
        for part in key[len("llm."):].split("."):
            value = value.get(part) if isinstance(value, Mapping) or hasattr(value, "get") else None
            if value is None:
                break
        if value is None:
            continue
        problem = rule(value)
        if problem:
            raise ConfigError(key, problem)


def lm_threads(value: Any, online: bool) -> int:
    """``llm.n_threads``: a number, or ``auto`` = every core but one when the LM answers beside a learner
    (``online``: the learner keeps a core of its own), every core when it labels offline."""
    if value in (None, "auto"):
        cores = os.cpu_count() or 1
        return max(1, cores - 1) if online else cores
    return int(value)


@dataclass(frozen=True)
class BackendContext:
    """What a backend builder is told besides ``llm_cfg``: the env family, whether the LM answers beside a
    learner (``online``), the method's ground-truth answers to its own prompts and the env's action vocabulary
    (used by ``llm=oracle`` and the counterfactual LMs built on it)."""

    env_family: str | None = None
    online: bool = False
    answerers: tuple[Any, ...] = ()
    actions: str = "primitive"


def make_backend(llm_cfg: Any, env_family: str | None = None, online: bool = False,
                 answerers: Sequence[Any] = (), actions: str = "primitive") -> LanguageModel:
    """The uncached backend named by ``llm_cfg.backend``: the builder its ``llmguide.llm_backends`` entry point
    names (:mod:`llmguide.llm.backends.builders` for the shipped ones) called with a :class:`BackendContext`."""
    _validate(llm_cfg)
    backend = cfg_get(llm_cfg, "backend")
    builders = entries(BACKEND_GROUP)
    if backend not in builders:
        raise ConfigError("llm.backend", f"unknown backend {backend!r}; choose one of {list(builders)}")
    return load(builders[backend])(llm_cfg, BackendContext(env_family, online, tuple(answerers), actions))


def make_llm(llm_cfg: Any, env_family: str | None = None, template_version: str | None = None,
             online: bool = False, answerers: Sequence[Any] = (), actions: str = "primitive") -> LanguageModel:
    """Backend from ``llm_cfg`` (the ``llm`` config group), wrapped in the persistent cache when enabled.
    ``online``: the LM answers during training, beside the learner (sets ``llm.n_threads=auto``).

    Cache file: ``llm_cfg.cache.path``, or ``default_cache_dir() / "llm_cache.sqlite"`` when null.
    (``llm.actor=true``, the LM in a shared Ray actor, is chosen by the Runner: :mod:`llmguide.pipelines.services`.)
    """
    table = cfg_get(llm_cfg, "table")
    if table:   # an answer table: the LM itself is built only to answer misses online (llm.table_online)
        from llmguide.llm.table import open_table_lm

        live = None
        if cfg_get(llm_cfg, "table_online", False):
            live = make_llm({**plain_dict(llm_cfg), "table": None}, env_family, template_version, online, answerers,
                            actions)
        return open_table_lm(table, online=live, fallback=str(cfg_get(llm_cfg, "table_fallback", "miss")))
    backend = make_backend(llm_cfg, env_family, online, answerers, actions)
    cache_cfg = cfg_get(llm_cfg, "cache", {})
    if not cfg_get(cache_cfg, "enabled", False):
        return backend
    path = Path(cfg_get(cache_cfg, "path") or default_cache_dir() / "llm_cache.sqlite").expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    version = template_version or str(cfg_get(cache_cfg, "template_version", "v0"))
    max_bytes = int(cfg_get(cache_cfg, "max_bytes", DEFAULT_MAX_BYTES))
    return CachedLM(backend, LLMCache(path, max_bytes=max_bytes), template_version=version)
