"""ELLM's observation side around a vector env: suggestions per env and the goal observation.

:class:`ELLMGoalWrapper` is what a learner (PPO or DQN) sees.  Each step it

1. remembers the goals suggested for every env's current state (the state *before* the action),
2. steps the wrapped env and writes them into the step's infos as ``ellm_goals`` (also into
   ``final_info`` for envs that just finished), where :class:`~llmguide.methods.ellm.suggester.ELLMReward`
   (an ordinary reward module that ``watch``-es each step) reads them,
3. shows the new states to the :class:`~llmguide.methods.ellm.suggester.GoalSuggester` (which asks the LM,
   asynchronously, only when the state signature changed) and polls finished answers; each env
   whose new state already has an answer counts as a fresh step (``lm/fresh_fraction``),
4. adds the key ``goal`` (one goal embedding per env) to the observation dict.

The reward it returns is the env's, unchanged: the ELLM reward reaches the learner through the
reward module, so ``charts/episodic_return`` is the env return for ELLM as for every method.

Goal conditioning: ``goal_choice="joined"`` (the reference) embeds one text of all the env's open
suggestions, "Your goal is: a, b, c."; the single-goal ablations keep one current goal among them
("first": the top ranked one; "random": uniformly, from a seeded generator).  It is re-chosen when it is achieved,
when it disappears from the suggestions, or at an episode start; the observation carries its
sentence embedding, or zeros when there is none.  A fixed goal (``fixed_goal``) is used for
single-task fine-tuning.  Goals the reward paid this episode (``reward.achieved``) are not chosen;
the reward module learns of a payment when it watches the step, so a goal reached at step t is
replaced in the observation of step t + 2 (one step later than when the wrapper paid it itself).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from llmguide.envs.vector import InfoRows, object_array
from llmguide.methods.ellm.reward import ELLMReward, GoalMatcher
from llmguide.methods.ellm.suggester import GoalSuggester


class ELLMGoalWrapper(gym.vector.VectorWrapper):
    """Writes the pre-action suggestions into infos and adds a per-env ``goal`` embedding."""

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        suggester: GoalSuggester,
        reward: ELLMReward,
        goal_embedder: GoalMatcher | Any,
        goal_conditioned: bool = True,
        goal_choice: str = "random",
        fixed_goal: str | None = None,
        seed: int = 0,
    ):
        super().__init__(env)
        if goal_choice not in ("joined", "random", "first"):
            raise ValueError(f"goal_choice must be 'joined', 'random' or 'first', got {goal_choice!r}")
        self.suggester = suggester
        self.reward_module = reward
        self.embedder = goal_embedder if isinstance(goal_embedder, GoalMatcher) else GoalMatcher(goal_embedder)
        self.goal_conditioned = goal_conditioned
        self.goal_choice = goal_choice
        self.fixed_goal = fixed_goal
        self.rng = np.random.default_rng(seed)
        self.current_goal: list[str | None] = [None] * self.num_envs
        self._embedded_goals: tuple[str | None, ...] | None = None   # what _embedding holds
        self._embedding = np.zeros((self.num_envs, 0), dtype=np.float32)
        self.dim = int(self.embedder.embed(["collect wood"]).shape[1]) if goal_conditioned else 0
        if goal_conditioned:
            box = gym.spaces.Box(-1.0, 1.0, (self.dim,), np.float32)
            self.single_observation_space = gym.spaces.Dict({**env.single_observation_space.spaces, "goal": box})
            self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)

    # -- gym API ---------------------------------------------------------------------------
    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        obs, infos = self.env.reset(seed=seed, options=options)
        rows = InfoRows(infos, self.num_envs)
        for i in range(self.num_envs):
            self.suggester.reset_env(i)
            self.reward_module.achieved[i] = set()
            self.suggester.observe(i, rows[i])
        self.suggester.poll()
        self._choose_goals(force=True)
        return self._with_goal(obs), infos

    def step(self, actions):
        goals_before = object_array([self.suggester.goals(i) for i in range(self.num_envs)])
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        dones = np.logical_or(terminated, truncated)
        infos = dict(infos)
        infos["ellm_goals"], infos["_ellm_goals"] = goals_before, np.ones(self.num_envs, dtype=bool)
        if isinstance(infos.get("final_info"), dict):
            infos["final_info"] = {**infos["final_info"], "ellm_goals": goals_before,
                                   "_ellm_goals": np.asarray(infos.get("_final_info", dones), dtype=bool)}
        if self.goal_conditioned and dones.any() and "final_obs" in infos:
            # a finished env's true last observation carries the goal it was pursuing
            before = self.goal_embeddings()
            for i in np.flatnonzero(dones):
                final = infos["final_obs"][i]
                if isinstance(final, dict):
                    infos["final_obs"][i] = {**final, "goal": before[i]}
        # the new current states: the reset state for finished envs (SAME_STEP autoreset)
        rows = InfoRows(infos, self.num_envs)
        for i in range(self.num_envs):
            if dones[i]:
                self.suggester.reset_env(i)
                self.current_goal[i] = None
            self.suggester.observe(i, rows[i])
        self.suggester.poll()
        self.suggester.account_step()   # fresh: the state the agent acts in next has its answer
        self._choose_goals()
        return self._with_goal(obs), rewards, terminated, truncated, infos

    # -- goals -----------------------------------------------------------------------------
    def _choose_goals(self, force: bool = False) -> None:
        for i in range(self.num_envs):
            if self.fixed_goal is not None:
                self.current_goal[i] = self.fixed_goal
                continue
            achieved = self.reward_module.achieved[i]
            options = [g for g in self.suggester.goals(i) if g not in achieved]
            goal = self.current_goal[i]
            if self.goal_choice == "joined":   # the reference: one text of every open suggestion
                self.current_goal[i] = f"Your goal is: {', '.join(options)}." if options else None
            elif force or goal is None or goal not in options:
                if not options:
                    self.current_goal[i] = None
                elif self.goal_choice == "first":
                    self.current_goal[i] = options[0]
                else:
                    self.current_goal[i] = options[int(self.rng.integers(len(options)))]

    def goal_embeddings(self) -> np.ndarray:
        """(num_envs, dim) embedding of each env's current goal (zeros when it has none)."""
        goals = tuple(self.current_goal)
        if goals != self._embedded_goals:   # goals change far more rarely than every step
            out = np.zeros((self.num_envs, self.dim), dtype=np.float32)
            named = [(i, g) for i, g in enumerate(goals) if g]
            if named:
                out[[i for i, _ in named]] = self.embedder.embed([g for _, g in named])
            self._embedded_goals, self._embedding = goals, out
        return self._embedding.copy()

    def _with_goal(self, obs: Any) -> Any:
        if not self.goal_conditioned:
            return obs
        return {**obs, "goal": self.goal_embeddings()}

    def metrics(self) -> dict[str, float]:
        """Suggester counters and suggestion quality since the start."""
        return {**self.suggester.metrics(), "ellm/goals_paid": self.reward_module.paid_total}

    def close(self, **kwargs: Any) -> None:
        self.suggester.close()
        super().close(**kwargs)
