"""ONI pipeline: ``llmguide train method=oni_retrieval|oni_classification|oni_ranking|ellm_bow env=minihack|nethack``.

PPO on the env; the intrinsic reward module labels the agent's messages online through the async
:class:`~llmguide.llm.service.LLMService` (never blocking the learner; labels persisted in the LM
cache, so later runs and seeds reuse them).  Writes metrics (``lm/*`` and ``reward/<module>/*``),
checkpoints (agent incl. the reward module's labels and weights), ``lm_stats.json``, ``eval.json``
and the report.
"""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig

from llmguide.core.config import in_range, non_negative, one_of, positive, register_rule
from llmguide.core.rundir import RunDir
from llmguide.core.seeding import seed_everything
from llmguide.rewards.base import RewardModule

log = logging.getLogger(__name__)

ONI_METHODS = ("oni_retrieval", "oni_classification", "oni_ranking")

for _key, _rule in {
    "method.beta": non_negative, "method.count_scope": one_of("episode", "global"),
    "method.label_mode": one_of("score", "generate"), "method.max_in_flight": positive,
    "method.service_batch": positive, "method.max_tokens": positive, "method.lr": positive,
    "method.batch_size": positive, "method.steps_per_round": positive, "method.duty": in_range(0.01, 1.0),
    "method.pairs_per_batch": positive, "method.max_messages": positive, "method.min_labels": positive,
    "method.min_pairs": positive, "method.service_timeout": positive, "method.drain_timeout": non_negative,
}.items():
    register_rule(_key, _rule)


def make_lm(llm_cfg: Any, env_family: str | None = None) -> Any:
    """The configured LM (via ``llmguide.llm.factory.make_llm``; cached in SQLite when enabled)."""
    try:
        from llmguide.llm.factory import make_llm
    except ImportError:  # factory not installed: the embedded backend over the default cache
        from llmguide.llm.cache import CachedLM, LLMCache, default_cache_path
        from llmguide.llm.embedded import EmbeddedLM

        if llm_cfg.backend != "embedded":
            raise
        lm = EmbeddedLM(llm_cfg.get("model_path"), n_ctx=int(llm_cfg.n_ctx), n_threads=int(llm_cfg.n_threads))
        path = llm_cfg.cache.path or default_cache_path()
        return CachedLM(lm, LLMCache(path)) if llm_cfg.cache.enabled else lm
    return make_llm(llm_cfg, env_family)


def build_oni_module(method_cfg: Any, num_envs: int, service: Any, seed: int = 0) -> RewardModule:
    """The reward module of an ONI method; ``service`` is the LLMService the annotator talks to."""
    from llmguide.rewards.oni import ONIClassification, ONIRanking, ONIRetrieval
    from llmguide.rewards.oni_annotator import MessageAnnotator, PairAnnotator

    m = method_cfg
    common = {"beta": float(m.beta), "count_scope": str(m.count_scope), "pending_default": float(m.pending_default),
              "canonicalize": bool(m.canonicalize)}
    if m.name == "oni_ranking":
        annot = PairAnnotator(service, template=m.template, mode=m.label_mode, max_tokens=int(m.max_tokens),
                              max_in_flight=int(m.max_in_flight))
        return ONIRanking(annot, num_envs, threshold=float(m.threshold), pairs_per_batch=int(m.pairs_per_batch),
                          max_messages=int(m.max_messages), min_pairs=int(m.min_pairs), lr=float(m.lr),
                          batch_size=int(m.batch_size), steps_per_round=int(m.steps_per_round),
                          duty=float(m.duty), seed=seed, **common)
    annot = MessageAnnotator(service, template=m.get("template"), mode=m.label_mode, max_tokens=int(m.max_tokens),
                             score_margin=float(m.get("score_margin", 1.0)), max_in_flight=int(m.max_in_flight))
    if m.name == "oni_classification":
        return ONIClassification(annot, num_envs, threshold=float(m.threshold), min_labels=int(m.min_labels),
                                 lr=float(m.lr), batch_size=int(m.batch_size),
                                 steps_per_round=int(m.steps_per_round), duty=float(m.duty), seed=seed, **common)
    return ONIRetrieval(annot, num_envs, **common)


