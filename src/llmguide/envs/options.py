"""Env wrappers for PTGM: the low-level observation (goal appended) and options of ``L`` steps.

:class:`GoalObservation` turns a BabyAI observation ``{"image", "vector"=[direction(4), mission BoW]}``
into the low-level policy's input ``{"image", "vector"=[direction(4), goal(E), has_goal(1)]}`` — the
mission is dropped (the low level is task-agnostic; the goal replaces it).  With no goal
(``goal=None``) the goal part is zeros and ``has_goal`` 0: the unconditioned policy (BC-finetune).

:class:`OptionsWrapper` makes one action = one option: the frozen low-level ``policy`` conditioned on
``goals[action]`` acts for up to ``steps`` env steps, stopping early when the episode ends; the
reward is the **sum** of the env rewards, and ``info["option_steps"]`` counts the env steps taken (a
learner over options counts those, so budgets compare with flat agents).  The info is the last
env step's (``success``, ``episode``, ``caption``...).  :class:`OptionsVectorEnv` is the same over
``N`` envs with one batched low-level forward pass per env step (SAME_STEP autoreset, as
:func:`llmguide.envs.make_vector_env`).
"""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import concatenate

DIRECTION_DIM = 4  # BabyAI's vector starts with the one-hot direction

LowLevelPolicy = Callable[[dict[str, np.ndarray], np.ndarray], int]  # (env obs, goal) -> action
BatchPolicy = Callable[[dict[str, np.ndarray], np.ndarray], np.ndarray]  # (B env obs, (B, E) goals) -> (B,) actions


def lowlevel_space(env_space: gym.spaces.Dict, goal_dim: int) -> gym.spaces.Dict:
    """Observation space of the low-level policy (see module docstring)."""
    vector = gym.spaces.Box(-np.inf, np.inf, (DIRECTION_DIM + goal_dim + 1,), np.float32)
    return gym.spaces.Dict({"image": env_space["image"], "vector": vector})


def lowlevel_obs(obs: dict[str, np.ndarray], goal: np.ndarray | None, goal_dim: int) -> dict[str, np.ndarray]:
    """Low-level input for one observation or a batch (leading dims kept); ``goal`` None = unconditioned."""
    vec = np.asarray(obs["vector"], dtype=np.float32)
    direction = vec[..., :DIRECTION_DIM]
    lead = direction.shape[:-1]
    if goal is None:
        g, flag = np.zeros((*lead, goal_dim), np.float32), np.zeros((*lead, 1), np.float32)
    else:
        g = np.broadcast_to(np.asarray(goal, np.float32), (*lead, goal_dim))
        flag = np.ones((*lead, 1), np.float32)
    return {"image": np.asarray(obs["image"], dtype=np.float32), "vector": np.concatenate([direction, g, flag], -1)}


class GoalObservation(gym.ObservationWrapper):
    """The env seen through the low-level policy's input, with a fixed goal (None: unconditioned)."""

    def __init__(self, env: gym.Env, goal_dim: int, goal: np.ndarray | None = None):
        super().__init__(env)
        self.goal_dim, self.goal = int(goal_dim), goal
        self.observation_space = lowlevel_space(env.observation_space, self.goal_dim)

    def observation(self, observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return lowlevel_obs(observation, self.goal, self.goal_dim)


class OptionsWrapper(gym.Wrapper):
    """``Discrete(len(goals))`` actions, each running ``policy`` toward that goal for ``steps`` env steps."""

    def __init__(self, env: gym.Env, policy: LowLevelPolicy, goals: np.ndarray, steps: int):
        super().__init__(env)
        if steps < 1:
            raise ValueError(f"option length must be >= 1, got {steps}")
        self.policy, self.goals, self.steps = policy, np.asarray(goals, np.float32), int(steps)
        self.action_space = gym.spaces.Discrete(len(self.goals))
        self._obs: dict[str, np.ndarray] | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._obs, info = self.env.reset(seed=seed, options=options)
        return self._obs, info

    def step(self, action: int):
        goal = self.goals[int(action)]
        total, n = 0.0, 0
        terminated = truncated = False
        info: dict[str, Any] = {}
        obs = self._obs
        while n < self.steps and not (terminated or truncated):
            obs, reward, terminated, truncated, info = self.env.step(int(self.policy(obs, goal)))
            total += float(reward)
            n += 1
        self._obs = obs
        return obs, total, terminated, truncated, {**info, "option_steps": n, "option": int(action)}


class OptionsVectorEnv(SyncVectorEnv):
    """``N`` envs whose actions are options (see :class:`OptionsWrapper`), the low level batched over the
    envs still inside their option; SAME_STEP autoreset (``final_obs`` / ``final_info`` of finished envs)."""

    def __init__(self, env_fns, policy: BatchPolicy, goals: np.ndarray, steps: int):
        super().__init__(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
        if steps < 1:
            raise ValueError(f"option length must be >= 1, got {steps}")
        self.policy, self.goals, self.steps = policy, np.asarray(goals, np.float32), int(steps)
        self.single_action_space = gym.spaces.Discrete(len(self.goals))
        self.action_space = gym.spaces.MultiDiscrete(np.full(self.num_envs, len(self.goals)))

    def step(self, actions):
        actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)
        n = self.num_envs
        self._rewards = np.zeros(n, np.float64)
        self._terminations, self._truncations = np.zeros(n, bool), np.zeros(n, bool)
        count, env_infos = np.zeros(n, np.int64), [{} for _ in range(n)]
        active = np.ones(n, bool)
        for _ in range(self.steps):
            idx = np.flatnonzero(active)
            if not len(idx):
                break
            batch = {k: np.stack([self._env_obs[i][k] for i in idx]) for k in self._env_obs[idx[0]]}
            low = np.asarray(self.policy(batch, self.goals[actions[idx]]))
            for j, i in enumerate(idx):
                obs, reward, term, trunc, info = self.envs[i].step(int(low[j]))
                self._env_obs[i], env_infos[i] = obs, info
                self._rewards[i] += float(reward)
                count[i] += 1
                if term or trunc:
                    active[i] = False
                    self._terminations[i], self._truncations[i] = bool(term), bool(trunc)
        infos: dict[str, Any] = {}
        for i in range(n):
            info = {**env_infos[i], "option_steps": int(count[i]), "option": int(actions[i])}
            if self._terminations[i] or self._truncations[i]:
                infos = self._add_info(infos, {"final_obs": self._env_obs[i], "final_info": info}, i)
                self._env_obs[i], info = self.envs[i].reset()
            infos = self._add_info(infos, info, i)
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        return (deepcopy(self._observations) if self.copy else self._observations, np.copy(self._rewards),
                np.copy(self._terminations), np.copy(self._truncations), infos)
