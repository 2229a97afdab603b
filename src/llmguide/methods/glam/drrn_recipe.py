"""DRRN recipe: ``llmguide train env=babyai method=drrn ...`` (GLAM's text Q-learning baseline).

A :class:`DRRNPolicy` sized by ``method`` (tokeniser, encoders) trained by :class:`DRRNAgent` with the
settings of ``agent=drrn``; the Runner does the rest (resume, checkpoints, evaluation, report).
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from llmguide.core.config import in_range, non_negative, positive, register_rule
from llmguide.core.rundir import RunDir
from llmguide.methods.glam.text_policy import TextPolicyRecipe
from llmguide.pipelines.runner import Parts

for _key in ("k_history", "embed_dim", "hidden_dim", "softmax_temperature"):
    register_rule(f"method.{_key}", positive)
for _key in ("lr", "batch_size", "replay_size", "reward_scale"):
    register_rule(f"agent.{_key}", positive)
for _key in ("max_grad_norm", "target_update_every", "torch_threads"):
    register_rule(f"agent.{_key}", non_negative)
register_rule("method.vocab_size", lambda v: None if v >= 2 else f"must be >= 2 (id 0 is padding), got {v!r}")
register_rule("agent.update_every", lambda v: None if v is None or v > 0 else f"must be > 0 or null, got {v!r}")
register_rule("agent.gamma", in_range(0.0, 1.0))


class DRRNRecipe(TextPolicyRecipe):
    """DRRN: GRU encoders of prompt and action strings, Q-learning from a replay."""

    agents = ("drrn",)
    env_families = ("babyai",)

    def build_policy(self) -> Any:
        from llmguide.envs.babyai.env import ACTION_STRINGS
        from llmguide.methods.glam.drrn import DRRNPolicy

        m = self.cfg.method
        return DRRNPolicy(ACTION_STRINGS, vocab_size=int(m.vocab_size), embed_dim=int(m.embed_dim),
                          hidden_dim=int(m.hidden_dim), temperature=float(m.softmax_temperature))

    def load_policy(self, agent_state: dict[str, Any]) -> None:
        self.policy.net.load_state_dict(agent_state["net"])

    def make_agent(self, parts: Parts, run: RunDir | None) -> Any:
        from llmguide.methods.glam.drrn import DRRNAgent

        settings = {**OmegaConf.to_container(self.cfg.agent, resolve=True), "k_history": int(self.cfg.method.k_history)}
        return DRRNAgent(parts.envs, self.policy, settings, run=run, seed=int(self.cfg.seed),
                         log_every=int(self.cfg.log_every))
