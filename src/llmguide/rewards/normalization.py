"""Running statistics and reward / observation normalisers for intrinsic rewards.

The RND recipe (Burda et al. 2019): divide each intrinsic reward by the running standard
deviation of the *discounted intrinsic return*, where the return is a forward filter
``R_t = gamma * R_{t-1} + r_t`` run **per environment, along time**. CleanRL's
``ppo_rnd_envpool.py`` iterated the filter over the transposed rollout, i.e. across
environments instead of across time steps (CleanRL issue #360). Here
:meth:`RewardForwardFilter.filter` takes a ``(T, N)`` array and walks the time axis; a test
checks it against a hand computation.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


class RunningMeanStd:
    """Running mean and variance over the leading axis (Chan et al. parallel update)."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4):
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = float(epsilon)

    def update(self, x: np.ndarray) -> None:
        """Fold a batch ``x`` of shape ``(B, *shape)`` into the statistics."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape[0] == 0:
            return
        self.update_from_moments(x.mean(axis=0), x.var(axis=0), x.shape[0])

    def update_from_moments(self, batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: int) -> None:
        delta = batch_mean - self.mean
        total = self.count + batch_count
        new_mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.mean, self.var, self.count = new_mean, m2 / total, total

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var)

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean = np.array(state["mean"], dtype=np.float64)
        self.var = np.array(state["var"], dtype=np.float64)
        self.count = float(state["count"])


class RewardForwardFilter:
    """Discounted sum of past rewards per environment: ``R_t = gamma * R_{t-1} + r_t``.

    The filter state carries over between rollouts (the intrinsic return is non-episodic,
    as in RND); pass ``dones`` to :meth:`filter` to reset it at episode ends instead.
    """

    def __init__(self, gamma: float, num_envs: int):
        self.gamma = float(gamma)
        self.returns = np.zeros(num_envs, dtype=np.float64)

    def update(self, rewards_t: np.ndarray) -> np.ndarray:
        """Advance one time step with the rewards of all envs, shape ``(N,)``."""
        self.returns = self.returns * self.gamma + np.asarray(rewards_t, dtype=np.float64)
        return self.returns.copy()

    def filter(self, rewards: np.ndarray, dones: np.ndarray | None = None) -> np.ndarray:
        """Run along the time axis of a ``(T, N)`` rollout; return the ``(T, N)`` returns."""
        rewards = np.asarray(rewards, dtype=np.float64)
        if rewards.ndim != 2 or rewards.shape[1] != self.returns.shape[0]:
            raise ValueError(f"expected rewards of shape (T, {self.returns.shape[0]}), got {rewards.shape}")
        out = np.empty_like(rewards)
        for t in range(rewards.shape[0]):  # time axis: the fix for CleanRL #360
            out[t] = self.update(rewards[t])
            if dones is not None:
                self.returns = self.returns * (1.0 - np.asarray(dones[t], dtype=np.float64))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "returns": self.returns.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.gamma = float(state["gamma"])
        self.returns = np.array(state["returns"], dtype=np.float64)


class IntrinsicRewardNormalizer:
    """Divide intrinsic rewards by the running std of their discounted returns (RND-style).

    :meth:`__call__` advances the return filter over the rollout (call it once per rollout,
    in time order), folds the ``T*N`` returns into a :class:`RunningMeanStd`, then divides.
    Non-finite rewards become 0 before they can poison the statistics; they are counted in
    ``nonfinite`` and logged.
    """

    def __init__(self, gamma: float, num_envs: int, epsilon: float = 1e-8):
        self.filter = RewardForwardFilter(gamma, num_envs)
        self.return_rms = RunningMeanStd()
        self.epsilon = epsilon
        self.nonfinite = 0

    def __call__(self, rewards: np.ndarray, update: bool = True) -> np.ndarray:
        rewards = np.asarray(rewards, dtype=np.float64)
        bad = ~np.isfinite(rewards)
        if bad.any():
            self.nonfinite += int(bad.sum())
            log.warning("%d non-finite intrinsic rewards set to 0 (total %d)", int(bad.sum()), self.nonfinite)
            rewards = np.where(bad, 0.0, rewards)
        if update:
            returns = self.filter.filter(rewards)
            self.return_rms.update(returns.reshape(-1))
        return (rewards / (self.return_rms.std + self.epsilon)).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"filter": self.filter.state_dict(), "return_rms": self.return_rms.state_dict(),
                "nonfinite": self.nonfinite}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.filter.load_state_dict(state["filter"])
        self.return_rms.load_state_dict(state["return_rms"])
        self.nonfinite = int(state.get("nonfinite", 0))


class ObservationNormalizer:
    """Per-element running normalisation of each observation key, clipped to ``±clip`` (RND).

    Observations with non-finite values are left out of the statistics (counted in ``skipped``).
    """

    def __init__(self, shapes: dict[str, tuple[int, ...]], clip: float = 5.0):
        self.rms = {key: RunningMeanStd(shape) for key, shape in shapes.items()}
        self.clip = float(clip)
        self.skipped = 0

    def update(self, obs: dict[str, np.ndarray]) -> None:
        """``obs[key]`` has shape ``(B, *shape)``."""
        arrays = {key: np.asarray(obs[key], dtype=np.float64) for key in self.rms}
        n = len(next(iter(arrays.values())))
        ok = np.ones(n, dtype=bool)
        for x in arrays.values():
            ok &= np.isfinite(x.reshape(n, -1)).all(axis=1)
        if not ok.all():
            self.skipped += int((~ok).sum())
            log.warning("%d observations with non-finite values left out of the RND statistics", int((~ok).sum()))
        for key, rms in self.rms.items():
            rms.update(arrays[key][ok])

    def __call__(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for key, rms in self.rms.items():
            x = (np.asarray(obs[key], dtype=np.float64) - rms.mean) / (rms.std + 1e-8)
            out[key] = np.clip(x, -self.clip, self.clip).astype(np.float32)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"rms": {key: rms.state_dict() for key, rms in self.rms.items()}, "skipped": self.skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, rms in self.rms.items():
            rms.load_state_dict(state["rms"][key])
        self.skipped = int(state.get("skipped", 0))
