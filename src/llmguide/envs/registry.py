"""The env families: one registry ``{family: Family(make, oracle, make_vector)}`` and the functions that
build an env or a family's oracle from it.  The families are the installed entry points of ``llmguide.env_families``
(:mod:`llmguide.core.plugins`; the shipped ones are :mod:`llmguide.envs.families`): a new family is a
:class:`Family`, its entry point and ``conf/env/<name>.yaml``; any other Gymnasium env runs as ``env=gym``
(:mod:`llmguide.envs.gym_env`)."""

from __future__ import annotations

import difflib
import inspect
from importlib import import_module
from typing import Any

import gymnasium as gym

from llmguide.core.config import add_rule_provider, cfg_get
from llmguide.core.errors import ConfigError
from llmguide.core.plugins import entries
from llmguide.core.plugins import load as plugin_load
from llmguide.envs.base import Oracle
from llmguide.envs.families import Family


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


FAMILIES: dict[str, Family] = {name: plugin_load(target) for name, target in entries("llmguide.env_families").items()}


def load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(import_module(module), name)


def family(name: str) -> Family:
    """The registered family ``name`` (ValueError naming ``env.name`` otherwise)."""
    if name not in FAMILIES:
        raise ValueError(f"env.name: unknown env family {name!r}; choose one of {list(FAMILIES)}")
    return FAMILIES[name]


def check_env_id(env_cfg: Any) -> None:
    """``env.id`` must name this family's env: its wrapper id (or null), or, for NetHack and MiniHack, a
    registered task id.  :class:`ConfigError` naming ``env.id`` otherwise (a bogus id is never ignored)."""
    name = cfg_get(env_cfg, "name")
    if name not in FAMILIES:
        return   # validate() reports env.name
    fam, env_id = FAMILIES[name], cfg_get(env_cfg, "id")
    if env_id is None or str(env_id) == fam.env_id:
        return
    if fam.check_id is not None:
        problem = load(fam.check_id)(str(env_id), name)
        if problem:
            raise ConfigError("env.id", problem)
        return
    raise ConfigError("env.id", f"env={name} is {fam.env_id!r} (or null); choose its task with env.task, "
                                f"got {env_id!r}")


def family_tasks(name: str) -> list[str]:
    """The task names of a family for ``llmguide list`` (empty when it declares none)."""
    target = family(name).tasks
    if target is None:
        return []
    tasks = load(target)
    return list(tasks(name) if callable(tasks) else tasks)


def check_env_task(env_cfg: Any) -> None:
    """``env.task`` must name one of the family's tasks: :class:`ConfigError` naming ``env.task`` otherwise,
    when the config loads (a single run and every combination of a sweep, before any compute)."""
    name, task = cfg_get(env_cfg, "name"), cfg_get(env_cfg, "task")
    if name not in FAMILIES or FAMILIES[name].check_task is None or task in (None, ""):
        return
    problem = load(FAMILIES[name].check_task)(env_cfg)
    if problem:
        close = difflib.get_close_matches(str(task), family_tasks(name), n=1)
        raise ConfigError("env.task", (f"did you mean {close[0]}? " if close else "") + problem)


add_rule_provider(lambda cfg: check_env_id(cfg.get("env")))
add_rule_provider(lambda cfg: check_env_task(cfg.get("env")))


def make_env(env_cfg: Any, seed: int | None = None) -> gym.Env:
    """Build a text env from an ``env`` config (``name`` one of :data:`FAMILIES`).

    The env records episode statistics (``info["episode"]`` with ``r``, ``l``, ``t`` at episode
    end) and uses ``seed`` at its first reset.  ``env.step_cap`` (set only while an evaluation applies
    ``eval.max_steps`` to a family whose own episode limit is not known up front): episodes are truncated at
    that many steps, never lengthened.
    """
    env = load(family(cfg_get(env_cfg, "name")).make)(env_cfg, seed)
    if cfg_get(env_cfg, "step_cap"):
        env = gym.wrappers.TimeLimit(env, int(cfg_get(env_cfg, "step_cap")))
    env = gym.wrappers.RecordEpisodeStatistics(env)
    return SeedOnFirstReset(env, seed)


def get_oracle(name: str, actions: str = "primitive") -> Oracle:
    """The ground-truth goal oracle of an env family (``minihack`` shares NetHack's); with
    ``actions="text"`` Crafter's goals are ELLM's action strings ("chop tree" for "collect wood")."""
    oracle = load(family(name).oracle)
    params = inspect.signature(oracle).parameters
    return oracle(actions) if "actions" in params else oracle()


def make_expert(env_cfg: Any, seed: int, mode: str = "plain", exclude: Any = (), target: str | None = None) -> Any:
    """The family's scripted expert for ``env_cfg`` (ValueError naming why when it has none or cannot play it);
    ``target``: it pursues that goal only (with its prerequisites and what keeps it alive)."""
    name = cfg_get(env_cfg, "name")
    if (problem := expert_problem(name)) is not None:
        raise ValueError(problem)
    return load(family(name).expert)(env_cfg, seed=seed, mode=mode, exclude=list(exclude or ()), target=target)


def expert_problem(name: str) -> str | None:
    """Why env family ``name`` has no scripted expert, or None when it has one."""
    if family(name).expert is not None:
        return None
    return f"env={name} has no scripted expert (the families with one: {sorted(k for k, f in FAMILIES.items() if f.expert)})"


def gives_captions(env_cfg: Any) -> bool:
    """Whether the configured env has captions (text an LM can read) in its ``info``."""
    target = family(cfg_get(env_cfg, "name")).captions
    return target is None or bool(load(target)(env_cfg))


def default_max_steps(env_cfg: Any) -> int | None:
    """The family's episode cap for a config whose ``env.max_steps`` is null (None: the env has no such default)."""
    target = family(cfg_get(env_cfg, "name")).max_steps
    return None if target is None else int(load(target)(env_cfg))
