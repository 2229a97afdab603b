"""Pieces shared by the learners: infos per env, episode bookkeeping, reward mixing, RNG state."""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from llmguide.core.config import option_file
from llmguide.core.errors import LLMGuideError
from llmguide.rewards.base import RewardModule, TransitionBatch

log = logging.getLogger(__name__)


def agent_config(cfg_agent: Any, name: str) -> DictConfig:
    """A learner's settings: its shipped ``agent/<name>.yaml`` (the one source of defaults: the package's conf/ or
    a method's own, :func:`~llmguide.core.config.option_file`) overridden by ``cfg_agent`` (a DictConfig, a dict or
    a namespace with some of its keys)."""
    path = option_file("agent", name, user=False)
    if path is None:
        raise FileNotFoundError(f"no shipped learner settings agent/{name}.yaml")
    base = OmegaConf.load(path)
    given = cfg_agent if isinstance(cfg_agent, DictConfig | dict) else vars(cfg_agent)
    return OmegaConf.merge(base, {k: v for k, v in dict(given).items() if v is not None})


def true_next_obs(next_obs: dict[str, np.ndarray], infos: dict, dones: np.ndarray) -> dict[str, np.ndarray]:
    """The observation each transition really led to: ``final_obs`` where an env just finished."""
    if not dones.any() or "final_obs" not in infos:
        return next_obs
    real = {k: np.array(v, copy=True) for k, v in next_obs.items()}
    mask = infos.get("_final_obs", dones)
    for i in np.flatnonzero(mask):
        for k in real:
            real[k][i] = infos["final_obs"][i][k]
    return real


class EpisodeTracker:
    """Running return/length per env; on episode end, a record with Crafter achievements / success."""

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)

    def step(self, rewards: np.ndarray, dones: np.ndarray, env_infos: Sequence[dict]) -> list[dict[str, Any]]:
        self.returns += rewards
        self.lengths += 1
        finished = []
        for i in np.flatnonzero(dones):
            record: dict[str, Any] = {
                "charts/episodic_return": float(self.returns[i]),
                "charts/episodic_length": int(self.lengths[i]),
            }
            record.update(episode_info_metrics(env_infos[i] if i < len(env_infos) else {}))
            finished.append(record)
            self.returns[i] = 0.0
            self.lengths[i] = 0
        return finished


def episode_info_metrics(info: dict) -> dict[str, Any]:
    """``achievements/<name>`` (1 if unlocked this episode), ``charts/success`` and ``charts/distractor_share``
    from a final info."""
    out: dict[str, Any] = {}
    achievements = info.get("achievements")
    if isinstance(achievements, dict):
        unlocked = 0
        for name, count in achievements.items():
            got = float(np.asarray(count).item() > 0)
            out[f"achievements/{name}"] = got
            unlocked += int(got)
        out["charts/achievements_per_episode"] = unlocked
    if "success" in info:
        out["charts/success"] = float(bool(np.asarray(info["success"]).item()))
    if "distractor_share" in info:   # env.distractors: the episode's share of steps on the distractor action
        out["charts/distractor_share"] = float(np.asarray(info["distractor_share"]).item())
    return out


def mix_rewards(
    batch: TransitionBatch, modules: Sequence[tuple[float, RewardModule]], counters: dict[str, int]
) -> tuple[np.ndarray, dict[str, float]]:
    """``sum(coef_i * module_i.compute(batch))`` (T, N); non-finite values become 0 and are counted."""
    total = np.zeros_like(batch.rewards, dtype=np.float32)
    metrics: dict[str, float] = {}
    for coef, module in modules:
        r = np.asarray(module.compute(batch), dtype=np.float32)
        if r.shape != batch.rewards.shape:
            raise ValueError(f"reward module '{module.name}' returned shape {r.shape}, "
                             f"expected {batch.rewards.shape} (T, N)")
        bad = ~np.isfinite(r)
        if bad.any():
            key = f"reward/{module.name}/nonfinite"
            counters[key] = counters.get(key, 0) + int(bad.sum())
            log.warning("reward module %s returned %d non-finite rewards; replaced by 0 (total %d)",
                        module.name, int(bad.sum()), counters[key])
            r = np.where(bad, 0.0, r).astype(np.float32)
            metrics[key] = counters[key]
        metrics[f"charts/intrinsic_reward/{module.name}"] = float(r.mean())
        total += coef * r
    return total, metrics


class NonFiniteError(LLMGuideError):
    """Training diverged: a loss or a parameter became NaN or infinite.  The learner raises it before the
    non-finite value reaches a checkpoint, so the run's last good checkpoint is kept."""


DIVERGED_FIX = "a smaller agent.lr or agent.max_grad_norm may help"


def check_loss(step: int, total: torch.Tensor, parts: dict[str, torch.Tensor]) -> None:
    """Before ``total.backward()``: raise :class:`NonFiniteError` when ``total`` is not finite, naming the first
    of its ``parts`` that is not (one host sync; learners sync for their metrics anyway)."""
    if bool(torch.isfinite(total)):
        return
    name, value = next(((k, v) for k, v in parts.items() if not bool(torch.isfinite(v).all())),
                       ("the total loss", total))
    raise NonFiniteError(f"training diverged at step {step}: {name} is {float(value.detach().float().sum())}; "
                         f"stopped before the update ({DIVERGED_FIX})")


def check_parameters(step: int, module: torch.nn.Module) -> None:
    """After an update: raise :class:`NonFiniteError` when a parameter of ``module`` is not finite, naming it."""
    flags = torch.stack([torch.isfinite(p).all() for p in module.parameters()])
    if bool(flags.all()):
        return
    name = [n for n, _ in module.named_parameters()][int((~flags).nonzero()[0])]
    raise NonFiniteError(f"training diverged at step {step}: parameter {name} is not finite after the update "
                         f"({DIVERGED_FIX})")


def crossed(step: int, previous: int, every: int) -> bool:
    """True when going from ``previous`` to ``step`` passed a multiple of ``every`` (periodic work)."""
    return step // every > previous // every


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def modules_state(modules: Sequence[tuple[float, RewardModule]]) -> list[dict[str, Any]]:
    return [{"name": m.name, "coef": float(c), "state": m.state_dict()} for c, m in modules]


def load_modules_state(modules: Sequence[tuple[float, RewardModule]], states: list[dict[str, Any]]) -> None:
    """Restore reward-module states; the module list must match the checkpoint's (names, order)."""
    names = [m.name for _, m in modules]
    saved = [s["name"] for s in states]
    if names != saved:
        raise ValueError(f"checkpoint holds reward modules {saved}, but this run built {names}")
    for (_, module), s in zip(modules, states, strict=True):
        module.load_state_dict(s["state"])


def stack_obs(steps: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """List over T of dict (N, ...) → dict of (T, N, ...)."""
    return {k: np.stack([s[k] for s in steps]) for k in steps[0]}
