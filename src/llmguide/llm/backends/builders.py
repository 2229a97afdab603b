"""The LM backends llmguide ships, each registered as an entry point of ``llmguide.llm_backends`` (its
``pyproject.toml``), as a plugin's backend is: ``fn(llm_cfg, context) -> LanguageModel``, where ``context``
(:class:`~llmguide.llm.factory.BackendContext`) says the env family, whether the LM answers beside a learner, the
method's ground-truth answerers and the env's action vocabulary.  :func:`llmguide.llm.factory.make_backend` calls
the one ``llm.backend`` names."""

from __future__ import annotations

from typing import Any

from llmguide.core.config import cfg_get
from llmguide.core.errors import ConfigError
from llmguide.llm.base import LanguageModel
from llmguide.llm.factory import BackendContext, lm_threads


def embedded(llm_cfg: Any, context: BackendContext) -> LanguageModel:
    from llmguide.llm.backends.embedded import EmbeddedLM

    return EmbeddedLM(model_path=cfg_get(llm_cfg, "model_path"), n_ctx=int(cfg_get(llm_cfg, "n_ctx", 2048)),
                      n_threads=lm_threads(cfg_get(llm_cfg, "n_threads"), context.online),
                      seed=int(cfg_get(llm_cfg, "seed", 0)), model=cfg_get(llm_cfg, "model"),
                      chat=cfg_get(llm_cfg, "chat", "auto"))


def http(llm_cfg: Any, context: BackendContext) -> LanguageModel:
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


def hf(llm_cfg: Any, context: BackendContext) -> LanguageModel:
    from llmguide.llm.backends.hf import HFLM

    return HFLM(model_path=cfg_get(llm_cfg, "model_path"), gguf_file=cfg_get(llm_cfg, "gguf_file"),
                device=cfg_get(llm_cfg, "device", "cpu"), dtype=cfg_get(llm_cfg, "dtype", "float32"),
                trainable=bool(cfg_get(llm_cfg, "trainable", False)), max_batch=int(cfg_get(llm_cfg, "max_batch", 16)),
                attn_implementation=cfg_get(llm_cfg, "attn_implementation"))


def _oracle(llm_cfg: Any, context: BackendContext, required: bool = True) -> Any:
    from llmguide.llm.backends.oracle import OracleLM

    family = context.env_family or cfg_get(llm_cfg, "env_family")
    if not family:
        if not required:
            return None
        raise ConfigError("llm.backend", f"llm={cfg_get(llm_cfg, 'backend')} needs the env family "
                                         "(make_llm(cfg.llm, cfg.env.name))")
    return OracleLM(family, context.answerers, context.actions)


def oracle(llm_cfg: Any, context: BackendContext) -> LanguageModel:
    """``llm=oracle``: the env family's ground truth."""
    return _oracle(llm_cfg, context)


def counterfactual(llm_cfg: Any, context: BackendContext) -> LanguageModel:
    """``llm=random|shuffled|constant``: knowledge controls in the oracle's answer format."""
    from llmguide.llm.backends.counterfactual import CounterfactualLM

    return CounterfactualLM(str(cfg_get(llm_cfg, "backend")), _oracle(llm_cfg, context),
                            seed=int(cfg_get(llm_cfg, "seed", 0)),
                            positive_rate=float(cfg_get(llm_cfg, "positive_rate", 0.5)),
                            tie_rate=float(cfg_get(llm_cfg, "tie_rate", 0.0)),
                            window=int(cfg_get(llm_cfg, "window", 128)))


def prompt_only(llm_cfg: Any, context: BackendContext) -> LanguageModel:
    """``llm=prompt_only``: the prompt's worked examples; the env's oracle (if any) only counts items per state."""
    from llmguide.llm.backends.prompt_only import PromptOnlyLM
    from llmguide.llm.table import AnswerTableError

    found = _oracle(llm_cfg, context, required=False)
    found = found if found is not None and getattr(found.oracle, "ground_truth", True) else None
    match = cfg_get(llm_cfg, "match_table")
    try:
        return PromptOnlyLM(seed=int(cfg_get(llm_cfg, "seed", 0)), oracle=found, match_table=match,
                            formats=[f for a in context.answerers for f in getattr(a, "answer_formats", ())])
    except AnswerTableError as err:
        raise ConfigError("llm.match_table", str(err)) from None
