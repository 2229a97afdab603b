"""A scripted agent that plays and never learns: the reference rows of a study (``agent=scripted``).

``agent.policy=expert`` is the env family's scripted expert (Crafter / Craftax: the requirement-tree
planner, ``agent.mode`` plain or data, ``agent.exclude`` achievements it never pursues; on a single-achievement
task, ``env.task``, it pursues that task only, ``agent.task_only``); ``random`` is a uniform policy.  It runs through the same Runner, episode tracker and callbacks as PPO, so its
``metrics.jsonl`` carries the same per-episode keys (``charts/success``, ``achievements/*``) and the
harness reports it beside the trained arms, as BabyAI's bot: the level a competent player reaches.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from llmguide.core.progress import Progress
from llmguide.envs import split_infos
from llmguide.learners.callbacks import Callback, as_callback
from llmguide.learners.common import EpisodeTracker
from llmguide.rewards.base import StepTransition

POLICIES = ("expert", "random")


def check(cfg_agent: Any, env_cfg: Any) -> str | None:
    """Why ``agent=scripted`` cannot play ``env_cfg`` (an unknown policy, a family without an expert), or None."""
    from llmguide.envs.registry import FAMILIES, expert_problem

    policy = str(cfg_agent.get("policy") or "expert")
    if policy not in POLICIES:
        return f"agent.policy must be one of {POLICIES}, got {policy!r}"
    name = str(env_cfg.get("name"))
    return expert_problem(name) if policy == "expert" and name in FAMILIES else None


class ScriptedAgent:
    """Steps ``envs`` with a scripted policy for ``total_steps``; logs episodes and calls the callbacks as a
    learner does (``on_rollout_end`` every ``num_steps`` vector steps).  Nothing trains."""

    algo = "scripted"

    def __init__(self, envs: Any, cfg_agent: Any, env_cfg: Any, run: Any = None, seed: int = 0, **_: Any):
        def c(key: str, default: Any) -> Any:
            value = cfg_agent.get(key, default) if hasattr(cfg_agent, "get") else default
            return default if value is None else value

        if (problem := check(cfg_agent, env_cfg)) is not None:
            raise ValueError(problem)
        self.policy = str(c("policy", "expert"))
        self.mode, self.exclude = str(c("mode", "plain")), list(c("exclude", []))
        task = env_cfg.get("task") if hasattr(env_cfg, "get") else None
        # on a single-achievement task the expert pursues that task (its prerequisites, its vitals) only
        self.target = str(task) if task and bool(c("task_only", True)) else None
        self.envs, self.env_cfg, self.run, self.seed = envs, env_cfg, run, int(seed)
        self.num_envs, self.num_steps = int(envs.num_envs), int(c("num_steps", 64))
        self.num_actions = int(envs.single_action_space.n)
        self.rng = np.random.default_rng(self.seed)
        self.global_step = 0
        self.episodes: deque[dict[str, Any]] = deque(maxlen=10_000)
        self._act = self._make_policy(self.seed)
        self._eval_act: Callable[..., Any] | None = None
        self._eval_info: dict | None = None

    def _make_policy(self, seed: int) -> Callable[..., Any]:
        if self.policy == "random":
            return lambda obs, infos=None: self.rng.integers(self.num_actions, size=len(next(iter(obs.values()))))
        from llmguide.envs.registry import make_expert

        return make_expert(self.env_cfg, seed=seed, mode=self.mode, exclude=self.exclude, target=self.target).act

    # --- acting (evaluation) ------------------------------------------------------------------
    def reset_act_state(self) -> None:
        """A new evaluation episode: the expert forgets its map."""
        self._eval_act, self._eval_info = None, None

    def observe_info(self, info: dict) -> None:
        """The evaluation env's info before the next :meth:`act` (the expert reads its achievement counts)."""
        self._eval_info = {"achievements": info["achievements"]} if "achievements" in info else None

    def act(self, obs: dict[str, np.ndarray], greedy: bool = False, done: np.ndarray | None = None) -> np.ndarray:
        if self._eval_act is None:
            self._eval_act = self._make_policy(self.seed + 1)
        return np.asarray(self._eval_act(obs, self._eval_info)).reshape(-1)

    # --- the loop -------------------------------------------------------------------------------
    def learn(self, total_steps: int, callback: Callback | Sequence[Callback] | None = None,
              progress: bool = True) -> ScriptedAgent:
        callback = as_callback(callback)
        callback.init(self)
        callback.on_training_start()
        tracker = EpisodeTracker(self.num_envs)
        bar = Progress(total=total_steps, initial=self.global_step, disable=not progress, desc=self.policy)
        obs, infos = self.envs.reset(seed=self.seed + self.global_step)
        stop, vector_steps = False, 0
        while self.global_step < total_steps and not stop:
            actions = np.asarray(self._act(obs, infos), dtype=np.int64).reshape(self.num_envs)
            next_obs, reward, terminated, truncated, infos = self.envs.step(actions)
            done = np.logical_or(terminated, truncated)
            env_infos = split_infos(infos, self.num_envs)
            self.global_step += self.num_envs
            for record in tracker.step(np.asarray(reward, dtype=np.float64), done, env_infos):
                self.episodes.append({"step": self.global_step, **record})
                bar.episode(record["charts/episodic_return"], record["charts/episodic_length"])
                if self.run is not None:
                    self.run.log(self.global_step, record)
            step = StepTransition(obs=obs, actions=actions, next_obs=next_obs, rewards=np.asarray(reward),
                                  terminated=np.asarray(terminated), truncated=np.asarray(truncated),
                                  infos=env_infos, step=self.global_step)
            stop = not callback.on_step(step)
            obs, vector_steps = next_obs, vector_steps + 1
            if vector_steps % self.num_steps == 0:
                bar.update(self.num_envs * self.num_steps, lm_stats=callback.progress_stats)
                callback.on_rollout_end({})
        bar.close()
        callback.on_training_end()
        return self

    def state_dict(self) -> dict[str, Any]:
        return {"algo": self.algo, "policy": self.policy, "global_step": self.global_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.global_step = int(state.get("global_step", 0))


__all__ = ["POLICIES", "ScriptedAgent"]
