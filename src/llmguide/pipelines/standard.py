"""The standard recipe: PPO or DQN with the reward module named by ``method.reward`` (RND, NovelD, ICM,
APT, a user's reward class from a file).  A reward class whose constructor takes ``service`` gets the
run's :class:`~llmguide.llm.service.core.LLMService` (cache, batching, ``lm/*``), so an LM-backed reward needs
no recipe of its own.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from llmguide.core.rundir import RunDir
from llmguide.pipelines.runner import Parts, Recipe
from llmguide.pipelines.services import LM_PROGRESS


class StandardRecipe(Recipe):
    """Intrinsic / shaping rewards from ``method.reward`` on PPO or DQN (``method=none agent=scripted``: a
    scripted reference player, :mod:`llmguide.learners.scripted`)."""

    agents = ("ppo", "dqn", "scripted")

    @classmethod
    def check_env(cls, cfg: Any) -> None:
        """A reward class that takes the LM ``service`` reads each state's caption: the env must give captions,
        and an LM that answers from ground truth needs a family that has it."""
        super().check_env(cfg)
        method = cfg.get("method")
        if method is None or not method.get("reward"):
            return
        from llmguide.rewards import wants_lm

        if not wants_lm(method):
            return
        from llmguide.core.config import cfg_get
        from llmguide.core.errors import ConfigError
        from llmguide.envs.registry import FAMILIES, gives_captions

        env = str(cfg_get(cfg.env, "name"))
        if env not in FAMILIES:   # validate() names env.name
            return
        if not gives_captions(cfg.env):
            raise ConfigError("env.caption", f"method={method.get('name')} asks an LM about each state's caption and "
                                             f"env={cfg_get(cfg.env, 'id')} gives none: set env.caption=module:function "
                                             "(fn(obs, info) -> str) or llmguide.train(..., caption=fn)")
        backend = str(cfg_get(cfg.get("llm"), "backend"))
        if backend in ("oracle", "shuffled") and not FAMILIES[env].ground_truth:
            raise ConfigError("llm", f"llm={backend} answers from the env family's ground truth and env={env} has "
                                     "none; use a language model, or llm=random|constant as a knowledge control")

    def check(self) -> None:
        super().check()
        if str(self.cfg.agent.name) == "scripted" and self.cfg.method.get("reward"):
            from llmguide.core.errors import ConfigError

            raise ConfigError("agent", f"agent=scripted plays and never learns: method={self.cfg.method.name}'s "
                                       "reward would have no effect on it; use method=none")

    def build(self, envs: Any, run: RunDir | None) -> Parts:
        from llmguide.rewards import build_reward_modules, wants_lm

        cfg = self.cfg
        service = None
        if wants_lm(cfg.method):   # an LM-backed reward gets the run's LM service (cache, batching, lm/*)
            from llmguide.pipelines.services import open_service

            service = open_service(cfg)
        modules = build_reward_modules(cfg.method, envs.single_observation_space, envs.single_action_space,
                                       envs.num_envs, device=str(cfg.device), seed=int(cfg.seed), service=service)
        parts = Parts(envs, modules, float(cfg.method.extrinsic_coef))
        if modules:
            parts.metrics = lambda: {**(service.lm_metrics() if service is not None else {}),
                                     **{f"reward/{m.name}/{k}": v for _, m in modules for k, v in m.metrics().items()}}
            parts.closers += [m.close for _, m in modules]
        if service is not None:
            from llmguide.pipelines.services import close_service

            parts.closers = [partial(close_service, service), *parts.closers]
            parts.progress = LM_PROGRESS
        return parts
