"""The vector-env variants of Crafter and Craftax-Classic, applied in this order when switched on: the noisy TV
(``env.distractors``, :mod:`.distractors`) and the seen-map memory (``env.seen_map``, :mod:`.seen_map`)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from llmguide.envs.crafter import distractors, seen_map


def wrap_vector(envs: gym.vector.VectorEnv, env_cfg: Any, seed: int) -> gym.vector.VectorEnv:
    return seen_map.wrap_vector(distractors.wrap_vector(envs, env_cfg, seed), env_cfg, seed)
