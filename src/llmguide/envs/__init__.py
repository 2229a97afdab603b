"""Gymnasium environments with text: Crafter, BabyAI-Text, NetHack and MiniHack.

Every env returns a ``Dict(image=Box, vector=Box)`` observation and, in ``info``, ``caption``
(what the agent perceives now), ``events`` (what just happened, from real state changes) and
``mission`` ("" if none).  Each family ships an oracle (:func:`get_oracle`).  Heavy modules
(crafter, minigrid, nle) are imported only when an env of that family is built.

Registered ids: ``llmguide/Crafter-v0``, ``llmguide/BabyAIText-v0``, ``llmguide/MiniHackText-v0``,
``llmguide/NetHackText-v0``.  Any other Gymnasium env: ``env=gym`` (:mod:`llmguide.envs.gym_env`, :func:`register_env`).
"""

from __future__ import annotations

import gymnasium as gym

from llmguide.core.config import one_of, positive, register_rule
from llmguide.envs.base import GOOD, ILL_TIMED, IMPOSSIBLE, Oracle
from llmguide.envs.gym_env import register_env
from llmguide.envs.registry import FAMILIES, Family, family, get_oracle, make_env
from llmguide.envs.vector import make_vector_env, split_infos

__all__ = ["FAMILIES", "Family", "family", "GOOD", "ILL_TIMED", "IMPOSSIBLE", "Oracle", "get_oracle", "make_env",
           "make_vector_env", "register_env", "split_infos"]


def _register() -> None:
    """Register each family's env class with Gymnasium under its ``env_id`` (``gymnasium.make`` finds them)."""
    for fam in FAMILIES.values():
        if fam.entry and fam.env_id not in gym.registry:
            gym.register(fam.env_id, entry_point=fam.entry, kwargs=dict(fam.kwargs), disable_env_checker=True)


_register()
register_rule("env.name", one_of(*FAMILIES))
register_rule("env.obs", one_of("symbolic", "pixels"))
register_rule("env.size", lambda v: None if v % 2 == 1 and v >= 3 else f"must be odd and >= 3, got {v!r}")
register_rule("env.crop", positive)
register_rule("env.actions", one_of("primitive", "text"))
register_rule("env.max_steps", lambda v: None if v is None or v > 0 else f"must be > 0 or null, got {v!r}")

