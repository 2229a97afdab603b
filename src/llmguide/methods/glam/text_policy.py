"""What the text-policy recipes (GLAM, NPAE, DRRN) share: the policy built once per run, evaluation with
GLAM's generalisation tests, the torch thread setting and their config rules.

A text policy has ``action_strings`` and ``act(prompts, greedy)``; a recipe supplies how to build one
from the config (``build_policy``), the agent that trains it, and how to load its weights from a
checkpoint's ``agent`` state (``load_policy``).
"""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig

from llmguide.core.config import non_negative, register_rule
from llmguide.core.errors import ConfigError
from llmguide.core.rundir import RunDir
from llmguide.pipelines.runner import EVAL_SEED_OFFSET, Parts, Recipe

log = logging.getLogger(__name__)


def _known_tests(value: Any) -> str | None:
    from llmguide.methods.glam.generalisation import TESTS

    unknown = [v for v in value or [] if v not in TESTS]
    return f"unknown test(s) {unknown}; choose from {sorted(TESTS)}" if unknown else None


register_rule("method.post_tests", _known_tests)
register_rule("method.post_test_episodes", non_negative)


def set_threads(cfg: DictConfig) -> None:
    """``torch.set_num_threads(method.torch_threads)`` unless it is 0 (torch's default)."""
    import torch

    if int(cfg.agent.torch_threads) > 0:
        torch.set_num_threads(int(cfg.agent.torch_threads))


class TextPolicyRecipe(Recipe):
    """A recipe whose agent trains a text policy (GLAM, NPAE, DRRN); subclasses give the policy and agent."""

    def __init__(self, cfg: DictConfig):
        super().__init__(cfg)
        self._policy: Any = None

    @property
    def policy(self) -> Any:
        if self._policy is None:
            set_threads(self.cfg)
            self._policy = self.build_policy()
        return self._policy

    def check(self) -> None:
        super().check()
        if str(self.cfg.env.name) != "babyai":
            raise ConfigError("env", f"method={self.cfg.method.name} runs on BabyAI-Text (env=babyai), "
                                     f"got env={self.cfg.env.name}")

    def build_policy(self) -> Any:
        raise NotImplementedError

    def load_policy(self, agent_state: dict[str, Any]) -> None:
        raise NotImplementedError

    def build(self, envs: Any, run: RunDir | None) -> Parts:
        return Parts(envs)

    def evaluate(self, agent: Any, episodes: int, greedy: bool) -> dict[str, Any]:
        return evaluation(self.policy, self.cfg, episodes, greedy)

    def load_for_eval(self, state: dict[str, Any]) -> Any:
        self.load_policy(state)
        return self.policy


def evaluation(policy: Any, cfg: DictConfig, episodes: int, greedy: bool) -> dict[str, Any]:
    """Episodes on held-out seeds, plus — in the ``eval.greedy`` mode — the generalisation tests named
    in ``method.post_tests``."""
    from llmguide.methods.glam.generalisation import run_tests
    from llmguide.methods.glam.learner import evaluate_policy

    seed, k = int(cfg.seed) + EVAL_SEED_OFFSET, int(cfg.method.k_history)
    results: dict[str, Any] = evaluate_policy(policy, cfg.env, episodes, seed, k, greedy=greedy)
    tests = list(cfg.method.get("post_tests") or [])
    if tests and greedy == bool(cfg.eval.greedy):
        results["generalisation"] = run_tests(policy, cfg.env, tests, int(cfg.method.post_test_episodes), seed, k,
                                              greedy=greedy)
    return results
