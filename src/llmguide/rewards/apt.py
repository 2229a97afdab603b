"""APT (Liu & Abbeel 2021): particle-based entropy reward with k-nearest-neighbour distances.

Representation: the ICM encoder (trained by :class:`~llmguide.rewards.icm.ICM`'s inverse and
forward losses in ``update``), as in ELLM's APT baseline; ``representation="random"`` keeps a
frozen random encoder instead (RE3-style) and skips training.

Particles: the current rollout plus a FIFO memory of the embeddings of the last
``memory_size`` next-observations (embedded when they were inserted, so with a trained encoder
the memory is short and drifts slowly). Reward of ``s'``: ``log(1 + d_k(s') / mean(d_k))``, where
``d_k`` is the mean distance to the ``k`` nearest other particles and ``mean(d_k)`` its running
mean (the URLB normalisation); optionally divided further by the return std (``normalize``).
``compute`` inserts the rollout into the memory, so call it once per rollout.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from llmguide.rewards.base import TransitionBatch
from llmguide.rewards.encoders import as_obs_dict, finite_rows, flatten_leading, to_tensors
from llmguide.rewards.icm import ICM
from llmguide.rewards.normalization import RunningMeanStd


class APT(ICM):
    """Particle-entropy novelty: kNN distance of s' to recently visited states in a feature space."""

    name = "apt"

    def __init__(self, obs_space: spaces.Space, action_space: spaces.Space, num_envs: int, k: int = 12,
                 memory_size: int = 2048, representation: str = "icm", normalize: bool = False,
                 **icm_kwargs: Any):
        if representation not in ("icm", "random"):
            raise ValueError(f"APT representation must be 'icm' or 'random', got {representation!r}")
        super().__init__(obs_space, action_space, num_envs, normalize=normalize, **icm_kwargs)
        self.k = k
        self.representation = representation
        self.memory = torch.zeros(memory_size, self.encoder.out_dim, device=self.device)
        self.memory_count = 0
        self.memory_pos = 0
        self.distance_rms = RunningMeanStd()

    @torch.no_grad()
    def embed(self, obs: dict[str, np.ndarray]) -> torch.Tensor:
        """Features of flat observations ``(B, ...)``."""
        n = next(iter(obs.values())).shape[0]
        parts = [self.features(to_tensors({k: v[s:s + 1024] for k, v in obs.items()}, self.device))
                 for s in range(0, n, 1024)]
        return torch.cat(parts) if parts else torch.zeros(0, self.encoder.out_dim, device=self.device)

    @torch.no_grad()
    def knn_distance(self, feats: torch.Tensor) -> np.ndarray:
        """Mean distance of each feature to its k nearest particles (memory + batch, not itself)."""
        particles = torch.cat([self.memory[: self.memory_count], feats])
        dist = torch.cdist(feats, particles)
        own = self.memory_count + torch.arange(len(feats), device=self.device)
        dist[torch.arange(len(feats), device=self.device), own] = float("inf")
        k = min(self.k, len(particles) - 1)
        if k < 1:
            return np.zeros(len(feats), dtype=np.float32)
        return dist.topk(k, dim=1, largest=False).values.mean(dim=1).cpu().numpy()

    def _remember(self, feats: torch.Tensor) -> None:
        size = len(self.memory)
        feats = feats[-size:]
        slots = (self.memory_pos + torch.arange(len(feats), device=self.device)) % size
        self.memory[slots] = feats
        self.memory_pos = (self.memory_pos + len(feats)) % size
        self.memory_count = min(self.memory_count + len(feats), size)

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        next_obs = flatten_leading(as_obs_dict(batch.next_obs))
        ok = finite_rows(next_obs)  # non-finite observations get NaN (counted downstream), not particles
        feats = self.embed({k: v[ok] for k, v in next_obs.items()})
        dist = self.knn_distance(feats)
        self.distance_rms.update(dist)
        reward = np.full(len(ok), np.nan, dtype=np.float32)
        reward[ok] = np.log1p(dist / (self.distance_rms.mean + 1e-8))
        self._remember(feats)
        reward = reward.reshape(batch.rewards.shape)
        return self.reward_norm(reward) if self.normalize else reward

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        if self.representation == "random":
            return {}
        return super().update(batch)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "memory": self.memory.clone(), "memory_count": self.memory_count,
                "memory_pos": self.memory_pos, "distance_rms": self.distance_rms.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.memory = state["memory"].clone().to(self.device)
        self.memory_count = int(state["memory_count"])
        self.memory_pos = int(state["memory_pos"])
        self.distance_rms.load_state_dict(state["distance_rms"])
