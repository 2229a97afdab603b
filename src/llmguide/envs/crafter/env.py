"""Crafter with captions, a message line, events from real state changes, single tasks and the Crafter score.

``info["message"]`` is the message line of :mod:`llmguide.envs.crafter.messages` (every change of the agent's
situation this step; ``""`` when nothing happened), built from state snapshots taken before and after the step.
``env.task=<achievement>`` is :class:`llmguide.envs.crafter.rules.Task` (reward 1 on success and 0 otherwise,
the episode ends on success, capped at ``TASK_MAX_STEPS`` unless ``env.max_steps`` is set).

Observation (``obs: symbolic``, the default): ``image`` = one-hot semantic planes of the local
9x7 view (C=19, H=7, W=9, float32) and ``vector`` = inventory/9, facing one-hot, sleeping,
daylight.  With ``obs: pixels`` the ``image`` is Crafter's own (3, 64, 64) uint8 render; the
render is skipped entirely in symbolic mode.
"""

from __future__ import annotations

import collections
import warnings
from typing import Any

import crafter
import crafter.engine
import gymnasium as gym
import numpy as np
from crafter import constants

from llmguide.core.config import cfg_get
from llmguide.envs.crafter import messages as msg
from llmguide.envs.crafter import seen_map
from llmguide.envs.crafter.rules import (
    ITEMS,
    OBJECT_TYPES,
    SEMANTIC_NAMES,
    caption,
    make_task,
    task_name,
)

DIRECTIONS = [(-1, 0), (1, 0), (0, -1), (0, 1)]


class _Chunk(dict):
    """A chunk's objects in insertion order (crafter keeps a ``set``, whose order follows memory addresses)."""

    def add(self, obj: Any) -> None:
        self[obj] = None

    def remove(self, obj: Any) -> None:
        del self[obj]


class _OrderedWorld(crafter.engine.World):
    """Crafter's world with insertion-ordered chunks: its balancing picks a creature to despawn from a
    chunk's objects, so with sets two envs of the same seed diverged once a chunk held two creatures."""

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._chunks = collections.defaultdict(_Chunk)


class _Core(crafter.Env):
    """crafter.Env that renders only when pixels are requested; reproducible per seed in one process."""

    render_pixels = False

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._world.__class__ = _OrderedWorld

    def _obs(self):
        return self.render() if self.render_pixels else None


