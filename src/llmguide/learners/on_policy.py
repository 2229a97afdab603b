"""On-policy learners (PPO, GLAM's PPO, PTGM's high level): one vocabulary, CleanRL's.

Every on-policy learner reads the same ``agent.*`` names with the same meaning:

* ``num_steps``: steps per env in one rollout (a rollout holds ``num_steps × num_envs`` transitions);
* ``update_epochs``: passes over the rollout per update;
* ``num_minibatches``: minibatches per epoch (each ``batch // num_minibatches`` transitions, CleanRL's);
* ``gamma``, ``gae_lambda``, ``clip_coef``, ``ent_coef``, ``vf_coef``, ``max_grad_norm``, ``norm_adv``.

:func:`compute_gae` and :func:`clipped_loss` are the pieces every one of them computes with.

GLAM's old names (``rollout_steps``, ``epochs``, ``minibatch``) are accepted for one release, with one
deprecation line; ``minibatch`` was a minibatch *size* (prompts per gradient step) and keeps that meaning
while it is accepted, so an old config trains exactly as before.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import torch

from llmguide.core.config import cfg_get
from llmguide.learners.base import Learner

log = logging.getLogger(__name__)

# GLAM's old name -> the on-policy vocabulary's (accepted for one release)
DEPRECATED_KEYS = {"rollout_steps": "num_steps", "epochs": "update_epochs", "minibatch": "num_minibatches"}


def compute_gae(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, last_value: np.ndarray,
                gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over (T, N) arrays; returns (advantages, returns).

    ``values[t] = V(s_t)``, ``last_value = V(s_T)`` and ``dones[t]`` = transition t ended the
    episode, so neither V(s_{t+1}) nor later advantages leak across an episode boundary.
    """
    T = rewards.shape[0]
    advantages = np.zeros_like(rewards, dtype=np.float32)
    last_gae = np.zeros_like(last_value, dtype=np.float32)
    for t in reversed(range(T)):
        next_value = last_value if t == T - 1 else values[t + 1]
        nonterminal = 1.0 - dones[t].astype(np.float32)
        delta = rewards[t] + gamma * next_value * nonterminal - values[t]
        last_gae = delta + gamma * lam * nonterminal * last_gae
        advantages[t] = last_gae
    return advantages, advantages + values


def clipped_loss(newlogprob: torch.Tensor, oldlogprob: torch.Tensor, advantages: torch.Tensor,
                 entropy: torch.Tensor, newvalue: torch.Tensor, returns: torch.Tensor, clip_coef: float,
                 ent_coef: float, vf_coef: float, old_values: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """PPO's clipped objective on one minibatch (CleanRL's): ``loss = policy_loss − ent_coef·entropy +
    vf_coef·value_loss``; the pieces are returned beside it, and, without gradient, ``old_approx_kl``,
    ``approx_kl`` (``(r − 1) − log r``), ``clipfrac`` and ``max_abs_logratio``.

    ``policy_loss`` = mean of ``max(−A·r, −A·clip(r, 1 ± clip_coef))`` with ``r = exp(newlogprob − oldlogprob)``;
    ``value_loss`` = ½ the mean squared error to ``returns`` (per value head, summed over heads: the last axis of
    (B, heads) values), each value kept within ``clip_coef`` of ``old_values`` when they are given.
    """
    logratio = newlogprob - oldlogprob
    ratio = logratio.exp()
    policy_loss = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)).mean()
    if old_values is not None:
        clipped = old_values + torch.clamp(newvalue - old_values, -clip_coef, clip_coef)
        value_loss = 0.5 * torch.max((newvalue - returns) ** 2, (clipped - returns) ** 2).mean(0).sum()
    else:
        value_loss = 0.5 * ((newvalue - returns) ** 2).mean(0).sum()
    entropy_mean = entropy.mean()
    with torch.no_grad():
        stats = {"old_approx_kl": (-logratio).mean(), "approx_kl": ((ratio - 1) - logratio).mean(),
                 "clipfrac": ((ratio - 1.0).abs() > clip_coef).float().mean(),
                 "max_abs_logratio": logratio.abs().max()}
    return {"loss": policy_loss - ent_coef * entropy_mean + vf_coef * value_loss, "policy_loss": policy_loss,
            "value_loss": value_loss, "entropy": entropy_mean, **stats}


def deprecated_keys(cfg: Any) -> dict[str, int]:
    """The old GLAM names that ``cfg`` sets (not null), with one deprecation line naming their replacements."""
    found = {old: int(cfg_get(cfg, old)) for old in DEPRECATED_KEYS if cfg_get(cfg, old) is not None}
    if found:
        olds = ", ".join(f"agent.{k}" for k in found)
        news = ", ".join(f"agent.{DEPRECATED_KEYS[k]}" for k in found)
        size = " (agent.minibatch was a size: prompts per gradient step)" if "minibatch" in found else ""
        message = f"{olds} deprecated, removed in the next release: use {news}{size}"
        warnings.warn(message, DeprecationWarning, stacklevel=3)
        log.warning(message)
    return found


class OnPolicyLearner(Learner):
    """A :class:`~llmguide.learners.base.Learner` that rolls out ``num_steps`` per env, then runs
    ``update_epochs`` epochs of ``num_minibatches`` minibatches (see the module docstring)."""

    def _read_settings(self, cfg: Any) -> None:
        """The on-policy vocabulary from ``cfg`` (conf/agent/<name>.yaml merged with the run's settings)."""
        old = deprecated_keys(cfg)
        self.num_steps = int(old.get("rollout_steps", cfg_get(cfg, "num_steps")))
        self.update_epochs = int(old.get("epochs", cfg_get(cfg, "update_epochs")))
        self.num_minibatches = int(cfg_get(cfg, "num_minibatches"))
        self.minibatch_size = old.get("minibatch")   # only from the old ``minibatch``: a fixed size
        self.gamma = float(cfg_get(cfg, "gamma"))
        self.gae_lambda = float(cfg_get(cfg, "gae_lambda"))
        self.clip_coef = float(cfg_get(cfg, "clip_coef"))
        self.ent_coef = float(cfg_get(cfg, "ent_coef"))
        self.vf_coef = float(cfg_get(cfg, "vf_coef"))
        self.max_grad_norm = float(cfg_get(cfg, "max_grad_norm"))
        self.norm_adv = bool(cfg_get(cfg, "norm_adv"))

    def _normalized(self, advantages: torch.Tensor) -> torch.Tensor:
        """A minibatch's advantages at mean 0 and std 1 with ``norm_adv`` (a single row's as they are)."""
        if self.norm_adv and len(advantages) > 1:
            return (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return advantages

    def _minibatches(self, order: np.ndarray, per_mb: int) -> list[np.ndarray]:
        """Index sets of one epoch's minibatches: consecutive ``per_mb`` slices of ``order`` (CleanRL's; a
        batch that ``num_minibatches`` does not divide ends with a smaller minibatch)."""
        return [order[start:start + per_mb] for start in range(0, len(order), per_mb)]

    def _end_rollout(self, metrics: dict[str, Any], env_steps: int) -> None:
        """After a rollout's update: counted, steps/s into ``metrics``, then :meth:`_end_iteration`."""
        self.updates += 1
        metrics["charts/sps"] = self._sps()
        self._end_iteration(metrics, env_steps)
