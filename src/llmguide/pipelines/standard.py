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
