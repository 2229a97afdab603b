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
:func:`llmguide.envs.make_vector_env`): all envs start their options together and the envs that finish
early wait (each sub-env is stepped on its own).

:class:`AsyncOptionsVectorEnv` is for a *batched* env whose envs all step in one call (Craftax): the
envs cannot wait, so each runs its own option and ends it at its own time (``steps`` env steps or its
episode's end); the learner decides only for the envs at decision points
(:class:`llmguide.methods.ptgm.smdp.AsyncOptionPPO`).

``state_dim``: the leading entries of the env's ``vector`` the low level keeps — BabyAI's direction (4;
the mission BoW after it is dropped) by default, the whole vector on Craftax (inventory, facing,
sleeping, daylight: no mission in it).
"""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import concatenate

DIRECTION_DIM = 4  # BabyAI's vector starts with the one-hot direction

LowLevelPolicy = Callable[[dict[str, np.ndarray], np.ndarray], int]  # (env obs, goal) -> action
BatchPolicy = Callable[[dict[str, np.ndarray], np.ndarray], np.ndarray]  # (B env obs, (B, E) goals) -> (B,) actions


def lowlevel_space(env_space: gym.spaces.Dict, goal_dim: int, state_dim: int = DIRECTION_DIM) -> gym.spaces.Dict:
    """Observation space of the low-level policy (see module docstring); ``state_dim``: how many leading
    entries of the env's ``vector`` it keeps (BabyAI: the direction, 4; Craftax: the whole vector)."""
    vector = gym.spaces.Box(-np.inf, np.inf, (state_dim + goal_dim + 1,), np.float32)
    return gym.spaces.Dict({"image": env_space["image"], "vector": vector})


def lowlevel_obs(obs: dict[str, np.ndarray], goal: np.ndarray | None, goal_dim: int,
                 state_dim: int = DIRECTION_DIM) -> dict[str, np.ndarray]:
    """Low-level input for one observation or a batch (leading dims kept); ``goal`` None = unconditioned."""
    vec = np.asarray(obs["vector"], dtype=np.float32)
    direction = vec[..., :state_dim]
    lead = direction.shape[:-1]
    if goal is None:
        g, flag = np.zeros((*lead, goal_dim), np.float32), np.zeros((*lead, 1), np.float32)
    else:
        g = np.broadcast_to(np.asarray(goal, np.float32), (*lead, goal_dim))
        flag = np.ones((*lead, 1), np.float32)
    return {"image": np.asarray(obs["image"], dtype=np.float32), "vector": np.concatenate([direction, g, flag], -1)}


class GoalObservation(gym.ObservationWrapper):
    """The env seen through the low-level policy's input, with a fixed goal (None: unconditioned)."""

    def __init__(self, env: gym.Env, goal_dim: int, goal: np.ndarray | None = None, state_dim: int = DIRECTION_DIM):
        super().__init__(env)
        self.goal_dim, self.goal, self.state_dim = int(goal_dim), goal, int(state_dim)
        self.observation_space = lowlevel_space(env.observation_space, self.goal_dim, self.state_dim)

    def observation(self, observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return lowlevel_obs(observation, self.goal, self.goal_dim, self.state_dim)


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


# --- options on a batched env whose envs all step together (e.g. CraftaxVectorEnv) -----------------
class OptionStep(NamedTuple):
    """What one env step of :class:`AsyncOptionsVectorEnv` returns, (N,) arrays.

    ``obs``/``rewards``/``terminated``/``truncated``/``infos`` are the batched env's own step (SAME_STEP
    autoreset: ``obs`` of a finished env is its next episode's first).  ``ended[i]``: env ``i``'s option
    ended at this step (``steps`` env steps, or its episode ended), so env ``i`` is at a decision point;
    for those envs ``option``, ``option_return`` (the **sum** of the option's env rewards) and
    ``option_steps`` (τ, its env steps) describe the finished option.  Elsewhere they are the running values.
    """

    obs: dict[str, np.ndarray]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: dict[str, Any]
    ended: np.ndarray
    option: np.ndarray
    option_return: np.ndarray
    option_steps: np.ndarray


class AsyncOptionsVectorEnv:
    """Options over a batched vector env whose ``N`` envs step together (one jitted call for all, as
    :class:`~llmguide.envs.craftax.env.CraftaxVectorEnv`), each env running its **own** option.

    The concept is :class:`OptionsWrapper`'s (an option = the frozen low level toward ``goals[code]`` for
    ``steps`` env steps, ending early when the episode ends; its reward is the sum of the env rewards), but
    the envs cannot wait for each other: an env whose episode ends mid-option is reset by the batched env
    and must keep acting.  So options are per env and asynchronous: every :meth:`step` is **one** env step
    of all ``N`` envs with one batched low-level pass (each env conditioned on its own option's goal);
    ``deciding[i]`` marks the envs at a decision point (after :meth:`reset`, or whose option ended at the
    previous step), and only their entries of ``actions`` are read (the new option starts there; the
    other entries are ignored).  A learner over options therefore sees only the envs at decision points
    (:class:`~llmguide.methods.ptgm.smdp.AsyncOptionPPO`): one SMDP transition per finished option.
    """

    def __init__(self, env: Any, policy: BatchPolicy, goals: np.ndarray, steps: int):
        if steps < 1:
            raise ValueError(f"option length must be >= 1, got {steps}")
        self.env, self.num_envs = env, int(env.num_envs)
        self.policy, self.goals, self.steps = policy, np.asarray(goals, np.float32), int(steps)
        self.single_observation_space = env.single_observation_space
        self.single_action_space = gym.spaces.Discrete(len(self.goals))
        self.action_space = gym.spaces.MultiDiscrete(np.full(self.num_envs, len(self.goals)))
        n = self.num_envs
        self.deciding = np.ones(n, bool)
        self._option = np.zeros(n, np.int64)
        self._count = np.zeros(n, np.int64)
        self._return = np.zeros(n, np.float64)
        self._obs: dict[str, np.ndarray] | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._obs, infos = self.env.reset(seed=seed, options=options)
        self.deciding[:] = True
        self._count[:] = 0
        self._return[:] = 0.0
        return self._obs, infos

    def step(self, actions) -> OptionStep:
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        d = self.deciding
        if d.any():
            new = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)[d]
            if ((new < 0) | (new >= len(self.goals))).any():
                raise ValueError(f"option codes must be in [0, {len(self.goals)}), got {new.tolist()}")
            self._option[d], self._count[d], self._return[d] = new, 0, 0.0
        low = np.asarray(self.policy(self._obs, self.goals[self._option])).reshape(self.num_envs)
        obs, rewards, terminated, truncated, infos = self.env.step(low)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        self._return += np.asarray(rewards, np.float64)
        self._count += 1
        ended = terminated | truncated | (self._count >= self.steps)
        self.deciding = ended.copy()
        self._obs = obs
        return OptionStep(obs, np.asarray(rewards), terminated, truncated, infos, ended.copy(), self._option.copy(),
                          self._return.copy(), self._count.copy())

    def close(self, **kwargs: Any) -> None:
        self.env.close(**kwargs)


class GoalObservationVector(gym.vector.VectorWrapper):
    """:class:`GoalObservation` for a batched vector env (BC-finetune on Craftax): every env's observation,
    and ``final_obs`` of finished envs, become the low level's input with a fixed goal (None: unconditioned)."""

    def __init__(self, env: Any, goal_dim: int, state_dim: int = DIRECTION_DIM, goal: np.ndarray | None = None):
        super().__init__(env)
        self.goal_dim, self.state_dim, self.goal = int(goal_dim), int(state_dim), goal
        self.single_observation_space = lowlevel_space(env.single_observation_space, self.goal_dim, self.state_dim)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)

    def _obs(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return lowlevel_obs(obs, self.goal, self.goal_dim, self.state_dim)

    def reset(self, *, seed: Any = None, options: dict | None = None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._obs(obs), infos

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        if "final_obs" in infos:
            final = np.empty(len(infos["final_obs"]), dtype=object)
            for i, o in enumerate(infos["final_obs"]):
                final[i] = None if o is None else self._obs(o)
            infos = {**infos, "final_obs": final}
        return self._obs(obs), rewards, terminated, truncated, infos
