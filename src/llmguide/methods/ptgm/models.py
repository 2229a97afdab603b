"""PTGM's learned parts: the goal-conditioned low-level policy (BC), the goal prior, the KL-to-prior
reward and PPO over options.

- Low level: an :class:`~llmguide.learners.networks.ActorCritic` (the same class PPO trains, so
  BC-finetune loads it as is) over :func:`llmguide.methods.ptgm.options.lowlevel_space`, trained by
  behaviour cloning on hindsight-relabelled bot data; with probability ``p_uncond`` the goal is
  dropped (zeros, ``has_goal`` 0).  :class:`LowLevelActor` acts with optional classifier-free
  guidance: logits = (1 + s)·cond − s·uncond (Steve-1; ``s = 0`` is one plain pass).
- Prior: :class:`GoalPrior`, state (image + direction; no mission: task-agnostic) → logits over
  the ``k`` codes, cross-entropy on the nearest-code labels of the hindsight goals (soft labels
  with a temperature optional).
- :class:`KLToPrior` is a reward module returning ``KL`` (≥ 0) per high-level step under the
  rollout policy; the recipe weights it by ``−kl.coef``, so the reward is
  ``r_env − α·KL(π_high(·|s) ‖ π_prior(·|s))`` (direction ``policy_prior``, PTGM's code:
  Σ π (log π − log prior)); ``prior_policy`` gives KL(prior ‖ π).  The env return and the KL are
  logged separately (``charts/episodic_return``, ``charts/intrinsic_reward/kl_prior``).
- :class:`OptionPPO` is PPO whose ``global_step`` counts **env** steps (each option adds its
  ``info["option_steps"]``), so budgets, learning-rate annealing and evaluation match flat agents.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

from llmguide.learners.networks import ActorCritic, DictEncoder, layer_init, obs_to_tensor
from llmguide.learners.ppo import PPO
from llmguide.methods.ptgm.options import DIRECTION_DIM, lowlevel_obs
from llmguide.rewards.base import RewardModule, TransitionBatch

log = logging.getLogger(__name__)
KL_DIRECTIONS = ("policy_prior", "prior_policy")


# --- low level ------------------------------------------------------------------------------
def make_lowlevel(obs_space: spaces.Dict, n_actions: int, hidden: int, image_encoder: str = "cnn") -> ActorCritic:
    return ActorCritic(obs_space, n_actions, hidden=hidden, image_encoder=image_encoder)


def _batches(n: int, batch_size: int, rng: np.random.Generator):
    order = rng.permutation(n)
    for i in range(0, n, batch_size):
        yield order[i:i + batch_size]


def val_split(n: int, seed: int, val_fraction: float = 0.05) -> np.ndarray:
    """(n,) bool: the held-out validation samples of :func:`train_lowlevel` (the first draw of its seeded
    generator), so that the BC gate (:mod:`llmguide.methods.ptgm.gate`) scores exactly the samples BC never saw."""
    return np.random.default_rng(seed).random(n) < val_fraction


def lowlevel_inputs(images: np.ndarray, directions: np.ndarray, goals: np.ndarray, ids: np.ndarray,
                    drop: np.ndarray) -> dict[str, torch.Tensor]:
    """The low level's input for samples ``ids``: image, state ‖ goal ‖ has_goal; where ``drop`` the goal is
    zeros and has_goal 0 (the unconditioned policy that goal dropout trains)."""
    g = np.where(drop[:, None], 0.0, goals[ids]).astype(np.float32)
    vec = np.concatenate([directions[ids], g, (~drop)[:, None].astype(np.float32)], 1)
    return {"image": torch.as_tensor(images[ids], dtype=torch.float32), "vector": torch.as_tensor(vec)}


def train_lowlevel(net: ActorCritic, images: np.ndarray, directions: np.ndarray, goals: np.ndarray,
                   actions: np.ndarray, *, p_uncond: float, epochs: int, batch_size: int, lr: float, seed: int,
                   val_fraction: float = 0.05) -> dict[str, Any]:
    """Goal-conditioned BC (NLL of the bot's action); each sample's goal is dropped with ``p_uncond``."""
    rng = np.random.default_rng(seed)
    n = len(actions)
    val = rng.random(n) < val_fraction   # = val_split(n, seed, val_fraction): the same first draw
    tr = np.flatnonzero(~val)
    opt = torch.optim.Adam(net.parameters(), lr=lr)

    def inputs(ids: np.ndarray, drop: np.ndarray) -> dict[str, torch.Tensor]:
        return lowlevel_inputs(images, directions, goals, ids, drop)

    history = []
    for epoch in range(epochs):
        net.train()
        losses = []
        for b in _batches(len(tr), batch_size, rng):
            ids = tr[b]
            logits = net.action_logits(inputs(ids, rng.random(len(ids)) < p_uncond))
            loss = F.cross_entropy(logits, torch.as_tensor(actions[ids]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        rec = {"epoch": epoch, "loss": float(np.mean(losses))}
        vids = np.flatnonzero(val)
        if len(vids):
            with torch.no_grad():
                for name, drop in (("cond", np.zeros(len(vids), bool)), ("uncond", np.ones(len(vids), bool))):
                    logits = net.action_logits(inputs(vids, drop))
                    rec[f"val_acc_{name}"] = float((logits.argmax(-1).numpy() == actions[vids]).mean())
                    # NLL too: on stochastic data (an exploring agent) the goal can shift the action distribution
                    # without changing its argmax, which the accuracy alone misses
                    rec[f"val_nll_{name}"] = float(F.cross_entropy(logits, torch.as_tensor(actions[vids])).item())
        history.append(rec)
        log.info("low-level BC %s", rec)
    net.eval()
    return {"history": history, "samples": int(n)}


class LowLevelActor:
    """``(env obs, goal) -> action`` with the frozen low-level net; ``cfg_scale`` > 0 = classifier-free guidance.

    :meth:`batch` acts for a batch of env observations and (B, E) goals (:class:`OptionsVectorEnv`).
    """

    def __init__(self, net: ActorCritic, goal_dim: int, cfg_scale: float = 0.0, greedy: bool = False, seed: int = 0,
                 state_dim: int = DIRECTION_DIM):
        self.net, self.goal_dim, self.cfg_scale, self.greedy = net.eval(), int(goal_dim), float(cfg_scale), greedy
        self.state_dim = int(state_dim)
        self.gen = torch.Generator().manual_seed(int(seed))

    @torch.no_grad()
    def logits(self, obs: dict[str, np.ndarray], goals: np.ndarray) -> torch.Tensor:
        """(B, A) logits for a batch: (1 + s)·cond − s·uncond (one pass when s = 0)."""
        cond = lowlevel_obs(obs, goals, self.goal_dim, self.state_dim)
        if self.cfg_scale == 0.0:
            return self.net.action_logits(obs_to_tensor(cond))
        uncond = lowlevel_obs(obs, None, self.goal_dim, self.state_dim)
        both = {k: np.concatenate([cond[k], uncond[k]]) for k in cond}
        out = self.net.action_logits(obs_to_tensor(both))
        b = len(out) // 2
        return (1.0 + self.cfg_scale) * out[:b] - self.cfg_scale * out[b:]

    def batch(self, obs: dict[str, np.ndarray], goals: np.ndarray) -> np.ndarray:
        logits = self.logits(obs, goals)
        if self.greedy:
            return logits.argmax(-1).numpy()
        return torch.multinomial(torch.softmax(logits, -1), 1, generator=self.gen)[:, 0].numpy()

    def __call__(self, obs: dict[str, np.ndarray], goal: np.ndarray) -> int:
        return int(self.batch({k: np.asarray(v)[None] for k, v in obs.items()}, np.asarray(goal)[None])[0])


# --- prior ----------------------------------------------------------------------------------
def prior_space(env_space: spaces.Dict, state_dim: int = DIRECTION_DIM) -> spaces.Dict:
    return spaces.Dict({"image": env_space["image"],
                        "vector": spaces.Box(0.0, 1.0, (state_dim,), np.float32)})


def prior_obs(obs: dict[str, Any], state_dim: int = DIRECTION_DIM) -> dict[str, Any]:
    """The prior's input (image + the first ``state_dim`` vector entries: BabyAI's direction, Craftax's
    whole vector) from env observations (numpy or torch, any leading dims)."""
    return {"image": obs["image"], "vector": obs["vector"][..., :state_dim]}


class GoalPrior(nn.Module):
    """State → logits over the ``k`` codes (task-agnostic: no mission)."""

    def __init__(self, env_space: spaces.Dict, k: int, hidden: int = 256, image_encoder: str = "cnn",
                 state_dim: int = DIRECTION_DIM):
        super().__init__()
        self.state_dim = int(state_dim)
        self.encoder = DictEncoder(prior_space(env_space, self.state_dim), hidden, image_encoder)
        self.head = nn.Sequential(layer_init(nn.Linear(self.encoder.out_dim, hidden)), nn.ReLU(),
                                  layer_init(nn.Linear(hidden, k), std=0.01))

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        p = prior_obs(obs, self.state_dim)
        return self.head(self.encoder({"image": p["image"].float(), "vector": p["vector"].float()}))


def train_prior(prior: GoalPrior, images: np.ndarray, directions: np.ndarray, targets: np.ndarray, *,
                epochs: int, batch_size: int, lr: float, seed: int, val_fraction: float = 0.05) -> dict[str, Any]:
    """Cross-entropy on ``targets``: (N,) hard labels or (N, k) soft labels."""
    rng = np.random.default_rng(seed)
    n = len(targets)
    val = rng.random(n) < val_fraction
    tr, vids = np.flatnonzero(~val), np.flatnonzero(val)
    opt = torch.optim.Adam(prior.parameters(), lr=lr)
    hard = targets.argmax(1) if targets.ndim == 2 else targets

    def batch(ids):
        return {"image": torch.as_tensor(images[ids], dtype=torch.float32),
                "vector": torch.as_tensor(directions[ids], dtype=torch.float32)}

    history = []
    for epoch in range(epochs):
        prior.train()
        losses = []
        for b in _batches(len(tr), batch_size, rng):
            ids = tr[b]
            loss = F.cross_entropy(prior(batch(ids)), torch.as_tensor(targets[ids]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        rec = {"epoch": epoch, "loss": float(np.mean(losses))}
        if len(vids):
            with torch.no_grad():
                rec["val_acc"] = float((prior(batch(vids)).argmax(-1).numpy() == hard[vids]).mean())
        history.append(rec)
        log.info("prior %s", rec)
    prior.eval()
    return {"history": history, "samples": int(n), "chance_acc": float(np.bincount(hard).max() / max(n, 1))}


# --- KL-to-prior reward ------------------------------------------------------------------------
def categorical_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) = Σ p (log p − log q) per row (≥ 0)."""
    logp, logq = F.log_softmax(p_logits, -1), F.log_softmax(q_logits, -1)
    return (logp.exp() * (logp - logq)).sum(-1)