def lm_metrics(service: Any, module: Any) -> dict[str, float]:
    """``lm/*`` metrics of the service (calls, hit rate, fallbacks, latency) plus annotation counts."""
    out: dict[str, float] = {}
    if service is not None:
        m = service.metrics()
        for key in ("submitted", "completed", "deduplicated", "fallbacks", "backend_calls", "cache_hits",
                    "cache_hit_rate", "latency_p50", "latency_p95", "tokens", "queue_depth"):
            if isinstance(m.get(key), int | float):
                out[f"lm/{key}"] = float(m[key])
        out["lm/calls"] = out.get("lm/submitted", 0.0)
        out["lm/hit_rate"] = out.get("lm/cache_hit_rate", 0.0)
    annot = getattr(module, "annotator", None)
    if annot is not None:
        out.update({f"lm/annot_{k}": v for k, v in annot.metrics().items()})
        out["lm/parse_errors"] = float(sum(annot.stats.malformed.values()))
    return out


def train(cfg: DictConfig) -> int:
    """Train PPO with the configured ONI / ELLM-BoW intrinsic reward (``none``: extrinsic only); returns 0."""
    from llmguide.envs import make_vector_env
    from llmguide.learners.ppo import PPO

    if cfg.agent.name != "ppo":
        from llmguide.core.errors import ConfigError

        raise ConfigError("agent", f"ONI methods train with agent=ppo, got '{cfg.agent.name}'")
    seed_everything(int(cfg.seed), bool(cfg.deterministic))
    service = module = None
    with RunDir.open(cfg) as run:
        envs = make_vector_env(cfg.env, int(cfg.num_envs), int(cfg.seed), str(cfg.vector))
        try:
            if cfg.method.name == "none":  # the extrinsic-only baseline, same loop and logging
                module = None
            elif cfg.method.name == "ellm_bow":
                from llmguide.rewards.bow import build_ellm_bow

                module = build_ellm_bow(cfg.method, envs.single_observation_space, envs.single_action_space,
                                        int(cfg.num_envs))
            else:
                from llmguide.llm.service import LLMService

                service = LLMService(make_lm(cfg.llm, cfg.env.name), max_batch=int(cfg.method.service_batch),
                                     timeout=float(cfg.method.get("service_timeout", 600.0)))
                module = build_oni_module(cfg.method, int(cfg.num_envs), service, int(cfg.seed))
            modules = [(float(cfg.method.intrinsic_coef), module)] if module is not None else []
            agent = PPO(envs, cfg.agent, reward_modules=modules,
                        extrinsic_coef=float(cfg.method.extrinsic_coef), run=run, seed=int(cfg.seed),
                        device=str(cfg.device))
            if cfg.run.resume and (state := run.load_checkpoint()) is not None:
                agent.load_state_dict(state["agent"])
                run.truncate_metrics_after(agent.global_step)
                log.info("resumed %s at step %d", run.path, agent.global_step)
            every = max(1, int(cfg.log_every))
            if service is not None:
                agent.progress_stats = lambda: {"calls": (m := lm_metrics(service, module)).get("lm/calls", 0),
                                                "hit_rate": m.get("lm/hit_rate", 0.0)}

            def log_lm(a: Any) -> None:
                if a.global_step // every > (a.global_step - a.num_envs * a.num_steps) // every:
                    run.log(a.global_step, lm_metrics(service, module))

            agent.learn(int(cfg.total_steps), progress=bool(cfg.progress), checkpoint_every=int(cfg.checkpoint_every),
                        callback=log_lm)
            annot = getattr(module, "annotator", None)
            if annot is not None and annot.pending:  # training is over: let in-flight labels land in the cache
                drained = annot.wait(float(cfg.method.get("drain_timeout", 60.0)))
                log.info("annotation drain at the end: %s", "complete" if drained else f"{annot.pending} left")
            run.save_checkpoint({"agent": agent.state_dict()}, agent.global_step)
            stats = lm_metrics(service, module)
            run.log(agent.global_step, stats)
            run.write_json("lm_stats.json", stats)
            _evaluate(cfg, agent, run)
        finally:
            if module is not None and hasattr(module, "close"):
                module.close()
            if service is not None:
                service.close()
                service.lm.close()
            envs.close()
    try:
        from llmguide.report import write_report

        write_report([str(run.path)])
    except Exception as err:  # the report is a convenience; the run's files are all written
        log.warning("report not written: %s", err)
    return 0


def _evaluate(cfg: DictConfig, agent: Any, run: RunDir) -> None:
    try:
        from llmguide.learners.evaluation import evaluate
    except ImportError:
        log.warning("llmguide.learners.evaluation not available: eval.json not written")
        return
    if int(cfg.eval.episodes) > 0:
        run.write_json("eval.json", evaluate(agent, cfg.env, int(cfg.eval.episodes), int(cfg.seed) + 10_000,
                                             greedy=bool(cfg.eval.greedy)))
