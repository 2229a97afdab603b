"""Pipelines: the Runner (:mod:`llmguide.pipelines.runner`) that assembles every run, and the registry
of recipes (:mod:`llmguide.pipelines.recipes`; each method's recipe lives in its own package, installed as a
plugin: :mod:`llmguide.core.plugins`).

A method's YAML (``conf/method/<name>.yaml``, in its package's ``conf/``) names its recipe with ``recipe:
"module:Class"`` (the pipelines name none: :data:`RECIPES` holds only ``standard``, the default) and, for the
standard recipe, its reward module with ``reward: "module:Class"`` or ``"path/to/file.py:Class"``.  So a new
intrinsic reward is one file and one YAML; a new kind of method is one recipe module.  The pipelines call only
what :class:`~llmguide.pipelines.runner.Recipe` declares.  Recipe modules are imported lazily (a method's heavy
dependencies load only when used); importing one registers its config rules.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from llmguide.core.errors import ConfigError
from llmguide.core.saved_config import load_run_config as core_load_config
from llmguide.pipelines.recipes import RECIPES, method_recipe, recipe_class

__all__ = ["RECIPES", "evaluate_run", "load_config", "load_run_config", "method_recipe", "probe_lm", "recipe_class",
           "register_rules", "run", "train_run"]

# packages whose import registers the config rules of their keys (env.*, agent.*, method.module.*, llm.*)
RULE_OWNERS = ("llmguide.envs", "llmguide.learners", "llmguide.rewards", "llmguide.llm.factory",
               "llmguide.distributed", "llmguide.pipelines.services")


def register_rules(cfg: DictConfig) -> None:
    """Import every module that owns config rules for this config (called by ``load_config``)."""
    for name in RULE_OWNERS:
        import_module(name)
    recipe_class(cfg).check_env(cfg)   # a method refuses an env family it does not support, before any compute
    table = cfg.llm.get("table") if cfg.get("llm") is not None else None
    if table and Path(str(table)).expanduser().is_file():   # a table built for another LM, method or prompt
        from llmguide.pipelines.answers import check_table

        check_table(cfg)


def load_config(overrides: Sequence[str] = ()) -> DictConfig:
    """The validated config of ``overrides`` with every layer's rules (what ``llmguide train`` composes)."""
    return core_load_config(overrides, providers=[register_rules])


def probe_lm(cfg: DictConfig) -> str | None:
    """``llm=http``: time one request of the mode the method asks in (``method.<its recipe's lm_mode_key>``:
    score, echo + prompt log-probs, or generate) and print a warning with the fix when the server is slower than
    ``llm.probe_threshold`` seconds (:mod:`llmguide.llm.backends.probe`); the warning, or None.

    When ``score`` is unusable there and one ``generate`` request is fast, ``llm.score_fallback`` decides:
    ``switch`` (the default) moves the run to ``generate`` (``cfg`` is changed, one line says so), unless the
    method names its own prompt (``method.prompt`` / ``method.template``: a score prompt would not suit
    generation), ``warn`` keeps ``score`` with the warning, ``stop`` refuses to start (a ConfigError)."""
    if str(cfg.llm.get("backend")) != "http" or not cfg.llm.get("probe_threshold"):
        return None
    key = recipe_class(cfg).lm_mode_key
    if key is None or cfg.method.get(key) not in ("score", "generate"):
        return None
    from omegaconf import open_dict

    from llmguide.llm.backends.probe import probe_server

    mode, fallback = str(cfg.method[key]), str(cfg.llm.get("score_fallback") or "switch")
    if fallback not in ("switch", "warn", "stop"):
        raise ConfigError("llm.score_fallback", f"{fallback!r}: use switch, warn or stop")
    switch = f"method.{key}=generate" if mode == "score" else None
    found = probe_server(cfg.llm, mode, float(cfg.llm.probe_threshold), switch=switch,
                         max_tokens=int(cfg.method.get("max_tokens") or cfg.llm.get("max_tokens") or 16))
    if not found.warning:
        return None
    own_prompt = [k for k in ("prompt", "template") if cfg.method.get(k)]
    if mode == "score" and found.generate_seconds is not None:
        if fallback == "stop":
            raise ConfigError(f"method.{key}", f"{found.warning} (llm.score_fallback=stop)")
        if fallback == "switch" and not own_prompt:
            with open_dict(cfg):
                cfg.method[key] = "generate"
            line = (f"LM probe: score requests to {found.base_url} are too slow or fail, one generate request took "
                    f"{found.generate_seconds:.1f} s: switching this run to {switch} (llm.score_fallback=warn keeps "
                    "score)")
            print(f"llmguide: {line}", file=sys.stderr, flush=True)
            return line
        if fallback == "switch":
            found.warning += (f" (not switched: method.{own_prompt[0]}={cfg.method[own_prompt[0]]} is the method's "
                              "own prompt; set a generate prompt with the switch)")
    print(f"llmguide: warning: {found.warning}", file=sys.stderr, flush=True)
    return found.warning


def train_run(cfg: DictConfig, callbacks: Sequence[Any] = ()) -> Any:
    """Train the configured method (the LM probed first); the :class:`~llmguide.pipelines.summary.TrainResult`.
    ``callbacks``: the caller's own :class:`~llmguide.learners.callbacks.Callback` objects (the Python API's)."""
    from llmguide.pipelines.runner import run_training

    cls = recipe_class(cfg)
    cls.check_env(cfg)
    probe_lm(cfg)          # may move the method from score to generate: before the recipe reads its config
    return run_training(cfg, cls(cfg), callbacks)


def run(verb: str, cfg: DictConfig) -> int | None:
    """Run ``verb`` for the configured method: ``train``, ``answers``, or one of its recipe's offline
    :attr:`~llmguide.pipelines.runner.Recipe.steps` (the LM probed first for a step that asks it)."""
    if verb == "train":
        train_run(cfg)
        return 0
    cls = recipe_class(cfg)
    if verb == "answers":
        from llmguide.pipelines.answers import build_answers

        cls.check_env(cfg)
        return build_answers(cfg, cls(cfg))
    if verb not in cls.steps:
        raise ConfigError("method", f"method '{cfg.method.name}' has no '{verb}' step; it supports "
                                    f"{['train', *cls.steps]}")
    step = cls.steps[verb]
    if step.asks_lm:
        cls.check_env(cfg)
        probe_lm(cfg)
    return step(cfg)


def evaluate_run(run_dir: str, overrides: list[str]) -> Any:
    """``llmguide eval RUN_DIR``: evaluate the run's latest checkpoint with its method's recipe."""
    from llmguide.pipelines.evaluate import evaluate_run as evaluate

    return evaluate(run_dir, load_run_config(run_dir, overrides), lambda cfg: recipe_class(cfg)(cfg))


def load_run_config(run_dir: str | Path, overrides: Sequence[str] = ()) -> DictConfig:
    """A run's saved ``config.yaml`` with ``key=value`` overrides applied, validated like the command line
    (:func:`~llmguide.core.saved_config.load_saved_config`: a hand-edited file with a bad key or value is a
    ConfigError naming it)."""
    from llmguide.core.config import check_overrides
    from llmguide.core.saved_config import load_saved_config

    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.yaml)")
    check_overrides(overrides, "eval.episodes=20")
    return load_saved_config(path, overrides, providers=[register_rules])
