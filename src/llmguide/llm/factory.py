"""Build the LM backend chosen by the ``llm=`` config group (``conf/llm/*.yaml``), cached if enabled."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
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
from llmguide.llm.base import LanguageModel
from llmguide.llm.cache.cached_lm import CachedLM
from llmguide.llm.cache.store import DEFAULT_MAX_BYTES, LLMCache

log = logging.getLogger(__name__)

# backends that answer from ground truth: the oracle and the counterfactual LMs built on it (they take answerers)
GROUND_TRUTH_BACKENDS = ("oracle", "random", "shuffled", "constant")
# the prompt-only control: answers from the prompt's own worked examples (the oracle, when there is one, only
# counts how many items to give); an LM arm's control, not ground truth (it is told no more than the LM)
PROMPT_ONLY = "prompt_only"
BACKENDS = ("embedded", "http", "hf", *GROUND_TRUTH_BACKENDS, PROMPT_ONLY)


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
    "llm.backend": one_of(*BACKENDS),
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


def make_backend(llm_cfg: Any, env_family: str | None = None, online: bool = False,
                 answerers: Sequence[Any] = (), actions: str = "primitive") -> LanguageModel:
    """The uncached backend named by ``llm_cfg.backend`` (``online``: it will answer beside a learner;
    ``answerers``: a method's ground-truth answers to its own prompts and ``actions`` the env's action
    vocabulary, used by ``llm=oracle`` and the counterfactual LMs built on it)."""
    _validate(llm_cfg)
    backend = cfg_get(llm_cfg, "backend")
    if backend == "embedded":
        from llmguide.llm.backends.embedded import EmbeddedLM

        return EmbeddedLM(model_path=cfg_get(llm_cfg, "model_path"), n_ctx=int(cfg_get(llm_cfg, "n_ctx", 2048)),
                          n_threads=lm_threads(cfg_get(llm_cfg, "n_threads"), online), seed=int(cfg_get(llm_cfg, "seed", 0)),
                          model=cfg_get(llm_cfg, "model"), chat=cfg_get(llm_cfg, "chat", "auto"))
    if backend == "http":
        from llmguide.llm.backends.http import HTTPLM

        for key in ("base_url", "model"):
            if not cfg_get(llm_cfg, key):
                raise ConfigError(f"llm.{key}", "is required for llm=http")
        return HTTPLM(base_url=cfg_get(llm_cfg, "base_url"), model=cfg_get(llm_cfg, "model"),
                      api_key_env=cfg_get(llm_cfg, "api_key_env", "OPENAI_API_KEY"),
                      concurrency=int(cfg_get(llm_cfg, "concurrency", 4)), timeout=float(cfg_get(llm_cfg, "timeout", 30.0)),
                      max_retries=int(cfg_get(llm_cfg, "max_retries", 5)), chat=bool(cfg_get(llm_cfg, "chat", False)),
                      backoff_base=float(cfg_get(llm_cfg, "backoff_base", 0.5)),
                      backoff_max=float(cfg_get(llm_cfg, "backoff_max", 8.0)),
                      max_response_bytes=int(cfg_get(llm_cfg, "max_response_bytes", 8 * 2**20)))
    if backend == "hf":
        from llmguide.llm.backends.hf import HFLM

        return HFLM(model_path=cfg_get(llm_cfg, "model_path"), gguf_file=cfg_get(llm_cfg, "gguf_file"),
                    device=cfg_get(llm_cfg, "device", "cpu"), dtype=cfg_get(llm_cfg, "dtype", "float32"),
                    trainable=bool(cfg_get(llm_cfg, "trainable", False)), max_batch=int(cfg_get(llm_cfg, "max_batch", 16)),
                    attn_implementation=cfg_get(llm_cfg, "attn_implementation"))
    if backend in GROUND_TRUTH_BACKENDS:
        from llmguide.llm.backends.oracle import OracleLM

        family = env_family or cfg_get(llm_cfg, "env_family")
        if not family:
            raise ConfigError("llm.backend", f"llm={backend} needs the env family (make_llm(cfg.llm, cfg.env.name))")
        oracle = OracleLM(family, answerers, actions)
        if backend == "oracle":
            return oracle
        from llmguide.llm.backends.counterfactual import CounterfactualLM

        return CounterfactualLM(backend, oracle, seed=int(cfg_get(llm_cfg, "seed", 0)),
                                positive_rate=float(cfg_get(llm_cfg, "positive_rate", 0.5)),
                                tie_rate=float(cfg_get(llm_cfg, "tie_rate", 0.0)),
                                window=int(cfg_get(llm_cfg, "window", 128)))
    if backend == PROMPT_ONLY:
        return _prompt_only(llm_cfg, env_family, answerers, actions)
    raise ConfigError("llm.backend", f"unknown backend {backend!r}; choose one of {list(BACKENDS)}")


def _prompt_only(llm_cfg: Any, env_family: str | None, answerers: Sequence[Any], actions: str) -> LanguageModel:
    """``llm=prompt_only``: the prompt's worked examples; the env's oracle (if any) only counts items per state."""
    from llmguide.llm.backends.prompt_only import PromptOnlyLM
    from llmguide.llm.table import AnswerTableError

    oracle = None
    family = env_family or cfg_get(llm_cfg, "env_family")
    if family:
        from llmguide.llm.backends.oracle import OracleLM

        oracle = OracleLM(family, answerers, actions)
        oracle = oracle if getattr(oracle.oracle, "ground_truth", True) else None
    match = cfg_get(llm_cfg, "match_table")
    try:
        return PromptOnlyLM(seed=int(cfg_get(llm_cfg, "seed", 0)), oracle=oracle, match_table=match,
                            formats=[f for a in answerers for f in getattr(a, "answer_formats", ())])
    except AnswerTableError as err:
        raise ConfigError("llm.match_table", str(err)) from None


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
