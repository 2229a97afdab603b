"""A map of what the agent has seen (``env.seen_map``, Crafter and Craftax-Classic alike; off by default).

The learner sees a 9x7 window; the scripted expert (:mod:`.expert`) plans on a map of every cell it has seen.
With ``env.seen_map.size`` = S > 0 every vector env adds that memory to the observation as ``obs["map"]``: the
S x S cells around the player, one-hot over "not seen" and the semantic classes, shape (1 + 19, S, S), laid out
as the view (``[class, y, x]``, the player at the centre).  It is built by the expert's own
:class:`~llmguide.envs.crafter.expert.nav.LocalMap` from the views alone (dead reckoning: a move counts when the
next view fits the map shifted), so it holds nothing a learner could not remember itself: no simulator state, no
cell never seen.  Cells farther than ``env.seen_map.radius`` (Chebyshev, default 24: the expert's) are forgotten;
creatures are kept only while in view (the view shows them), materials as last seen.  Every learner reads it the
same way (a second image key of the observation); the expert ignores it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from llmguide.core.config import cfg_get
from llmguide.core.errors import ConfigError
from llmguide.envs.crafter.expert.nav import UNKNOWN, LocalMap, view_ids
from llmguide.envs.crafter.rules import ITEMS, SEMANTIC_NAMES

CHANNELS = 1 + len(SEMANTIC_NAMES)   # "not seen", then the semantic classes (0: outside the world)
_ASLEEP = len(ITEMS) + 4             # the vector's sleeping flag (after the inventory and the facing one-hot)


def settings(env_cfg: Any) -> tuple[int, int] | None:
    """``(size, radius)`` of ``env.seen_map``, None when off; a bad value is a ConfigError naming its key."""
    block = cfg_get(env_cfg, "seen_map")
    size = int(cfg_get(block, "size", 0) or 0) if block is not None else 0
    if size == 0:
        return None
    if cfg_get(env_cfg, "obs", "symbolic") != "symbolic" or int(cfg_get(env_cfg, "size", 9) or 9) != 9:
        raise ConfigError("env.seen_map.size", "the map is built from the symbolic 9x7 view (env.obs=symbolic, "
                                               "env.size=9)")
    if cfg_get(env_cfg, "actions", "primitive") != "primitive":
        raise ConfigError("env.seen_map.size", "the map tracks moves of the primitive actions (env.actions=primitive)")
    if size < 3 or size % 2 == 0 or size > 73:
        raise ConfigError("env.seen_map.size", f"an odd window side in [3, 73] (0: off), got {size}")
    radius = int(cfg_get(block, "radius", 24) or 24)
    if not size // 2 <= radius <= 36:
        raise ConfigError("env.seen_map.radius", f"the memory's reach in [size // 2, 36] = [{size // 2}, 36], "
                                                 f"got {radius}")
    return size, radius


class SeenMap:
    """One env's memory: :meth:`update` with each observation and the action that led to it, :meth:`window`."""

    def __init__(self, size: int, radius: int = 24):
        self.size, self.radius = int(size), int(radius)
        self.reset()

    def reset(self) -> None:
        self.map = LocalMap(self.radius)
        self.action: int | None = None
        self.asleep = False

    def update(self, image: np.ndarray, vector: np.ndarray) -> None:
        """Integrate one observation (one-hot view ``[C, y, x]`` and the vector) seen after ``self.action``."""
        self.map.observe(view_ids(image), self.action, self.asleep)
        self.asleep = bool(vector[_ASLEEP] > 0.5)

    def window(self) -> np.ndarray:
        """(S, S) semantic ids ``[y, x]`` around the player; -1 where never seen (or forgotten)."""
        h = self.size // 2
        (px, py) = self.map.pos
        return self.map.crop(px - h, py - h, self.size, fill=UNKNOWN).astype(np.int8).T


def one_hot(ids: np.ndarray) -> np.ndarray:
    """(..., S, S) ids in [-1, 19) -> (..., CHANNELS, S, S) float32 one-hot ("not seen" first)."""
    planes = np.arange(CHANNELS, dtype=np.int16) - 1
    return (ids[..., None, :, :].astype(np.int16) == planes[:, None, None]).astype(np.float32)


class SeenMapVector(gym.vector.VectorWrapper):
    """A vector env whose observations carry ``map``: each env's :class:`SeenMap` window, one-hot."""

    def __init__(self, envs: gym.vector.VectorEnv, size: int, radius: int = 24):
        super().__init__(envs)
        self.maps = [SeenMap(size, radius) for _ in range(self.num_envs)]
        space = gym.spaces.Box(0.0, 1.0, (CHANNELS, size, size), np.float32)
        self.single_observation_space = gym.spaces.Dict({**envs.single_observation_space.spaces, "map": space})
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)

    def _observe(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ids = np.empty((self.num_envs, self.maps[0].size, self.maps[0].size), np.int8)
        for i, m in enumerate(self.maps):
            m.update(obs["image"][i], obs["vector"][i])
            ids[i] = m.window()
        return {**obs, "map": one_hot(ids)}

    def reset(self, **kwargs: Any):
        obs, infos = self.env.reset(**kwargs)
        for m in self.maps:
            m.reset()
        return self._observe(obs), infos

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        acts = np.asarray(actions).reshape(self.num_envs)
        done = np.asarray(terminated) | np.asarray(truncated)   # SAME_STEP autoreset: obs starts a new episode
        for i, m in enumerate(self.maps):
            if done[i]:
                m.reset()
            else:
                m.action = int(acts[i])
        return self._observe(obs), rewards, terminated, truncated, infos


class SeenMapEnv(gym.ObservationWrapper):
    """One env whose observations carry ``map`` (the single-env twin of :class:`SeenMapVector`)."""

    def __init__(self, env: gym.Env, size: int, radius: int = 24):
        super().__init__(env)
        self.memory = SeenMap(size, radius)
        space = gym.spaces.Box(0.0, 1.0, (CHANNELS, size, size), np.float32)
        self.observation_space = gym.spaces.Dict({**env.observation_space.spaces, "map": space})

    def reset(self, **kwargs: Any):
        self.memory.reset()
        return super().reset(**kwargs)

    def step(self, action):
        self.memory.action = int(action)
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self.observation(obs), reward, terminated, truncated, info

    def observation(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.memory.update(np.asarray(obs["image"]), np.asarray(obs["vector"]))
        return {**obs, "map": one_hot(self.memory.window())}


def wrap_env(env: gym.Env, env_cfg: Any) -> gym.Env:
    """One env with ``obs["map"]`` when ``env.seen_map.size`` > 0 (unchanged when it is off)."""
    on = settings(env_cfg)
    return env if on is None else SeenMapEnv(env, *on)


def wrap_vector(envs: gym.vector.VectorEnv, env_cfg: Any, seed: int) -> gym.vector.VectorEnv:
    """``envs`` with ``obs["map"]`` when ``env.seen_map.size`` > 0; unchanged when it is off or when its envs
    already carry it (a vector of :func:`wrap_env` envs)."""
    on = settings(env_cfg)
    if on is None or "map" in envs.single_observation_space.spaces:
        return envs
    return SeenMapVector(envs, *on)