class CrafterText(gym.Env):
    """Crafter as a Gymnasium env with ``caption``, ``events`` and ``mission`` in ``info``."""

    metadata = {"render_modes": []}
    action_strings: list[str] = [a.replace("_", " ") for a in constants.actions]

    def __init__(self, obs: str = "symbolic", task: str | None = None, max_steps: int | None = None,
                 size: int = 9, seed: int | None = None):
        if obs not in ("symbolic", "pixels"):
            raise ValueError(f"env.obs must be 'symbolic' or 'pixels', got {obs!r}")
        if size < 3 or size % 2 == 0:
            raise ValueError(f"env.size (local view width) must be odd and >= 3, got {size}")
        self.task_def, max_steps = make_task(task, max_steps)
        self.task = self.task_def.achievement if self.task_def else None
        self.max_steps = max_steps
        self.obs_mode = obs
        self.view = (size, size - 2)  # width, height of the local view (Crafter: 9x7)
        self._core = _Core(area=(64, 64), view=(9, 9), size=(64, 64), length=max_steps,
                           seed=0 if seed is None else seed)
        self._core.render_pixels = obs == "pixels"
        self._seeded = seed is not None
        n_sem = len(SEMANTIC_NAMES)
        if obs == "pixels":
            image = gym.spaces.Box(0, 255, (3, 64, 64), np.uint8)
        else:
            image = gym.spaces.Box(0.0, 1.0, (n_sem, self.view[1], self.view[0]), np.float32)
        vector = gym.spaces.Box(0.0, 1.0, (len(ITEMS) + 4 + 2,), np.float32)
        self.observation_space = gym.spaces.Dict({"image": image, "vector": vector})
        self.action_space = gym.spaces.Discrete(len(constants.actions))
        self._prev_ach: dict[str, int] = {}
        self._prev_health = 0
        self._ids = np.zeros(self.view, np.int64)
        self._visible: tuple[np.ndarray, list[str]] | None = None  # (ids, _visible_by_distance(ids)), once per view

    # --- gymnasium API ------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._core._seed, self._core._episode = int(seed), 0
        elif not self._seeded:
            self._core._seed, self._core._episode = int(self.np_random.integers(2**31 - 1)), 0
            self._seeded = True
        pixels = self._core.reset()
        self._prev_ach = dict(self._core._player.achievements)
        self._prev_health = self._core._player.health
        self._ids = self._local_ids()
        return self._observation(pixels), self._info(events=[])

    def step(self, action: int):
        ids = self._local_ids()  # the view as it is now (the world may have been changed since the last step)
        before = self._snapshot(ids, self._visible_now() if np.array_equal(ids, self._ids) else None)
        target = (before.pos[0] + before.facing[0], before.pos[1] + before.facing[1])
        pixels, reward, done, core_info = self._core.step(int(action))
        player = self._core._player
        events = []
        for name, count in player.achievements.items():
            if count > self._prev_ach.get(name, 0):
                events.append(name.replace("_", " "))
        if player.health < self._prev_health:
            events.append("take damage")
        dead = player.health <= 0
        if dead:
            events.append("die")
        self._prev_ach = dict(player.achievements)
        self._prev_health = player.health
        terminated, truncated = dead, bool(done and not dead)
        self._ids = self._local_ids()
        change = msg.diff(before, self._snapshot(self._ids, self._visible_now()), constants.actions[int(action)],
                          self._core._world[target][0])
        info = self._info(events=events, message=msg.render(change))
        if self.task_def is not None:
            reward, success = self.task_def.reward(events)
            terminated = terminated or success
            truncated = truncated and not terminated
            info["success"] = success
        return self._observation(pixels), float(reward), terminated, truncated, info

    def _visible_now(self) -> list[str]:
        """The names in the current view (:attr:`_ids`), nearest first; computed once per view."""
        if self._visible is None or self._visible[0] is not self._ids:
            self._visible = (self._ids, _visible_by_distance(self._ids))
        return self._visible[1]

    def _snapshot(self, ids: np.ndarray, visible: list[str] | None = None) -> msg.Snapshot:
        """What :func:`~llmguide.envs.crafter.messages.diff` compares, read from the live state (``visible``: the
        names in view of ``ids`` when known)."""
        player, world = self._core._player, self._core._world
        pos = (int(player.pos[0]), int(player.pos[1]))
        facing = (int(player.facing[0]), int(player.facing[1]))
        material, obj = world[(pos[0] + facing[0], pos[1] + facing[1])]
        kind = type(obj).__name__.lower() if obj is not None else None
        near: dict[str, int] = {}  # nearest distance of each object kind within SKELETON_RANGE
        r = msg.SKELETON_RANGE
        (ax, ay), objs = world.area, world._obj_map
        window = objs[max(pos[0] - r, 0):min(pos[0] + r + 1, ax), max(pos[1] - r, 0):min(pos[1] + r + 1, ay)]
        for i in window[window > 0].tolist():
            other = world._objects[i]
            if other is not None and other is not player:
                name = type(other).__name__.lower()
                d = abs(int(other.pos[0]) - pos[0]) + abs(int(other.pos[1]) - pos[1])
                near[name] = min(d, near.get(name, d))
        touching = {world[(pos[0] + dx, pos[1] + dy)][0] for dx, dy in ((0, 0), *DIRECTIONS)}
        return msg.Snapshot(
            inventory=dict(player.inventory), achievements=dict(player.achievements), sleeping=bool(player.sleeping),
            pos=pos, facing=facing, target=material, creature=kind if kind in msg.CREATURES else None,
            visible=frozenset(_visible_by_distance(ids) if visible is None else visible),
            touching=frozenset(touching & set(msg.TOUCH)),
            on_lava=world[pos][0] == "lava", zombie_adjacent=near.get("zombie", 99) == 1,
            arrow_near=near.get("arrow", 99) <= msg.ARROW_RANGE, skeleton_near="skeleton" in near)

    # --- observation and text -----------------------------------------------------------
    def _local_ids(self) -> np.ndarray:
        """Semantic ids of the local view, shape (width, height), 0 outside the world."""
        world, (px, py) = self._core._world, self._core._player.pos
        w, h = self.view
        x0, y0 = px - w // 2, py - h // 2
        out = np.zeros((w, h), np.int64)
        ax, ay = world.area
        xs, xe, ys, ye = max(x0, 0), min(x0 + w, ax), max(y0, 0), min(y0 + h, ay)
        out[xs - x0:xe - x0, ys - y0:ye - y0] = world._mat_map[xs:xe, ys:ye]
        objs = world._obj_map[xs:xe, ys:ye]
        n_mat = len(constants.materials) + 1
        for i, j in zip(*np.nonzero(objs), strict=True):
            obj = world._objects[objs[i, j]]
            out[xs - x0 + i, ys - y0 + j] = n_mat + OBJECT_TYPES.index(type(obj).__name__.lower())
        return out

    def _observation(self, pixels: np.ndarray | None) -> dict[str, np.ndarray]:
        player = self._core._player
        inv = np.array([player.inventory[k] for k in ITEMS], np.float32) / 9.0
        facing = np.zeros(4, np.float32)
        facing[DIRECTIONS.index(tuple(int(v) for v in player.facing))] = 1.0
        extra = np.array([float(player.sleeping), float(self._core._world.daylight)], np.float32)
        vector = np.concatenate([inv, facing, np.clip(extra, 0.0, 1.0)])
        if self.obs_mode == "pixels":
            image = np.ascontiguousarray(pixels.transpose(2, 0, 1))
        else:
            image = np.zeros(self.observation_space["image"].shape, np.float32)
            ids = self._ids.T  # (H, W)
            image[ids, np.arange(ids.shape[0])[:, None], np.arange(ids.shape[1])[None, :]] = 1.0
        return {"image": image, "vector": vector}

    def _info(self, events: list[str], message: str = "") -> dict[str, Any]:
        player, world = self._core._player, self._core._world
        visible = self._visible_now()
        target = player.pos + np.array(player.facing)
        material, obj = world[target]
        facing = type(obj).__name__.lower() if obj is not None else (material or "nothing")
        inventory = dict(player.inventory)
        info: dict[str, Any] = {
            "caption": caption(visible, facing, inventory, player.sleeping),
            "events": events,
            "message": message,
            "mission": self.task_def.goal if self.task_def else "",
            "achievements": dict(player.achievements),
            "inventory": inventory,
            "visible": list(visible),
            "facing": facing,
            "sleeping": bool(player.sleeping),
        }
        if self.task is not None:
            info["success"] = False
        return info


