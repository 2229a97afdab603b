"""The env families llmguide ships, each registered as an entry point of ``llmguide.env_families`` (its
``pyproject.toml``), as a plugin's family is: :data:`llmguide.envs.registry.FAMILIES` reads them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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
    entry: str | None = None         # "module:Class" registered with Gymnasium as ``env_id`` (with ``kwargs``)
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    ground_truth: bool = True        # the oracle knows the env (llm=oracle|shuffled answer from it)
    captions: str | None = None      # "module:function(env_cfg) -> bool": the env gives captions (None: always)


_NETHACK = "llmguide.envs.nethack.env"
_EXPERT = "llmguide.envs.crafter.expert.agent:ExpertPolicy"
_CRAFTER_TASK = "llmguide.envs.crafter.rules:task_problem"
_VARIANTS = "llmguide.envs.crafter.variants:wrap_vector"
_VARIANTS_TEXT = ("env.distractors.rate=P (a noisy TV): the do-nothing action shows a harmless new sight with "
                  "probability P, appended to the message line; nothing else changes; ground truth finds no progress in it. "
                  "env.seen_map.size=S: obs['map'], the S x S cells around the player as the agent has seen them "
                  "(built from its views alone, as the scripted expert's memory)")
CRAFTER = Family("llmguide.envs.crafter.env:make_crafter", "llmguide.envs.crafter.actions:make_oracle",
                 env_id="llmguide/Crafter-v0", entry="llmguide.envs.crafter.env:CrafterText",
                 tasks="llmguide.envs.crafter.rules:ACHIEVEMENTS",
                 max_steps="llmguide.envs.crafter.rules:default_max_steps", expert=_EXPERT,
                 wrap_vector=_VARIANTS, variants=_VARIANTS_TEXT, check_task=_CRAFTER_TASK)
CRAFTAX = Family("llmguide.envs.craftax.env:make_craftax", "llmguide.envs.craftax.env:make_oracle",
                 make_vector="llmguide.envs.craftax.env:make_craftax_vector",
                 env_id="llmguide/CraftaxClassic-v0", entry="llmguide.envs.craftax.env:CraftaxText",
                 tasks="llmguide.envs.crafter.rules:ACHIEVEMENTS",
                 max_steps="llmguide.envs.crafter.rules:default_max_steps", expert=_EXPERT,
                 wrap_vector=_VARIANTS, variants=_VARIANTS_TEXT, check_task=_CRAFTER_TASK,
                 wait="compiling Craftax-Classic's jitted step (about 30 s the first time; a few seconds once "
                      "~/.cache/llmguide/jax holds it)")
BABYAI = Family("llmguide.envs.babyai.env:make_babyai", "llmguide.envs.babyai.oracle:BabyAIOracle",
                env_id="llmguide/BabyAIText-v0", entry="llmguide.envs.babyai.env:BabyAIText",
                tasks="llmguide.envs.babyai.env:TASKS", check_task="llmguide.envs.babyai.env:task_problem")
MINIHACK = Family(f"{_NETHACK}:make_nethack", "llmguide.envs.nethack.oracle:NetHackOracle",
                  env_id="llmguide/MiniHackText-v0", entry=f"{_NETHACK}:NetHackText",
                  kwargs={"env_id": "MiniHack-Room-5x5-v0", "family": "minihack"},
                  check_id=f"{_NETHACK}:id_problem", tasks=f"{_NETHACK}:task_ids")
NETHACK = Family(f"{_NETHACK}:make_nethack", "llmguide.envs.nethack.oracle:NetHackOracle",
                 env_id="llmguide/NetHackText-v0", entry=f"{_NETHACK}:NetHackText",
                 kwargs={"env_id": "NetHackScore-v0", "family": "nethack"},
                 check_id=f"{_NETHACK}:id_problem", tasks=f"{_NETHACK}:task_ids")
GYM = Family("llmguide.envs.gym_env:make_gym", "llmguide.envs.gym_env:GymOracle",
             env_id="CartPole-v1", check_id="llmguide.envs.gym_env:id_problem",
             variants="your own Gymnasium env: env.id=<Gymnasium id> env.caption=module:function "
                      "(Python: llmguide.train(env=MyEnv, caption=fn)); no oracle, no tasks",
             ground_truth=False, captions="llmguide.envs.gym_env:gives_captions")
