"""Pipelines: one per paper method, composing envs, LM, rewards and learners.

``run(verb, cfg)`` dispatches on ``cfg.method.name``.  Each entry names a function
``fn(cfg) -> int | None`` imported lazily, so a method's heavy dependencies load only when used.
"""

from __future__ import annotations

from importlib import import_module

from omegaconf import DictConfig

from llmguide.core.errors import ConfigError

# method.name -> {verb: "module:function"}
PIPELINES: dict[str, dict[str, str]] = {
    "none": {"train": "llmguide.pipelines.standard:train"},
    "rnd": {"train": "llmguide.pipelines.standard:train"},
    "noveld": {"train": "llmguide.pipelines.standard:train"},
    "icm": {"train": "llmguide.pipelines.standard:train"},
    "apt": {"train": "llmguide.pipelines.standard:train"},
    # ELLM (goal suggestion + similarity reward) and its LM-free baselines
    "ellm": {"train": "llmguide.pipelines.ellm:train"},
    "ellm_oracle": {"train": "llmguide.pipelines.ellm:train"},
    "ellm_all_goals": {"train": "llmguide.pipelines.ellm:train"},
    # ONI (online message labels) and ELLM-BoW
    "oni_retrieval": {"train": "llmguide.pipelines.oni:train"},
    "oni_classification": {"train": "llmguide.pipelines.oni:train"},
    "oni_ranking": {"train": "llmguide.pipelines.oni:train"},
    "ellm_bow": {"train": "llmguide.pipelines.oni:train"},
    # GLAM: the LM is the policy (hf backend), fine-tuned with PPO
    "glam": {"train": "llmguide.pipelines.glam:train", "eval": "llmguide.pipelines.glam:evaluate"},
    "npae": {"train": "llmguide.pipelines.glam:train", "eval": "llmguide.pipelines.glam:evaluate"},
    # DRRN: GLAM's text Q-learning baseline over the same prompts
    "drrn": {"train": "llmguide.pipelines.drrn:train", "eval": "llmguide.pipelines.drrn:evaluate"},
    # Motif and BK: collect -> label -> train, each step reading the run dir
    "motif": {verb: f"llmguide.pipelines.motif:{verb}" for verb in ("collect", "label", "train")},
    **{bk: {verb: f"llmguide.pipelines.bk:{verb}" for verb in ("collect", "label", "train")}
       for bk in ("bk_code", "bk_pref", "bk_goal")},
}


def register(method: str, verb: str, target: str) -> None:
    """Register ``module:function`` as the handler of ``llmguide <verb> method=<method>``."""
    PIPELINES.setdefault(method, {})[verb] = target


def _resolve(target: str):
    module, _, func = target.partition(":")
    return getattr(import_module(module), func)


def run(verb: str, cfg: DictConfig) -> int | None:
    """Run ``verb`` (train / collect / label) for the configured method."""
    method = cfg.method.name
    handlers = PIPELINES.get(method)
    if handlers is None:
        raise ConfigError("method.name", f"no pipeline for method '{method}'; known: {sorted(PIPELINES)}")
    if verb not in handlers:
        raise ConfigError("method", f"method '{method}' has no '{verb}' step; it supports {sorted(handlers)}")
    return _resolve(handlers[verb])(cfg)


def evaluate_run(run_dir: str, overrides: list[str]) -> int | None:
    """``llmguide eval RUN_DIR``: evaluate the run's latest checkpoint (the method's own ``eval`` if it has one)."""
    from llmguide.pipelines.standard import load_run_config

    method = load_run_config(run_dir).method.name
    target = PIPELINES.get(method, {}).get("eval", "llmguide.pipelines.standard:evaluate")
    return _resolve(target)(run_dir, overrides)
