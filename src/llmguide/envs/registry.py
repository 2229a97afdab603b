"""The env families: one registry ``{family: Family(make, oracle, make_vector)}`` and the functions that
build an env or a family's oracle from it.  A new family is one entry here, its package under
``envs/`` and ``conf/env/<name>.yaml``; any other Gymnasium env runs as ``env=gym`` (:mod:`llmguide.envs.gym_env`)."""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import gymnasium as gym

from llmguide.core.config import add_rule_provider, cfg_get
from llmguide.core.errors import ConfigError
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
    and its ground-truth ``oracle(actions)``, each a ``"module:function"`` imported when first used.

    ``env_id`` is the family's registered wrapper id (``env.id`` in ``conf/env/<name>.yaml``); a family whose
    ``env.id`` also names a task (NetHack, MiniHack) has ``check_id``, ``fn(env_id, family) -> problem or None``.
    ``tasks`` (``"module:attr"``, a list or a function of the family name) feeds ``llmguide list``; ``wait`` is
    what the first env step waits for, printed before training (e.g. a JAX compile).  ``expert`` is the family's
    scripted expert, a class ``(env_cfg, seed=, mode=, exclude=)`` whose ``act(obs, infos)`` plays a vector env
    (``agent=scripted agent.policy=expert``, PTGM's ``method.collect.policy=expert``).  ``wrap_vector``,
    ``fn(envs, env_cfg, seed) -> envs``, wraps every vector env of the family (e.g. Crafter's ``env.distractors``).
    ``check_task``, ``fn(env_cfg) -> problem or None``, checks ``env.task`` when the config loads."""

    make: str
    oracle: str
    make_vector: str | None = None
    max_steps: str | None = None     # "module:function(env_cfg) -> int": the episode cap when env.max_steps is null
    env_id: str = ""
    check_id: str | None = None
    tasks: str | None = None
    wait: str | None = None
    expert: str | None = None
    wrap_vector: str | None = None
    variants: str = ""               # what ``llmguide list`` says of the family's variants
    check_task: str | None = None    # "module:function(env_cfg) -> problem or None": env.task, when the config loads


_NETHACK = "llmguide.envs.nethack.env"
_EXPERT = "llmguide.envs.crafter.expert.agent:ExpertPolicy"
_CRAFTER_TASK = "llmguide.envs.crafter.rules:task_problem"
_VARIANTS = "llmguide.envs.crafter.variants:wrap_vector"
_VARIANTS_TEXT = ("env.distractors.rate=P (a noisy TV): the do-nothing action shows a harmless new sight with "
                  "probability P, appended to the message line; nothing else changes; ground truth finds no progress in it. "
                  "env.seen_map.size=S: obs['map'], the S x S cells around the player as the agent has seen them "
                  "(built from its views alone, as the scripted expert's memory)")
FAMILIES: dict[str, Family] = {
    "crafter": Family("llmguide.envs.crafter.env:make_crafter", "llmguide.envs.crafter.actions:make_oracle",
                      env_id="llmguide/Crafter-v0", tasks="llmguide.envs.crafter.rules:ACHIEVEMENTS",
                      max_steps="llmguide.envs.crafter.rules:default_max_steps", expert=_EXPERT,
                      wrap_vector=_VARIANTS, variants=_VARIANTS_TEXT, check_task=_CRAFTER_TASK),
    "craftax": Family("llmguide.envs.craftax.env:make_craftax", "llmguide.envs.craftax.env:make_oracle",
                      make_vector="llmguide.envs.craftax.env:make_craftax_vector", env_id="llmguide/CraftaxClassic-v0",
                      tasks="llmguide.envs.crafter.rules:ACHIEVEMENTS",
                      max_steps="llmguide.envs.crafter.rules:default_max_steps", expert=_EXPERT,
                      wrap_vector=_VARIANTS, variants=_VARIANTS_TEXT, check_task=_CRAFTER_TASK,
                      wait="compiling Craftax-Classic's jitted step (about 30 s the first time; a few seconds once "
                           "~/.cache/llmguide/jax holds it)"),
    "babyai": Family("llmguide.envs.babyai.env:make_babyai", "llmguide.envs.babyai.oracle:BabyAIOracle",
                     env_id="llmguide/BabyAIText-v0", tasks="llmguide.envs.babyai.env:TASKS",
                     check_task="llmguide.envs.babyai.env:task_problem"),
    "minihack": Family(f"{_NETHACK}:make_nethack", "llmguide.envs.nethack.oracle:NetHackOracle",
                       env_id="llmguide/MiniHackText-v0", check_id=f"{_NETHACK}:id_problem",
                       tasks=f"{_NETHACK}:task_ids"),
    "nethack": Family(f"{_NETHACK}:make_nethack", "llmguide.envs.nethack.oracle:NetHackOracle",
                      env_id="llmguide/NetHackText-v0", check_id=f"{_NETHACK}:id_problem",
                      tasks=f"{_NETHACK}:task_ids"),
    "gym": Family("llmguide.envs.gym_env:make_gym", "llmguide.envs.gym_env:GymOracle",
                  env_id="CartPole-v1", check_id="llmguide.envs.gym_env:id_problem",
                  variants="your own Gymnasium env: env.id=<Gymnasium id> env.caption=module:function "
                           "(Python: llmguide.train(env=MyEnv, caption=fn)); no oracle, no tasks"),
}


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


def default_max_steps(env_cfg: Any) -> int | None:
    """The family's episode cap for a config whose ``env.max_steps`` is null (None: the env has no such default)."""
    target = family(cfg_get(env_cfg, "name")).max_steps
    return None if target is None else int(load(target)(env_cfg))
