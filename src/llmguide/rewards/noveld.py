"""NovelD (Zhang et al. 2021) on top of RND novelty.

Reward of ``s -> s'``: ``max(N(s') - alpha * N(s), 0) * 1[N_e(s') == 1]`` where ``N`` is the RND
prediction error and ``N_e`` the episodic visit count. What is implemented for the episodic
condition: exact state counts by hashing every observation key's bytes, one set per env, reset
at episode end (``dones``), with the episode's first observation counted as visited. This is
exact for symbolic observations (Crafter semantic view, BabyAI grids); on pixels it only
suppresses exact repeats. Turn it off with ``first_visit=False``.

Like :class:`~llmguide.rewards.rnd.RND`, ``compute`` advances state (statistics and the
episodic sets), so call it once per rollout in time order.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import numpy as np
from gymnasium import spaces

from llmguide.rewards.base import TransitionBatch
from llmguide.rewards.encoders import as_obs_dict, flatten_leading
from llmguide.rewards.rnd import RND


def state_key(obs: dict[str, np.ndarray], t: int, n: int) -> bytes:
    """A hash of one observation ``obs[key][t, n]`` over all keys."""
    h = hashlib.blake2b(digest_size=16)
    for key in sorted(obs):
        h.update(np.ascontiguousarray(obs[key][t, n]).tobytes())
    return h.digest()


class NovelD(RND):
    """NovelD: positive novelty difference between s' and s, paid on the first visit in an episode."""

    name = "noveld"

    def __init__(self, obs_space: spaces.Space, num_envs: int, alpha: float = 0.5, first_visit: bool = True,
                 **rnd_kwargs: Any):
        super().__init__(obs_space, num_envs, **rnd_kwargs)
        self.alpha = alpha
        self.first_visit = first_visit
        self.visited: list[set[bytes]] = [set() for _ in range(num_envs)]

    def first_visit_mask(self, batch: TransitionBatch) -> np.ndarray:
        """1 where ``next_obs`` is seen for the first time this episode (updates the episodic sets)."""
        obs, next_obs = as_obs_dict(batch.obs), as_obs_dict(batch.next_obs)
        t_len, n_envs = batch.rewards.shape
        mask = np.zeros((t_len, n_envs), dtype=np.float32)
        for t in range(t_len):
            for n in range(n_envs):
                seen = self.visited[n]
                if not seen:
                    seen.add(state_key(obs, t, n))
                key = state_key(next_obs, t, n)
                if key not in seen:
                    mask[t, n] = 1.0
                    seen.add(key)
                if batch.dones[t, n]:
                    seen.clear()
        return mask

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        t, n = batch.rewards.shape
        obs = flatten_leading(as_obs_dict(batch.obs))
        next_obs = flatten_leading(as_obs_dict(batch.next_obs))
        self.obs_norm.update(next_obs)
        novelty_next = self.novelty(next_obs).reshape(t, n)
        novelty_now = self.novelty(obs).reshape(t, n)
        reward = np.maximum(novelty_next - self.alpha * novelty_now, 0.0)
        if self.first_visit:
            reward = reward * self.first_visit_mask(batch)
        return self.reward_norm(reward) if self.normalize else reward.astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "visited": copy.deepcopy([sorted(s) for s in self.visited])}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.visited = [set(s) for s in state["visited"]]