class KLToPrior(RewardModule):
    """``KL`` between the high-level policy and the goal prior at each high-level state (≥ 0).

    Weighted by ``−kl.coef`` in the learner: reward = r_env − α·KL.  ``policy`` is the high-level
    :class:`ActorCritic` (set by the recipe); it is evaluated at ``compute`` time, before the update,
    i.e. the policy that collected the rollout.
    """

    name = "kl_prior"

    def __init__(self, prior: GoalPrior, direction: str = "policy_prior"):
        if direction not in KL_DIRECTIONS:
            raise ValueError(f"kl direction must be one of {KL_DIRECTIONS}, got {direction!r}")
        self.prior, self.direction = prior.eval(), direction
        self.policy: ActorCritic | None = None
        self._last: dict[str, float] = {}

    @torch.no_grad()
    def kl(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """(B,) KL for a batch of high-level observations."""
        if self.policy is None:
            raise RuntimeError("KLToPrior.policy is not set")
        x = obs_to_tensor(obs)
        pi, prior = self.policy.action_logits(x), self.prior(x)
        kl = categorical_kl(pi, prior) if self.direction == "policy_prior" else categorical_kl(prior, pi)
        return kl.numpy()

    def loss(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean KL over a minibatch, differentiable in the policy (``kl.mode=loss``; the prior is frozen)."""
        if self.policy is None:
            raise RuntimeError("KLToPrior.policy is not set")
        with torch.no_grad():
            prior = self.prior(obs)
        pi = self.policy.action_logits(obs)
        kl = categorical_kl(pi, prior) if self.direction == "policy_prior" else categorical_kl(prior, pi)
        return kl.mean()

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        T, N = batch.rewards.shape
        flat = {k: np.asarray(v).reshape(T * N, *np.asarray(v).shape[2:]) for k, v in batch.obs.items()}
        kl = self.kl(flat).reshape(T, N).astype(np.float32)
        self._last = {"kl_mean": float(kl.mean()), "kl_max": float(kl.max())}
        return kl

    def metrics(self) -> dict[str, float]:
        return dict(self._last)


# --- PPO over options ---------------------------------------------------------------------------
class OptionPPO(PPO):
    """PPO over an :class:`~llmguide.methods.ptgm.options.OptionsWrapper` env; ``global_step`` counts env steps."""

    def _on_step(self, step: Any) -> bool:
        """Each option's extra env steps added to ``global_step`` before the callbacks see the step."""
        self.global_step += sum(int(info.get("option_steps", 1)) for info in step.infos) - len(step.infos)
        return super()._on_step(step)
