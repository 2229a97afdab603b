"""ELLM around a vector env: suggestions per env, the goal reward, and the goal observation.

:class:`ELLMVecWrapper` is what a learner (PPO or DQN) sees.  Each step it

1. remembers the goals suggested for every env's current state (the state *before* the action),
2. steps the wrapped env and splits the infos per env (``llmguide.envs.split_infos``),
3. pays :class:`~llmguide.rewards.ellm.ELLMReward` on the transition, writing
   ``info["ellm_goals"]`` and ``info["ellm_reward"]`` into each transition's info,
4. shows the new states to the :class:`~llmguide.rewards.ellm.GoalSuggester` (which asks the LM,
   asynchronously, only when the state signature changed) and polls finished answers,
5. adds the key ``goal`` (one goal embedding per env) to the observation dict.

The training reward it returns is ``extrinsic_coef * r_env + intrinsic_coef * r_ellm``, so any
learner trains on it unchanged; ELLM's reward therefore needs no reward module in the learner.

Goal conditioning (one goal at a time, not the concatenated list of suggestions): each env keeps
a current goal chosen among its suggestions not yet achieved this episode ("first": the top
ranked one; "random": uniformly, from a seeded generator).  It is re-chosen when it is achieved,
when it disappears from the suggestions, or at an episode start; the observation carries its
sentence embedding, or zeros when there is none.  A fixed goal (``fixed_goal``) is used for
single-task fine-tuning.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from llmguide.rewards.base import TransitionBatch
from llmguide.rewards.ellm import ELLMReward, GoalMatcher, GoalSuggester


def _per_env(infos: dict, i: int) -> dict:
    """Env ``i``'s entries of an aggregated vector-env info dict (top level only)."""
    out = {}
    for key, value in infos.items():
        if key.startswith("_") or key in ("final_info", "final_obs"):
            continue
        mask = infos.get(f"_{key}")
        if mask is not None and not bool(np.asarray(mask)[i]):
            continue
        if isinstance(value, dict):
            out[key] = _per_env(value, i)
        else:
            try:
                out[key] = value[i]
            except (TypeError, IndexError, KeyError):
                continue
    return out


