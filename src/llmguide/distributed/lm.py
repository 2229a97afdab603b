"""``llm.actor=true``: the LM service as one named Ray actor shared by every run on the cluster.

:class:`LMActor` holds the configured backend (embedded, http, hf, oracle) wrapped in its persistent
cache and an :class:`~llmguide.llm.service.core.LLMService`, so batching and de-duplication of in-flight
requests span every run that talks to it (a sweep's runs ask the same questions).  It is a threaded actor
(``max_concurrency``): concurrent calls from several runs meet in its service queue.  Its name is derived
from the LM config (backend, model, cache, env family), so runs with the same LM share one actor and runs
with different LMs never do.

:func:`make_llm` returns an :class:`ActorLM` for ``llm.actor=true``: a :class:`LanguageModel` whose calls
go to the actor.  The run's own local ``LLMService`` wraps it as it wraps any backend, so when the actor
dies its calls raise :class:`LLMUnavailableError` and the local service does what it does for a dead
server: retries, then counted fallbacks (``lm/fallbacks``) behind its circuit breaker, probing every
``backoff_max`` seconds; Ray restarts the actor (``ray.max_restarts``; the cache is on disk, so it comes
back warm) and the first probe that succeeds resumes service.

For an OpenAI-compatible server (vLLM, SGLang, llama.cpp) on another machine no actor is needed:
``llm=http llm.base_url=http://gpu-node:8000/v1``.  ``llm=http llm.actor=true`` puts the shared cache and
de-dup in front of it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from typing import Any

from llmguide.core.config import plain_dict
from llmguide.core.errors import LLMUnavailableError
from llmguide.llm.base import Completion, LanguageModel

log = logging.getLogger(__name__)

SERVICE_KEYS = ("max_batch", "max_queue", "max_retries", "timeout", "token_budget", "price_per_1k_tokens")


class LMActor:
    """A Ray actor: ``LLMService(make_llm(llm_cfg))`` answering ``generate``/``score`` from any process."""

    def __init__(self, llm_cfg: dict, env_family: str | None, template_version: str | None):
        from llmguide.llm.factory import make_llm
        from llmguide.llm.service.core import LLMService

        cfg = {**llm_cfg, "actor": False}
        self.lm = make_llm(cfg, env_family, template_version, online=True)
        self.service = LLMService(self.lm, max_batch=int(cfg.get("max_batch") or 8),
                                  timeout=float(cfg.get("timeout") or 60.0))

    def generate(self, prompts: list[str], params: dict[str, Any]) -> list[Completion]:
        futures = [self.service.submit_generate(p, **params) for p in prompts]
        return [f.result() for f in futures]

    def score(self, contexts: list[str], candidates: list[list[str]], normalize: bool) -> list[list[float]]:
        futures = [self.service.submit_score(c, cs, normalize=normalize)
                   for c, cs in zip(contexts, candidates, strict=True)]
        return [f.result() for f in futures]

    def metrics(self) -> dict[str, Any]:
        return self.service.lm_metrics()

    def io_stats(self) -> dict[str, float]:
        return dict(self.lm.io_stats())

    def pid(self) -> int:
        import os

        return os.getpid()


def actor_name(llm_cfg: Any, env_family: str | None, template_version: str | None) -> str:
    """The actor's name: a digest of the LM config (minus per-run keys), so equal configs share one actor."""
    cfg = {k: v for k, v in plain_dict(llm_cfg).items() if k not in ("actor",)}
    key = json.dumps({"llm": cfg, "family": env_family, "template": template_version}, sort_keys=True, default=str)
    return "llmguide-lm-" + hashlib.sha1(key.encode()).hexdigest()[:12]


def lm_actor_for(llm_cfg: Any, env_family: str | None, template_version: str | None = None,
                 ray_cfg: Any = None) -> Any:
    """The named LM actor for this LM config: found on the cluster, or started here."""
    from llmguide.core.config import cfg_get
    from llmguide.distributed import connect

    ray = connect(ray_cfg)
    cfg = plain_dict(llm_cfg)
    actor = ray.remote(LMActor).options(
        name=actor_name(cfg, env_family, template_version), namespace=str(cfg_get(ray_cfg, "namespace", "llmguide")),
        get_if_exists=True, max_restarts=int(cfg_get(ray_cfg, "max_restarts", 3)), max_task_retries=0,
        max_concurrency=64, num_cpus=0, num_gpus=float(cfg_get(ray_cfg, "lm_gpus", 0.0)))  # never blocks runners
    return actor.remote(cfg, env_family, template_version)


class ActorLM(LanguageModel):
    """A :class:`LanguageModel` whose calls are answered by an :class:`LMActor` (a dead actor raises
    :class:`LLMUnavailableError`, which the local ``LLMService`` retries and then counts as a fallback)."""

    backend = "ray_actor"

    def __init__(self, actor: Any, model_id: str = "unknown", timeout: float = 120.0):
        import ray
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

        self._ray = ray
        self._errors = (RayActorError, ActorUnavailableError, GetTimeoutError)
        self.actor = actor
        self.model_id = model_id
        self.timeout = timeout

    def _call(self, ref: Any) -> Any:
        try:
            return self._ray.get(ref, timeout=self.timeout)
        except self._errors as err:
            raise LLMUnavailableError(f"the LM actor is unavailable ({type(err).__name__})") from None

    def generate(self, prompts: Sequence[str], *, max_tokens: int = 48, temperature: float = 0.0,
                 stop: Sequence[str] | None = None, seed: int | None = None) -> list[Completion]:
        params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature}
        if stop is not None:
            params["stop"] = list(stop)
        if seed is not None:
            params["seed"] = seed
        return self._call(self.actor.generate.remote(list(prompts), params))

    def score(self, contexts: Sequence[str], candidates: Sequence[Sequence[str]], *,
              normalize: bool = False) -> list[list[float]]:
        return self._call(self.actor.score.remote(list(contexts), [list(c) for c in candidates], normalize))

    def io_stats(self) -> dict[str, float]:
        try:  # a short wait: metrics logging must not stall on a restarting actor
            return self._ray.get(self.actor.io_stats.remote(), timeout=2.0)
        except (*self._errors, LLMUnavailableError):
            return {}


def actor_lm(llm_cfg: Any, env_family: str | None = None, template_version: str | None = None,
             ray_cfg: Any = None) -> ActorLM:
    """``make_llm`` for ``llm.actor=true``: a client of the shared LM actor (started if not running)."""
    actor = lm_actor_for(llm_cfg, env_family, template_version, ray_cfg)
    return ActorLM(actor, model_id=str(plain_dict(llm_cfg).get("model") or "unknown"),
                   timeout=float(plain_dict(llm_cfg).get("timeout") or 60.0) * 2)
