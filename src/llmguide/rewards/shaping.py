"""Potential-based reward shaping (Ng et al. 1999): ``F_t = gamma * (1 - terminated_t) * Phi(s_{t+1}) - Phi(s_t)``.

Indexing on a ``(T, N)`` rollout: row ``t`` is the transition ``s_t -> s_{t+1}``. ``phi_next[t]``
is the potential of the *true* next observation (the final observation at an episode end, not the
reset observation that a vector env returns). It is masked out only where the episode
*terminated* (the terminal potential counts as 0); at a truncation (time limit) ``Phi(s')`` is
kept, because the state still has a future and the learner bootstraps there. This avoids the BK
reference code's one-step lag and missing done-mask (docs/bk.md, "Differences from the reference code").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from llmguide.rewards.base import RewardModule, TransitionBatch

Potential = Callable[[Any], np.ndarray]


def potential_shaping(phi_s: np.ndarray, phi_next: np.ndarray, terminated: np.ndarray, gamma: float) -> np.ndarray:
    """``F = gamma * (1 - terminated) * Phi(s') - Phi(s)`` elementwise on ``(T, N)`` arrays."""
    phi_s, phi_next = np.asarray(phi_s, dtype=np.float64), np.asarray(phi_next, dtype=np.float64)
    terminated = np.asarray(terminated, dtype=np.float64)
    if not (phi_s.shape == phi_next.shape == terminated.shape):
        raise ValueError(f"shape mismatch: phi_s {phi_s.shape}, phi_next {phi_next.shape}, "
                         f"terminated {terminated.shape}")
    return (gamma * (1.0 - terminated) * phi_next - phi_s).astype(np.float32)


class PotentialShaping(RewardModule):
    """Shaping reward from any potential ``Phi(obs) -> (T, N)`` over ``(T, N, ...)`` observations.

    ``gamma`` must be the learner's discount, or the policy-invariance guarantee does not hold.
    """

    name = "shaping"

    def __init__(self, potential: Potential, gamma: float):
        self.potential = potential
        self.gamma = float(gamma)

    def _phi(self, obs: Any, shape: tuple[int, ...]) -> np.ndarray:
        phi = np.asarray(self.potential(obs), dtype=np.float64)
        if phi.shape != shape:
            raise ValueError(f"potential returned shape {phi.shape}, expected {shape} (T, N)")
        if not np.all(np.isfinite(phi)):
            raise ValueError("potential returned non-finite values")
        return phi

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        shape = np.asarray(batch.rewards).shape
        return potential_shaping(self._phi(batch.obs, shape), self._phi(batch.next_obs, shape), batch.terminated,
                                 self.gamma)
