"""DRRN pipeline: ``llmguide train env=babyai method=drrn ...`` (GLAM's text Q-learning baseline).

seed -> run dir -> BabyAI-Text vector env -> :class:`DRRNPolicy` -> :class:`DRRNAgent` (resume from
``checkpoints/latest.pt`` with ``run.resume=true``) -> final checkpoint -> evaluation into ``eval.json``.
``llmguide eval RUN_DIR`` re-evaluates the latest checkpoint, greedy and sampled.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from llmguide.core.config import in_range, non_negative, positive, register_rule
from llmguide.core.errors import ConfigError
from llmguide.pipelines.text_policy import evaluate_checkpoint, train_text_policy

for _key in ("k_history", "embed_dim", "hidden_dim", "softmax_temperature", "lr", "batch_size", "replay_size",
             "reward_scale"):
    register_rule(f"method.{_key}", positive)
for _key in ("max_grad_norm", "target_update_every", "torch_threads"):
    register_rule(f"method.{_key}", non_negative)
register_rule("method.gamma", in_range(0.0, 1.0))
register_rule("method.vocab_size", lambda v: None if v >= 2 else f"must be >= 2 (id 0 is padding), got {v!r}")
register_rule("method.update_every", lambda v: None if v is None or v > 0 else f"must be > 0 or null, got {v!r}")


def build_policy(cfg: DictConfig) -> Any:
    """A fresh :class:`DRRNPolicy` over BabyAI-Text's action strings, sized by ``cfg.method``."""
    from llmguide.envs.babyai_text import ACTION_STRINGS
    from llmguide.learners.drrn import DRRNPolicy

    if cfg.env.name != "babyai":
        raise ConfigError("env", f"method=drrn runs on BabyAI-Text (env=babyai), got env={cfg.env.name}")
    m = cfg.method
    return DRRNPolicy(ACTION_STRINGS, vocab_size=int(m.vocab_size), embed_dim=int(m.embed_dim),
                      hidden_dim=int(m.hidden_dim), temperature=float(m.softmax_temperature))


def train(cfg: DictConfig) -> int:
    """Train a DRRN agent; writes metrics, checkpoints and ``eval.json`` into the run dir; returns 0."""
    from llmguide.learners.drrn import DRRNAgent

    return train_text_policy(cfg, build_policy, lambda envs, policy, run: DRRNAgent(
        envs, policy, cfg.method, run=run, seed=int(cfg.seed), log_every=int(cfg.log_every)))


def evaluate(run_dir: str, overrides: list[str]) -> int:
    """``llmguide eval RUN_DIR [key=value ...]``: evaluation and generalisation tests of the last checkpoint."""
    return evaluate_checkpoint(run_dir, overrides, build_policy,
                               lambda policy, agent: policy.net.load_state_dict(agent["net"]))
