"""Gymnasium environments with text: Crafter, BabyAI-Text, NetHack and MiniHack.

Every env returns a ``Dict(image=Box, vector=Box)`` observation and, in ``info``, ``caption``
(what the agent perceives now), ``events`` (what just happened, from real state changes) and
``mission`` ("" if none).  Each family ships an oracle (:func:`get_oracle`).  Heavy modules
(crafter, minigrid, nle) are imported only when an env of that family is built.

Registered ids: ``llmguide/Crafter-v0``, ``llmguide/BabyAIText-v0``, ``llmguide/MiniHackText-v0``,
``llmguide/NetHackText-v0``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from llmguide.core.config import one_of, positive, register_rule
from llmguide.envs.base import GOOD, ILL_TIMED, IMPOSSIBLE, Oracle, cfg_get
from llmguide.envs.vector import make_vector_env as _make_vector_env
from llmguide.envs.vector import split_infos

FAMILIES = ("crafter", "babyai", "minihack", "nethack", "craftax")

__all__ = ["FAMILIES", "GOOD", "ILL_TIMED", "IMPOSSIBLE", "Oracle", "get_oracle", "make_env",
           "make_vector_env", "split_infos"]


class SeedOnFirstReset(gym.Wrapper):
    """Applies ``seed`` at the first ``reset()`` that does not bring its own seed."""

    def __init__(self, env: gym.Env, seed: int | None):
        super().__init__(env)
        self._pending_seed = seed

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is None:
            seed, self._pending_seed = self._pending_seed, None
        else:
            self._pending_seed = None
        return self.env.reset(seed=seed, options=options)


def make_env(env_cfg: Any, seed: int | None = None) -> gym.Env:
    """Build a text env from an ``env`` config (``name`` in crafter|babyai|minihack|nethack).

    The env records episode statistics (``info["episode"]`` with ``r``, ``l``, ``t`` at episode
    end) and uses ``seed`` at its first reset.
    """
    name = cfg_get(env_cfg, "name")
    if name == "crafter":
        from llmguide.envs.crafter import make_crafter

        env: gym.Env = make_crafter(env_cfg, seed)
    elif name == "babyai":
        from llmguide.envs.babyai_text import make_babyai

        env = make_babyai(env_cfg, seed)
    elif name == "craftax":
        from llmguide.envs.craftax import make_craftax

        env = make_craftax(env_cfg, seed)
    elif name in ("minihack", "nethack"):
        from llmguide.envs.nethack import make_nethack

        cfg = dict(env_cfg)
        if str(cfg.get("id") or "").startswith("llmguide/"):
            cfg["id"] = None  # the registered wrapper id: use the family's default task
        env = make_nethack(cfg, seed)
    else:
        raise ValueError(f"env.name: unknown env family {name!r}; choose one of {list(FAMILIES)}")
    env = gym.wrappers.RecordEpisodeStatistics(env)
    return SeedOnFirstReset(env, seed)


def get_oracle(family: str, actions: str = "primitive") -> Oracle:
    """The ground-truth goal oracle of an env family (``minihack`` shares NetHack's); with
    ``actions="text"`` Crafter's goals are ELLM's action strings ("chop tree" for "collect wood")."""
    if family in ("crafter", "craftax") and actions == "text":
        from llmguide.envs.crafter_actions import CrafterActionOracle

        return CrafterActionOracle()
    if family == "crafter":
        from llmguide.envs.crafter import CrafterOracle

        return CrafterOracle()
    if family == "babyai":
        from llmguide.envs.babyai_oracle import BabyAIOracle

        return BabyAIOracle()
    if family == "craftax":
        from llmguide.envs.craftax import CraftaxOracle

        return CraftaxOracle()
    if family in ("nethack", "minihack"):
        from llmguide.envs.nethack import NetHackOracle

        return NetHackOracle()
    raise ValueError(f"unknown env family {family!r}; choose one of {list(FAMILIES)}")


def make_vector_env(env_cfg: Any, num_envs: int, seed: int, mode: str = "sync", runners: int = 0,
                    ray_cfg: Any = None) -> gym.vector.VectorEnv:
    """:func:`llmguide.envs.vector.make_vector_env`; ``env=craftax`` is one batched JAX env (mode unused);
    ``runners > 0``: the envs live in that many Ray env-runner actors (:mod:`llmguide.distributed.vector`)."""
    if runners > 0:
        from llmguide.distributed.vector import RayVectorEnv

        return RayVectorEnv(env_cfg, num_envs, seed, runners, ray_cfg)
    if cfg_get(env_cfg, "name") == "craftax":
        from llmguide.envs.craftax import make_craftax_vector

        return make_craftax_vector(env_cfg, num_envs, seed)
    return _make_vector_env(env_cfg, num_envs, seed, mode)


def _register() -> None:
    specs = {
        "llmguide/Crafter-v0": ("llmguide.envs.crafter:CrafterText", {}),
        "llmguide/BabyAIText-v0": ("llmguide.envs.babyai_text:BabyAIText", {}),
        "llmguide/MiniHackText-v0": ("llmguide.envs.nethack:NetHackText",
                                     {"env_id": "MiniHack-Room-5x5-v0", "family": "minihack"}),
        "llmguide/NetHackText-v0": ("llmguide.envs.nethack:NetHackText",
                                    {"env_id": "NetHackScore-v0", "family": "nethack"}),
        "llmguide/CraftaxClassic-v0": ("llmguide.envs.craftax:CraftaxText", {}),
    }
    for env_id, (entry, kwargs) in specs.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=entry, kwargs=kwargs, disable_env_checker=True)


_register()
register_rule("env.name", one_of(*FAMILIES))
register_rule("env.obs", one_of("symbolic", "pixels"))
register_rule("env.size", lambda v: None if v % 2 == 1 and v >= 3 else f"must be odd and >= 3, got {v!r}")
register_rule("env.crop", positive)
register_rule("env.actions", one_of("primitive", "text"))
register_rule("env.max_steps", lambda v: None if v is None or v > 0 else f"must be > 0 or null, got {v!r}")