class ELLMVecWrapper(gym.vector.VectorWrapper):
    """Adds ELLM's goal reward and a per-env ``goal`` embedding to a Dict-observation vector env."""

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        suggester: GoalSuggester,
        reward: ELLMReward,
        goal_embedder: GoalMatcher | Any,
        extrinsic_coef: float = 0.0,
        intrinsic_coef: float = 1.0,
        goal_conditioned: bool = True,
        goal_choice: str = "random",
        fixed_goal: str | None = None,
        seed: int = 0,
    ):
        super().__init__(env)
        if goal_choice not in ("random", "first"):
            raise ValueError(f"goal_choice must be 'random' or 'first', got {goal_choice!r}")
        self.suggester = suggester
        self.reward_module = reward
        self.embedder = goal_embedder if isinstance(goal_embedder, GoalMatcher) else GoalMatcher(goal_embedder)
        self.extrinsic_coef = float(extrinsic_coef)
        self.intrinsic_coef = float(intrinsic_coef)
        self.goal_conditioned = goal_conditioned
        self.goal_choice = goal_choice
        self.fixed_goal = fixed_goal
        self.rng = np.random.default_rng(seed)
        self.current_goal: list[str | None] = [None] * self.num_envs
        self.dim = int(self.embedder.embed(["collect wood"]).shape[1]) if goal_conditioned else 0
        if goal_conditioned:
            box = gym.spaces.Box(-1.0, 1.0, (self.dim,), np.float32)
            self.single_observation_space = gym.spaces.Dict({**env.single_observation_space.spaces, "goal": box})
            self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.last_transitions: list[dict] = [{} for _ in range(self.num_envs)]
        self.last_env_rewards = np.zeros(self.num_envs)
        self.totals = {"intrinsic": 0.0, "extrinsic": 0.0, "paid": 0, "steps": 0}

    # -- gym API ---------------------------------------------------------------------------
    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        obs, infos = self.env.reset(seed=seed, options=options)
        for i in range(self.num_envs):
            self.suggester.reset_env(i)
            self.reward_module.achieved[i] = set()
            self.suggester.observe(i, _per_env(infos, i))
        self.suggester.poll()
        self._choose_goals(force=True)
        return self._with_goal(obs), infos

    def step(self, actions):
        from llmguide.envs import split_infos

        goals_before = [self.suggester.goals(i) for i in range(self.num_envs)]
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        dones = np.logical_or(terminated, truncated)
        transitions = split_infos(infos, self.num_envs)
        for i, info in enumerate(transitions):
            info["ellm_goals"] = goals_before[i]
        batch = TransitionBatch(obs=None, actions=np.asarray(actions)[None], next_obs=None,
                                rewards=np.asarray(rewards)[None], dones=dones[None], infos=[transitions])
        r_int = self.reward_module.compute(batch)[0]
        for i, info in enumerate(transitions):
            info["ellm_reward"] = float(r_int[i])
        if self.goal_conditioned and dones.any() and "final_obs" in infos:
            # a finished env's true last observation carries the goal it was pursuing
            before = self.goal_embeddings()
            for i in np.flatnonzero(dones):
                final = infos["final_obs"][i]
                if isinstance(final, dict):
                    infos["final_obs"][i] = {**final, "goal": before[i]}
        # the new current states: the reset state for finished envs (SAME_STEP autoreset)
        for i in range(self.num_envs):
            if dones[i]:
                self.suggester.reset_env(i)
                self.current_goal[i] = None
                self.suggester.observe(i, _per_env(infos, i))
            else:
                self.suggester.observe(i, transitions[i])
        self.suggester.poll()
        self._choose_goals()
        r_ext = np.asarray(rewards, dtype=np.float64)
        self.totals["intrinsic"] += float(r_int.sum())
        self.totals["extrinsic"] += float(r_ext.sum())
        self.totals["paid"] += int((r_int > 0).sum())
        self.totals["steps"] += self.num_envs
        train_reward = self.extrinsic_coef * r_ext + self.intrinsic_coef * r_int
        self.last_transitions, self.last_env_rewards = transitions, r_ext
        return self._with_goal(obs), train_reward.astype(np.float32), terminated, truncated, infos

    # -- goals -----------------------------------------------------------------------------
    def _choose_goals(self, force: bool = False) -> None:
        for i in range(self.num_envs):
            if self.fixed_goal is not None:
                self.current_goal[i] = self.fixed_goal
                continue
            achieved = self.reward_module.achieved[i]
            options = [g for g in self.suggester.goals(i) if g not in achieved]
            goal = self.current_goal[i]
            if force or goal is None or goal not in options:
                if not options:
                    self.current_goal[i] = None
                elif self.goal_choice == "first":
                    self.current_goal[i] = options[0]
                else:
                    self.current_goal[i] = options[int(self.rng.integers(len(options)))]

    def goal_embeddings(self) -> np.ndarray:
        """(num_envs, dim) embedding of each env's current goal (zeros when it has none)."""
        out = np.zeros((self.num_envs, self.dim), dtype=np.float32)
        named = [(i, g) for i, g in enumerate(self.current_goal) if g]
        if named:
            out[[i for i, _ in named]] = self.embedder.embed([g for _, g in named])
        return out

    def _with_goal(self, obs: Any) -> Any:
        if not self.goal_conditioned:
            return obs
        return {**obs, "goal": self.goal_embeddings()}

    def metrics(self) -> dict[str, float]:
        """Suggester counters, suggestion quality and reward totals since the start."""
        steps = max(self.totals["steps"], 1)
        return {
            **self.suggester.metrics(),
            "ellm/intrinsic_per_step": self.totals["intrinsic"] / steps,
            "ellm/goals_paid": self.totals["paid"],
        }

    def close(self, **kwargs: Any) -> None:
        self.suggester.close()
        super().close(**kwargs)