def _visible_by_distance(ids: np.ndarray) -> list[str]:
    """Names in the local view, nearest first (ties by name); the player itself is left out."""
    dist = _DISTANCES.get(ids.shape)
    if dist is None:
        w, h = ids.shape
        dist = _DISTANCES[ids.shape] = (np.abs(np.arange(w) - w // 2)[:, None] + np.abs(np.arange(h) - h // 2)[None, :])
    best = np.full(len(SEMANTIC_NAMES), 1 << 30)
    np.minimum.at(best, ids.ravel(), dist.ravel())
    seen = [(int(best[i]), SEMANTIC_NAMES[i]) for i in np.flatnonzero(best < 1 << 30) if i not in _UNSEEN]
    return [name for _, name in sorted(seen)]


_DISTANCES: dict[tuple[int, ...], np.ndarray] = {}
_UNSEEN = {i for i, n in enumerate(SEMANTIC_NAMES) if n is None or n == "player"}


_task_name = task_name  # the name Craftax-Classic and older code import


def make_crafter(env_cfg: Any, seed: int | None = None) -> gym.Env:
    """Build :class:`CrafterText` from an ``env`` config (keys obs, task, max_steps, size), with ELLM's
    139 text actions when ``actions: text`` (and its lenient rules with ``lenient_rules: true``)."""
    max_steps = cfg_get(env_cfg, "max_steps")
    env = CrafterText(obs=cfg_get(env_cfg, "obs", "symbolic"), task=cfg_get(env_cfg, "task"),
                      max_steps=None if max_steps is None else int(max_steps),
                      size=int(cfg_get(env_cfg, "size", 9)), seed=seed)
    lenient = lenient_rules(env_cfg)
    env = seen_map.wrap_env(env, env_cfg)
    if cfg_get(env_cfg, "actions", "primitive") == "text":
        from llmguide.envs.crafter.actions import CrafterTextActions

        return CrafterTextActions(env, lenient_rules=lenient)
    if lenient:
        raise ValueError("env.lenient_rules needs env.actions=text (the lenient rules come with the text actions)")
    return env


# The old name of env.lenient_rules (it named the paper the rules come from), accepted for this release only:
# true turns the lenient rules on, with one deprecation line.
OLD_LENIENT_RULES_KEY = "ellm_rules"


def lenient_rules(env_cfg: Any) -> bool:
    """``env.lenient_rules`` (a table costs 1 wood, attacks do >= 5 damage, the reward is the unlock reward only:
    the rule changes of ELLM's reference); its old name ``env.ellm_rules=true`` also, with a deprecation line."""
    if cfg_get(env_cfg, OLD_LENIENT_RULES_KEY):
        warnings.warn(f"env.{OLD_LENIENT_RULES_KEY} is deprecated, removed in the next release: use env.lenient_rules",
                      DeprecationWarning, stacklevel=2)
        return True
    return bool(cfg_get(env_cfg, "lenient_rules", False))
