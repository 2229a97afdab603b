"""Evaluation episodes of a trained agent (greedy or sampled) on a fresh env, seeded and repeatable."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

_PROGRESS: dict[str, Any] = {"enabled": False, "desc": "eval"}


@contextmanager
def eval_progress(enabled: bool, desc: str = "eval") -> Iterator[None]:
    """Evaluations run inside show a progress line (episodes done, steps, mean return so far) on stderr."""
    before = dict(_PROGRESS)
    _PROGRESS.update(enabled=bool(enabled), desc=desc)
    try:
        yield
    finally:
        _PROGRESS.clear()
        _PROGRESS.update(before)


class _Bar:
    """The evaluation's progress line: a tqdm bar over episodes whose postfix counts steps (quiet unless enabled)."""

    def __init__(self, episodes: int):
        self.bar = tqdm(total=episodes, desc=_PROGRESS["desc"], unit="ep", disable=not _PROGRESS["enabled"],
                        mininterval=1.0, dynamic_ncols=True)
        self.steps, self.returns = 0, []

    def step(self, n: int = 1) -> None:
        self.steps += n
        if not self.bar.disable and self.steps % 200 == 0:
            self.bar.set_postfix(self._post(), refresh=True)

    def episode(self, ret: float) -> None:
        self.returns.append(ret)
        if not self.bar.disable:
            self.bar.set_postfix(self._post(), refresh=False)
            self.bar.update(1)

    def _post(self) -> dict[str, str]:
        post = {"steps": str(self.steps)}
        if self.returns:
            post["return"] = f"{np.mean(self.returns):.3g}"
        return post

    def close(self) -> None:
        self.bar.close()


def _batched(obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v)[None] for k, v in obs.items()}


def evaluate(agent: Any, env_cfg: Any, episodes: int, seed: int, greedy: bool = True,
             make_env_fn: Callable[[Any, int], gym.Env] | None = None,
             max_steps: int | None = None) -> dict[str, Any]:
    """Run ``episodes`` episodes (episode i reset with ``seed + i``) with ``agent.act``.

    Returns mean/std return and length, per-episode returns, success rate where infos carry
    ``success``, and per-episode achievements plus the Crafter summary where they carry
    ``achievements``. Torch and NumPy RNG states are restored afterwards, so evaluating in the
    middle of training does not change the training run, and the same seed gives the same result.
    """
    if make_env_fn is None:
        from llmguide.envs import make_env as make_env_fn
    results: dict[str, Any] = {"episodes": int(episodes), "greedy": bool(greedy), "seed": int(seed)}
    if episodes <= 0:
        return results
    env = make_env_fn(env_cfg, seed)
    returns, lengths, successes, achievements = [], [], [], []
    bar = _Bar(episodes)
    agent_rng = getattr(agent, "rng", None)
    saved_agent_rng = agent_rng.bit_generator.state if agent_rng is not None else None
    np_state = np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if agent_rng is not None:
                agent.rng = np.random.default_rng(seed)
            for ep in range(episodes):
                obs, info = env.reset(seed=seed + ep)
                if hasattr(agent, "reset_act_state"):
                    agent.reset_act_state()
                observe = getattr(agent, "observe_info", None)   # an agent that reads the info (a scripted one)
                ret, length, done = 0.0, 0, False
                while not done:
                    if observe is not None:
                        observe(info)
                    action = int(agent.act(_batched(obs), greedy=greedy)[0])
                    obs, reward, terminated, truncated, info = env.step(action)
                    ret += float(reward)
                    length += 1
                    bar.step()
                    done = terminated or truncated or (max_steps is not None and length >= max_steps)
                bar.episode(ret)
                returns.append(ret)
                lengths.append(length)
                if "success" in info:
                    successes.append(float(bool(info["success"])))
                if isinstance(info.get("achievements"), dict):
                    achievements.append({k: int(v) for k, v in info["achievements"].items()})
    finally:
        bar.close()
        env.close()
        np.random.set_state(np_state)
        if agent_rng is not None:
            agent.rng = agent_rng
            agent.rng.bit_generator.state = saved_agent_rng
        if hasattr(agent, "reset_act_state"):
            agent.reset_act_state()
    return {**results, **_summary(returns, lengths, successes, achievements)}


def _summary(returns: list, lengths: list, successes: list, achievements: list) -> dict[str, Any]:
    out: dict[str, Any] = {
        "return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
        "length_mean": float(np.mean(lengths)), "length_std": float(np.std(lengths)),
        "episode_returns": returns, "episode_lengths": lengths,
    }
    if successes:
        out["success_rate"] = float(np.mean(successes))
    if achievements:
        from llmguide.envs.crafter.rules import achievement_summary

        summary = achievement_summary(achievements)
        out.update({"episode_achievements": achievements, "achievements": summary,
                    "achievements_per_episode": summary["achievements_per_episode"],
                    "crafter_score": summary["crafter_score_percent"]})
    return out


def evaluate_vector(agent: Any, envs: Any, episodes: int, seed: int, greedy: bool = True,
                    modules: Any = ()) -> dict[str, Any]:
    """Episodes on a 1-env vector env that may carry method wrappers (ELLM's goal observation); the
    reward modules ``watch`` every step as in training (some wrappers read their state).  Returns the
    same keys as :func:`evaluate`, with env returns (not shaped ones)."""
    from llmguide.envs import split_infos
    from llmguide.learners.common import true_next_obs
    from llmguide.rewards.base import StepTransition

    results: dict[str, Any] = {"episodes": int(episodes), "greedy": bool(greedy), "seed": int(seed)}
    if episodes <= 0:
        return results
    returns, lengths, successes, achievements = [], [], [], []
    bar = _Bar(episodes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        obs, _ = envs.reset(seed=seed)
        ret, length = 0.0, 0
        while len(returns) < episodes:
            action = agent.act(obs, greedy=greedy)
            next_obs, reward, term, trunc, infos = envs.step(action)
            info = split_infos(infos, 1)
            step = StepTransition(obs=obs, actions=np.asarray(action), next_obs=true_next_obs(
                next_obs, infos, np.logical_or(term, trunc)), rewards=np.asarray(reward), terminated=np.asarray(term),
                truncated=np.asarray(trunc), infos=info)
            for _, module in modules:
                module.watch(step)
            obs = next_obs
            ret, length = ret + float(reward[0]), length + 1
            bar.step()
            if term[0] or trunc[0]:
                bar.episode(ret)
                returns.append(ret)
                lengths.append(length)
                if "success" in info[0]:
                    successes.append(float(bool(info[0]["success"])))
                if isinstance(info[0].get("achievements"), dict):
                    achievements.append({k: int(v) for k, v in info[0]["achievements"].items()})
                ret, length = 0.0, 0
    bar.close()
    if hasattr(agent, "reset_act_state"):
        agent.reset_act_state()
    return {**results, **_summary(returns, lengths, successes, achievements)}
