"""Intrinsic Curiosity Module (Pathak et al. 2017) as a RewardModule.

A feature encoder ``phi`` (output layer-normalised, cf. the batch-normalised features of
Burda et al.'s large-scale curiosity study) is trained by an inverse model (predict ``a`` from ``phi(s), phi(s')``);
a forward model predicts ``phi(s')`` from ``phi(s)`` and ``a``. Loss
``(1 - beta) * L_inverse + beta * L_forward`` with the forward target ``phi(s')`` detached (so the
encoder cannot shrink the forward error by collapsing; its features come from the inverse task).
Reward = ``0.5 * ||f(phi(s), a) - phi(s')||^2``, optionally divided by the running std of the
discounted intrinsic return (as RND). Discrete actions use cross-entropy, Box actions MSE.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from llmguide.rewards.base import RewardModule, TransitionBatch
from llmguide.rewards.encoders import ObsEncoder, as_obs_dict, finite_rows, flatten_leading, mlp, to_tensors
from llmguide.rewards.normalization import IntrinsicRewardNormalizer


class ICM(RewardModule):
    """Curiosity: forward-model prediction error in a feature space learned by an inverse model."""

    name = "icm"

    def __init__(self, obs_space: spaces.Space, action_space: spaces.Space, num_envs: int,
                 feature_dim: int = 128, hidden: int = 256, lr: float = 1e-4, beta: float = 0.2,
                 gamma: float = 0.99, epochs: int = 1, minibatch_size: int = 256, normalize: bool = True,
                 device: str = "cpu", seed: int = 0):
        if isinstance(action_space, spaces.Discrete):
            self.discrete, self.action_dim = True, int(action_space.n)
        elif isinstance(action_space, spaces.Box):
            self.discrete, self.action_dim = False, int(np.prod(action_space.shape))
        else:
            raise ValueError(f"ICM needs a Discrete or Box action space, got {action_space}")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.beta = beta
        self.epochs = epochs
        self.minibatch_size = minibatch_size
        self.normalize = normalize
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.encoder = ObsEncoder(obs_space, feature_dim, hidden).to(self.device)
            self.inverse_model = mlp(2 * feature_dim, self.action_dim, hidden, layers=1).to(self.device)
            self.forward_model = mlp(feature_dim + self.action_dim, feature_dim, hidden, layers=1).to(self.device)
        params = [*self.encoder.parameters(), *self.inverse_model.parameters(), *self.forward_model.parameters()]
        self.optimizer = torch.optim.Adam(params, lr=lr)
        self.reward_norm = IntrinsicRewardNormalizer(gamma, num_envs)
        self.np_rng = np.random.default_rng(seed)

    def _actions(self, actions: np.ndarray) -> torch.Tensor:
        a = torch.as_tensor(np.asarray(actions), device=self.device)
        if self.discrete:
            return F.one_hot(a.long().reshape(-1), self.action_dim).float()
        return a.float().reshape(len(a), -1)

    def _losses(self, obs: dict[str, torch.Tensor], actions: np.ndarray,
                next_obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample forward error (the reward) and the mean inverse loss."""
        phi, phi_next = self.features(obs), self.features(next_obs)
        a = self._actions(actions)
        pred_next = self.forward_model(torch.cat([phi, a], dim=1))
        forward_err = 0.5 * (pred_next - phi_next.detach()).pow(2).sum(dim=1)
        logits = self.inverse_model(torch.cat([phi, phi_next], dim=1))
        if self.discrete:
            inverse = F.cross_entropy(logits, a.argmax(dim=1))
        else:
            inverse = F.mse_loss(logits, a)
        return forward_err, inverse

    def features(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Encoder output, layer-normalised (no affine) so the feature scale cannot blow up."""
        phi = self.encoder(obs)
        return F.layer_norm(phi, phi.shape[-1:])

    @torch.no_grad()
    def curiosity(self, obs: dict[str, np.ndarray], actions: np.ndarray,
                  next_obs: dict[str, np.ndarray]) -> np.ndarray:
        """Forward prediction error for flat ``(B, ...)`` transitions (no side effects)."""
        n = len(actions)
        out = np.empty(n, dtype=np.float32)
        for s in range(0, n, 1024):
            sl = slice(s, s + 1024)
            err, _ = self._losses(to_tensors({k: v[sl] for k, v in obs.items()}, self.device), actions[sl],
                                  to_tensors({k: v[sl] for k, v in next_obs.items()}, self.device))
            out[sl] = err.cpu().numpy()
        return out

    def _flat(self, batch: TransitionBatch) -> tuple[dict, np.ndarray, dict]:
        t, n = batch.rewards.shape
        actions = np.asarray(batch.actions).reshape(t * n, *np.asarray(batch.actions).shape[2:])
        return flatten_leading(as_obs_dict(batch.obs)), actions, flatten_leading(as_obs_dict(batch.next_obs))

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        reward = self.curiosity(*self._flat(batch)).reshape(batch.rewards.shape)
        return self.reward_norm(reward) if self.normalize else reward

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        obs, actions, next_obs = self._flat(batch)
        ok = finite_rows(obs, next_obs)  # a non-finite observation must not reach the weights
        obs, next_obs = {k: v[ok] for k, v in obs.items()}, {k: v[ok] for k, v in next_obs.items()}
        actions = actions[ok]
        fwd_losses, inv_losses = [], []
        for _ in range(self.epochs):
            order = self.np_rng.permutation(len(actions))
            for start in range(0, len(actions), self.minibatch_size):
                idx = order[start:start + self.minibatch_size]
                fwd, inv = self._losses(to_tensors({k: v[idx] for k, v in obs.items()}, self.device), actions[idx],
                                        to_tensors({k: v[idx] for k, v in next_obs.items()}, self.device))
                loss = (1 - self.beta) * inv + self.beta * fwd.mean()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                fwd_losses.append(fwd.mean().item())
                inv_losses.append(inv.item())
        if not fwd_losses:
            return {}
        return {"forward_loss": float(np.mean(fwd_losses)), "inverse_loss": float(np.mean(inv_losses))}

    def state_dict(self) -> dict[str, Any]:
        return copy.deepcopy({
            "encoder": self.encoder.state_dict(),
            "inverse_model": self.inverse_model.state_dict(),
            "forward_model": self.forward_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "reward_norm": self.reward_norm.state_dict(),
            "np_rng": self.np_rng.bit_generator.state,
        })

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.encoder.load_state_dict(state["encoder"])
        self.inverse_model.load_state_dict(state["inverse_model"])
        self.forward_model.load_state_dict(state["forward_model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.reward_norm.load_state_dict(state["reward_norm"])
        self.np_rng.bit_generator.state = state["np_rng"]
