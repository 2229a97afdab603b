"""The env families: one registry ``{family: Family(make, oracle, make_vector)}`` and the functions that
build an env or a family's oracle from it.  A new family is one entry here, its package under
``envs/`` and ``conf/env/<name>.yaml``."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import gymnasium as gym

from llmguide.core.config import cfg_get
from llmguide.envs.base import Oracle


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


@dataclass(frozen=True)
class Family:
    """One env family: ``make(env_cfg, seed)``, an optional batched ``make_vector(env_cfg, num_envs, seed)``
    and its ground-truth ``oracle(actions)``, each a ``"module:function"`` imported when first used."""

    make: str
    oracle: str
    make_vector: str | None = None


FAMILIES: dict[str, Family] = {
    "crafter": Family("llmguide.envs.crafter.env:make_crafter", "llmguide.envs.crafter.actions:make_oracle"),
    "craftax": Family("llmguide.envs.craftax.env:make_craftax", "llmguide.envs.craftax.env:make_oracle",
                      make_vector="llmguide.envs.craftax.env:make_craftax_vector"),
    "babyai": Family("llmguide.envs.babyai.env:make_babyai", "llmguide.envs.babyai.oracle:BabyAIOracle"),
    "minihack": Family("llmguide.envs.nethack.env:make_nethack", "llmguide.envs.nethack.oracle:NetHackOracle"),
    "nethack": Family("llmguide.envs.nethack.env:make_nethack", "llmguide.envs.nethack.oracle:NetHackOracle"),
}


def load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(import_module(module), name)


def family(name: str) -> Family:
    """The registered family ``name`` (ValueError naming ``env.name`` otherwise)."""
    if name not in FAMILIES:
        raise ValueError(f"env.name: unknown env family {name!r}; choose one of {list(FAMILIES)}")
    return FAMILIES[name]


def make_env(env_cfg: Any, seed: int | None = None) -> gym.Env:
    """Build a text env from an ``env`` config (``name`` one of :data:`FAMILIES`).

    The env records episode statistics (``info["episode"]`` with ``r``, ``l``, ``t`` at episode
    end) and uses ``seed`` at its first reset.
    """
    env = load(family(cfg_get(env_cfg, "name")).make)(env_cfg, seed)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    return SeedOnFirstReset(env, seed)


def get_oracle(name: str, actions: str = "primitive") -> Oracle:
    """The ground-truth goal oracle of an env family (``minihack`` shares NetHack's); with
    ``actions="text"`` Crafter's goals are ELLM's action strings ("chop tree" for "collect wood")."""
    oracle = load(family(name).oracle)
    params = inspect.signature(oracle).parameters
    return oracle(actions) if "actions" in params else oracle()
