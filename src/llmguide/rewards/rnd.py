"""Random Network Distillation (Burda et al. 2019) as a RewardModule.

Reward of a transition = mean squared error between a trained predictor and a fixed random
target network on the *normalised next observation* (per-element running mean/std, clipped to
±5), divided by the running std of the discounted intrinsic return (per env, along time; see
:mod:`llmguide.rewards.normalization` for the CleanRL #360 fix). ``update`` trains the
predictor on a random ``update_proportion`` of the rollout, as in the paper.

:meth:`RND.compute` updates the observation and return statistics, so call it once per rollout
in time order (what the learners do); :meth:`RND.novelty` is the side-effect-free error.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from llmguide.rewards.base import RewardModule, TransitionBatch
from llmguide.rewards.encoders import (
    ObsEncoder,
    as_obs_dict,
    box_spaces,
    finite_rows,
    flatten_leading,
    mlp,
    to_tensors,
)
from llmguide.rewards.normalization import IntrinsicRewardNormalizer, ObservationNormalizer


class RND(RewardModule):
    """Random Network Distillation: novelty = predictor error against a frozen random network."""

    name = "rnd"

    def __init__(self, obs_space: spaces.Space, num_envs: int, feature_dim: int = 128, hidden: int = 256,
                 lr: float = 1e-4, gamma: float = 0.99, update_proportion: float = 0.25, epochs: int = 1,
                 minibatch_size: int = 256, obs_clip: float = 5.0, normalize: bool = True,
                 device: str = "cpu", seed: int = 0):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.update_proportion = update_proportion
        self.epochs = epochs
        self.minibatch_size = minibatch_size
        self.normalize = normalize
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.target = ObsEncoder(obs_space, feature_dim, hidden).to(self.device)
            self.predictor = nn.Sequential(
                ObsEncoder(obs_space, hidden, hidden), nn.ReLU(), mlp(hidden, feature_dim, hidden, layers=1)
            ).to(self.device)
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.predictor.parameters(), lr=lr)
        self.obs_norm = ObservationNormalizer({k: b.shape for k, b in box_spaces(obs_space).items()}, obs_clip)
        self.reward_norm = IntrinsicRewardNormalizer(gamma, num_envs)
        self.torch_rng = torch.Generator().manual_seed(seed)
        self.np_rng = np.random.default_rng(seed)

    # --- reward ------------------------------------------------------------------------
    @torch.no_grad()
    def novelty(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Prediction error for flat observations ``(B, ...)`` under the current statistics."""
        x = self.obs_norm(as_obs_dict(obs))
        n = next(iter(x.values())).shape[0]
        out = np.empty(n, dtype=np.float32)
        for start in range(0, n, 1024):
            part = to_tensors({k: v[start:start + 1024] for k, v in x.items()}, self.device)
            out[start:start + 1024] = self._errors(part).cpu().numpy()
        return out

    def _errors(self, x: dict[str, torch.Tensor]) -> torch.Tensor:
        return (self.predictor(x) - self.target(x)).pow(2).mean(dim=1)

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        next_obs = as_obs_dict(batch.next_obs)
        t, n = batch.rewards.shape
        flat = flatten_leading(next_obs)
        self.obs_norm.update(flat)
        reward = self.novelty(flat).reshape(t, n)
        return self.reward_norm(reward) if self.normalize else reward

    # --- training ----------------------------------------------------------------------
    def update(self, batch: TransitionBatch) -> dict[str, float]:
        x = self.obs_norm(flatten_leading(as_obs_dict(batch.next_obs)))
        ok = finite_rows(x)  # a non-finite observation must not reach the weights
        return {"loss": self._train({k: v[ok] for k, v in x.items()})}

    def _train(self, x: dict[str, np.ndarray]) -> float:
        n = next(iter(x.values())).shape[0]
        losses = []
        for _ in range(self.epochs):
            order = self.np_rng.permutation(n)
            for start in range(0, n, self.minibatch_size):
                idx = order[start:start + self.minibatch_size]
                per_sample = self._errors(to_tensors({k: v[idx] for k, v in x.items()}, self.device))
                mask = (torch.rand(len(idx), generator=self.torch_rng) < self.update_proportion).float()
                loss = (per_sample * mask.to(self.device)).sum() / mask.sum().clamp(min=1.0)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                losses.append(loss.item())
        return float(np.mean(losses)) if losses else 0.0

    # --- checkpoint --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return copy.deepcopy({
            "target": self.target.state_dict(),
            "predictor": self.predictor.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "obs_norm": self.obs_norm.state_dict(),
            "reward_norm": self.reward_norm.state_dict(),
            "torch_rng": self.torch_rng.get_state(),
            "np_rng": self.np_rng.bit_generator.state,
        })

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.target.load_state_dict(state["target"])
        self.predictor.load_state_dict(state["predictor"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.obs_norm.load_state_dict(state["obs_norm"])
        self.reward_norm.load_state_dict(state["reward_norm"])
        self.torch_rng.set_state(state["torch_rng"])
        self.np_rng.bit_generator.state = state["np_rng"]
