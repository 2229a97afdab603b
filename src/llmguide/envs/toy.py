"""Tiny Dict-observation envs for testing and benchmarking the learners (seconds, not hours).

* :class:`DictObs` wraps any Box-observation env (e.g. CartPole) as ``{"vector": obs}``.
* :class:`ContextBandit`: one step; the observation (or the goal, with ``goal_in_obs=False``)
  shows a one-hot target action; reward 1 for that action. Info has ``success``.
* :class:`CueMemory`: two steps; the cue is visible only at the first step and the reward
  comes at the second for repeating it, so a memoryless policy cannot beat 0.5 on average.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv


class DictObs(gym.ObservationWrapper):
    """``obs`` → ``{"vector": obs}`` (float32)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        box = env.observation_space
        self.observation_space = spaces.Dict({"vector": spaces.Box(box.low, box.high, box.shape, np.float32)})

    def observation(self, observation):
        return {"vector": np.asarray(observation, dtype=np.float32)}


class ContextBandit(gym.Env):
    """One-step contextual bandit with ``n`` arms; the context is the rewarded arm."""

    def __init__(self, n: int = 3, goal_in_obs: bool = True):
        self.n, self.goal_in_obs = n, goal_in_obs
        self.observation_space = spaces.Dict({"vector": spaces.Box(0.0, 1.0, (n,), np.float32)})
        self.action_space = spaces.Discrete(n)
        self.goal = np.zeros(n, dtype=np.float32)
        self.target = 0

    def _obs(self):
        return {"vector": self.goal.copy() if self.goal_in_obs else np.full(self.n, 0.5, np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.target = int(self.np_random.integers(self.n))
        self.goal = np.eye(self.n, dtype=np.float32)[self.target]
        return self._obs(), {}

    def step(self, action):
        success = int(action) == self.target
        return self._obs(), float(success), True, False, {"success": success}


class CueMemory(gym.Env):
    """Step 0 shows a cue (one of 2), step 1 shows nothing; reward 1 for repeating the cue at step 1."""

    def __init__(self):
        self.observation_space = spaces.Dict({"vector": spaces.Box(0.0, 1.0, (3,), np.float32)})
        self.action_space = spaces.Discrete(2)
        self.cue, self.t = 0, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.cue, self.t = int(self.np_random.integers(2)), 0
        obs = np.zeros(3, np.float32)
        obs[self.cue] = 1.0
        return {"vector": obs}, {}

    def step(self, action):
        self.t += 1
        if self.t == 1:
            return {"vector": np.array([0, 0, 1], np.float32)}, 0.0, False, False, {}
        success = int(action) == self.cue
        return {"vector": np.array([0, 0, 1], np.float32)}, float(success), True, False, {"success": success}


def vector_env(make: Callable[[], gym.Env], num_envs: int) -> SyncVectorEnv:
    """A SAME_STEP-autoreset sync vector env, the convention of ``llmguide.envs.make_vector_env``."""
    return SyncVectorEnv([make for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)
