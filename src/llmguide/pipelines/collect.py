"""The exploring collector: every method's data-collection step is this one Runner job.

An agent plays the run's vector env (:func:`~llmguide.pipelines.runner.make_run_envs`) for ``steps`` env steps
and every ``keep_every``-th finished episode is saved in the documented episode format
(:mod:`llmguide.data`) into ``<run>/dataset/``; the run directory (:func:`~llmguide.pipelines.runner.open_run`)
also holds ``config.yaml``, the agent's ``metrics.jsonl`` and ``tb/``, and ``collect_summary.json``.

The agent is PPO (:mod:`llmguide.learners.ppo`) learning from ``extrinsic_coef · r_env + intrinsic_coef · r_int``
where ``r_int`` is the reward module named by ``intrinsic``: a method of ``conf/method/`` whose YAML names a
reward class (``rnd`` — the default —, ``noveld``, ``icm``, ``apt``: its ``module:`` settings, with the agent's
``gamma``) or ``"package.module:Class"``; ``none`` (or ``intrinsic_coef: 0``) trains on the extrinsic reward
alone.  ``policy: random`` plays uniform random actions instead (no learning).

Each method maps its own config keys onto a :class:`Collection`: BK's ``method.collect`` block with
``total_steps`` (:func:`Collection.from_block`), PTGM's on Crafter / Craftax with ``method.collect.agent_steps``,
Motif's ``method.collect_*`` keys (its run directory is its data folder).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf, open_dict

from llmguide.core.config import option_file, register_rule
from llmguide.core.errors import ConfigError
from llmguide.core.seeding import seed_everything
from llmguide.data import EpisodeDataset, EpisodeRecorder, EpisodeWriter
from llmguide.learners.callbacks import Callback
from llmguide.pipelines.runner import make_run_envs, open_run

POLICIES = ("ppo", "random", "expert")
InfoHook = Callable[[list[Mapping[str, Any]]], None]   # sees the per-env infos of every vector-env step


@dataclass
class Collection:
    """What one collection runs (see the module docstring)."""

    steps: int                      # env steps (all envs together)
    intrinsic: str = "rnd"          # rnd | noveld | icm | apt | package.module:Class | none
    intrinsic_coef: float = 1.0
    extrinsic_coef: float = 1.0
    keep_every: int = 1             # save every k-th finished episode
    max_episodes: int = 0           # stop saving after this many (0: no limit)
    policy: str = "ppo"             # ppo | random | expert (Crafter / Craftax: envs.crafter.expert, data mode)
    exclude: tuple[str, ...] = ()   # expert: achievements it never pursues (e.g. the downstream task's)
    expert_mode: str = "data"       # expert: data (random feasible subgoals, ε-random actions) | plain (cheapest first)
    writer: str = ""                # prefix of this run's episode files (``<writer>s<seed>-<id>-<index>.npz``)
    run_dir: Path | None = None     # the step's run directory (None: ``run.dir/run.name``)
    meta: dict[str, Any] = field(default_factory=dict)   # added to every episode's meta

    @classmethod
    def from_block(cls, block: Any, steps: int, **kwargs: Any) -> Collection:
        """A collection from a ``method.collect`` block (keys intrinsic, intrinsic_coef, extrinsic_coef,
        keep_every, max_episodes) and the step budget."""
        return cls(steps=int(steps), intrinsic=str(block.intrinsic), intrinsic_coef=float(block.intrinsic_coef),
                   extrinsic_coef=float(block.extrinsic_coef), keep_every=int(block.keep_every),
                   max_episodes=int(block.max_episodes), **kwargs)

    @property
    def collector(self) -> str:
        """``ppo+rnd``, ``ppo`` (no intrinsic reward) or ``random``: the name the summary and episodes carry."""
        if self.policy in ("random", "expert"):
            return self.policy
        return f"ppo+{self.intrinsic}" if self.uses_module else "ppo"

    @property
    def uses_module(self) -> bool:
        """PPO with an intrinsic reward module (``intrinsic`` not ``none`` and ``intrinsic_coef > 0``)."""
        return self.policy == "ppo" and self.intrinsic not in ("none", "") and self.intrinsic_coef > 0


def check_intrinsic(value: Any) -> str | None:
    """Config rule: ``none``, ``package.module:Class`` or a method whose YAML names a reward class."""
    if value in (None, "", "none") or ":" in str(value) or reward_of_method(str(value)) is not None:
        return None
    return (f"{value!r} names no method with a reward class; use rnd, noveld, icm, apt, package.module:Class "
            "or none")


register_rule("method.collect.intrinsic", check_intrinsic)


def reward_of_method(name: str) -> tuple[str, dict[str, Any]] | None:
    """``(reward class target, module kwargs)`` of ``method/<name>.yaml`` (the package's, a plugin's or
    ``$LLMGUIDE_CONFIG_PATH``'s); None when there is no such method or it names no reward class."""
    path = option_file("method", name) if name.isidentifier() else None
    if path is None:
        return None
    cfg = OmegaConf.to_container(OmegaConf.create(path.read_text()), resolve=True)
    if isinstance(cfg, dict) and cfg.get("reward"):
        return str(cfg["reward"]), dict(cfg.get("module") or {})
    return None


def intrinsic_modules(cfg: DictConfig, spec: Collection, envs: Any) -> list[tuple[float, Any]]:
    """The ``(intrinsic_coef, module)`` pair of ``spec.intrinsic`` (none when unused), built by the kernel's
    :func:`~llmguide.rewards.build_reward_modules` with the run's seed and device and the agent's ``gamma``."""
    import inspect

    from llmguide.rewards import build_reward_modules, load_class

    if not spec.uses_module:
        return []
    found = (spec.intrinsic, {}) if ":" in spec.intrinsic else reward_of_method(spec.intrinsic)
    if found is None:
        raise ConfigError("intrinsic", check_intrinsic(spec.intrinsic) or spec.intrinsic)
    target, kwargs = found
    if "gamma" in inspect.signature(load_class(target).__init__).parameters:
        kwargs["gamma"] = float(cfg.agent.gamma)
    method = {"name": f"collect_{spec.intrinsic}", "reward": target, "module": kwargs,
              "intrinsic_coef": spec.intrinsic_coef}
    return build_reward_modules(method, envs.single_observation_space, envs.single_action_space, envs.num_envs,
                                device=str(cfg.device), seed=int(cfg.seed))


class _Infos(Callback):
    def __init__(self, hook: InfoHook):
        self.hook = hook

    def on_step(self, step: Any) -> bool:
        self.hook(step.infos)
        return True


def explore(cfg: DictConfig, spec: Collection, on_infos: InfoHook | None = None) -> dict[str, Any]:
    """Run ``spec`` as one Runner job into its run directory; returns (and writes) ``collect_summary.json``."""
    from llmguide.envs import split_infos
    from llmguide.learners.ppo import PPO

    if spec.policy not in POLICIES:
        raise ConfigError("policy", f"the collector's policy must be one of {POLICIES}, got {spec.policy!r}")
    seed = int(cfg.seed)
    seed_everything(seed, bool(cfg.deterministic))
    with open_run(_step_config(cfg, spec.run_dir), outputs=("dataset",)) as run:
        writer = EpisodeWriter(run.path / "dataset", writer=f"{spec.writer}s{seed}-{uuid.uuid4().hex[:6]}",
                               meta={"env": str(cfg.env.name), "task": cfg.env.get("task"), "seed": seed,
                                     "collector": spec.collector, **spec.meta})
        envs = EpisodeRecorder(make_run_envs(cfg), writer, keep_every=spec.keep_every,
                               max_episodes=spec.max_episodes or None)
        episodes: list[dict[str, Any]] = []
        try:
            if spec.policy in ("random", "expert"):   # a scripted policy: no learning
                obs, infos = envs.reset(seed=seed)
                envs.action_space.seed(seed)
                act = (_expert(cfg, spec, seed) if spec.policy == "expert"
                       else lambda obs, infos: envs.action_space.sample())
                for _ in range(max(1, spec.steps // envs.num_envs)):
                    obs, _, _, _, infos = envs.step(act(obs, infos))
                    if on_infos is not None:
                        on_infos(split_infos(infos, envs.num_envs))
                steps = envs.env_steps
            else:
                modules = intrinsic_modules(cfg, spec, envs)
                agent = PPO(envs, cfg.agent, reward_modules=modules, extrinsic_coef=spec.extrinsic_coef, run=run,
                            seed=seed, device=str(cfg.device))
                agent.learn(spec.steps, callback=_Infos(on_infos) if on_infos is not None else None,
                            progress=bool(cfg.progress))
                steps, episodes = int(agent.global_step), list(agent.episodes)
        finally:
            envs.close()
        summary = {**EpisodeDataset(run.path / "dataset").stats(), "collector": spec.collector, "steps": steps,
                   "saved_by_this_run": envs.saved, "finished_episodes": envs.finished, **_agent_stats(episodes)}
        run.write_json("collect_summary.json", summary)
        ach = summary.get("achievements_per_episode_mean")
        print(f"collected {envs.saved} episodes ({spec.collector}, {steps} env steps) into {run.path / 'dataset'}; "
              f"dataset now {summary['episodes']} episodes, {summary['transitions']} transitions"
              + (f"; achievements/episode {ach:.2f}" if ach is not None else ""))
    return summary


def _expert(cfg: DictConfig, spec: Collection, seed: int) -> Callable[..., Any]:
    """The scripted Crafter / Craftax expert in ``spec.expert_mode`` (data: feasible subgoals at random, ε-random
    actions; plain: the cheapest goal not achieved yet), never pursuing the excluded achievements: ``act(obs, infos)``."""
    from llmguide.envs.registry import make_expert

    try:
        return make_expert(cfg.env, seed=seed, mode=spec.expert_mode, exclude=spec.exclude).act
    except ValueError as err:
        raise ConfigError("policy", f"the expert collector: {err}") from None


def _step_config(cfg: DictConfig, run_dir: Path | None) -> DictConfig:
    """``cfg`` with ``run.dir``/``run.name`` pointing at ``run_dir`` (a step whose run directory is fixed)."""
    if run_dir is None:
        return cfg
    out = copy.deepcopy(cfg)
    with open_dict(out):
        out.run.dir, out.run.name = str(Path(run_dir).parent), Path(run_dir).name
    return out


def _agent_stats(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Success, return and (Crafter / Craftax) achievements of the agent's episodes: all and the last 10%."""
    if not episodes:
        return {}
    last = episodes[-max(1, len(episodes) // 10):]
    out = {"success_last10pct": float(np.mean([e.get("charts/success", 0.0) for e in last])),
           "return_last10pct": float(np.mean([e["charts/episodic_return"] for e in last]))}
    ach = [e["charts/achievements_per_episode"] for e in episodes if "charts/achievements_per_episode" in e]
    if ach:
        out["achievements_per_episode_mean"] = float(np.mean(ach))
        out["achievements_per_episode_last10pct"] = float(np.mean(ach[-max(1, len(ach) // 10):]))
    return out
