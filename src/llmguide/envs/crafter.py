"""Crafter with captions, events from real state changes, single-task variants and the Crafter score.

Observation (``obs: symbolic``, the default): ``image`` = one-hot semantic planes of the local
9x7 view (C=19, H=7, W=9, float32) and ``vector`` = inventory/9, facing one-hot, sleeping,
daylight.  With ``obs: pixels`` the ``image`` is Crafter's own (3, 64, 64) uint8 render; the
render is skipped entirely in symbolic mode.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Sequence
from typing import Any

import crafter
import crafter.engine
import gymnasium as gym
import numpy as np
from crafter import constants

from llmguide.envs.base import Oracle, cfg_get, normalize_goal

ACHIEVEMENTS: list[str] = list(constants.achievements)  # the 22 names, e.g. "collect_wood"
GOALS: list[str] = [a.replace("_", " ") for a in ACHIEVEMENTS]
EVENTS: list[str] = GOALS + ["take damage", "die"]
ITEMS: list[str] = list(constants.items)  # health, food, drink, energy, sapling, wood, ...
VITALS = ("health", "food", "drink", "energy")
FEELINGS = {"health": "hurt", "food": "hungry", "drink": "thirsty", "energy": "sleepy"}
FEEL_BELOW = 5  # "You feel thirsty." when drink < 5 (of 9)
OBJECT_TYPES = ["player", "cow", "zombie", "skeleton", "arrow", "plant"]
SEMANTIC_NAMES: list[str | None] = [None, *constants.materials, *OBJECT_TYPES]  # 19 classes
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

    def __init__(self, obs: str = "symbolic", task: str | None = None, max_steps: int = 10000,
                 size: int = 9, seed: int | None = None):
        if obs not in ("symbolic", "pixels"):
            raise ValueError(f"env.obs must be 'symbolic' or 'pixels', got {obs!r}")
        if size < 3 or size % 2 == 0:
            raise ValueError(f"env.size (local view width) must be odd and >= 3, got {size}")
        self.task = _task_name(task)
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
        info = self._info(events=events)
        if self.task is not None:
            success = self.task.replace("_", " ") in events
            reward = 1.0 if success else 0.0
            terminated = terminated or success
            info["success"] = success
        return self._observation(pixels), float(reward), terminated, truncated, info

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

    def _info(self, events: list[str]) -> dict[str, Any]:
        player, world = self._core._player, self._core._world
        visible = _visible_by_distance(self._ids)
        target = player.pos + np.array(player.facing)
        material, obj = world[target]
        facing = type(obj).__name__.lower() if obj is not None else (material or "nothing")
        inventory = dict(player.inventory)
        info: dict[str, Any] = {
            "caption": caption(visible, facing, inventory, player.sleeping),
            "events": events,
            "mission": self.task.replace("_", " ") if self.task else "",
            "achievements": dict(player.achievements),
            "inventory": inventory,
            "visible": visible,
            "facing": facing,
            "sleeping": bool(player.sleeping),
        }
        if self.task is not None:
            info["success"] = False
        return info


def _visible_by_distance(ids: np.ndarray) -> list[str]:
    """Names in the local view, nearest first (ties by name); the player itself is left out."""
    w, h = ids.shape
    cx, cy = w // 2, h // 2
    best: dict[str, int] = {}
    for i in range(w):
        for j in range(h):
            name = SEMANTIC_NAMES[ids[i, j]]
            if name is None or name == "player":
                continue
            d = abs(i - cx) + abs(j - cy)
            if d < best.get(name, 1 << 30):
                best[name] = d
    return sorted(best, key=lambda n: (best[n], n))


def caption(visible: Sequence[str], facing: str, inventory: dict[str, int], sleeping: bool = False) -> str:
    """"You see tree, cow, water. You face tree. You have 2 wood. You feel thirsty." """
    parts = []
    if visible:
        parts.append("You see " + ", ".join(visible) + ".")
    parts.append(f"You face {facing}.")
    items = [f"{n} {k.replace('_', ' ')}" for k, n in inventory.items() if k not in VITALS and n > 0]
    if items:
        parts.append("You have " + ", ".join(items) + ".")
    feelings = [FEELINGS[k] for k in VITALS if inventory.get(k, 9) < FEEL_BELOW]
    if feelings:
        parts.append("You feel " + ", ".join(feelings) + ".")
    if sleeping:
        parts.append("You are sleeping.")
    return " ".join(parts)


def parse_caption(text: str) -> dict[str, Any]:
    """Inverse of :func:`caption`: visible names, facing, inventory (vitals 9 unless felt low)."""
    inventory = {k: 0 for k in ITEMS}
    inventory.update({k: 9 for k in VITALS})
    visible: list[str] = []
    facing = "nothing"
    for sentence in re.split(r"(?<=\.)\s+", text.strip()):
        sentence = sentence.strip().rstrip(".").lower()
        if sentence.startswith("you see "):
            visible = [s.strip() for s in sentence[8:].split(",") if s.strip()]
        elif sentence.startswith("you face "):
            facing = sentence[9:].strip()
        elif sentence.startswith("you have "):
            for part in sentence[9:].split(","):
                m = re.match(r"\s*(\d+)\s+(.+)", part)
                if m and m.group(2).strip().replace(" ", "_") in inventory:
                    inventory[m.group(2).strip().replace(" ", "_")] = int(m.group(1))
        elif sentence.startswith("you feel "):
            for feel in sentence[9:].split(","):
                for k, v in FEELINGS.items():
                    if feel.strip() == v:
                        inventory[k] = FEEL_BELOW - 1
    if facing not in visible and facing != "nothing":
        visible.append(facing)
    return {"visible": visible, "facing": facing, "inventory": inventory, "achievements": {}}


def _task_name(task: str | None) -> str | None:
    if task in (None, "", "null", "none"):
        return None
    name = normalize_goal(task).replace(" ", "_")
    if name not in ACHIEVEMENTS:
        raise ValueError(f"env.task: unknown Crafter task {task!r}; choose one of {ACHIEVEMENTS} or null")
    return name


# --- score -----------------------------------------------------------------------------------
def crafter_score(success_rates_percent: Sequence[float]) -> float:
    """Crafter score (%) = exp(mean ln(1 + s_i)) - 1 over the per-achievement success rates s_i in %."""
    rates = np.asarray(list(success_rates_percent), np.float64)
    if rates.size == 0:
        raise ValueError("crafter_score needs at least one success rate")
    if np.any(rates < 0) or np.any(rates > 100):
        raise ValueError(f"success rates must be percentages in [0, 100], got {rates.tolist()}")
    return float(np.exp(np.mean(np.log1p(rates))) - 1.0)


def achievement_summary(episodes: Sequence[dict[str, int]]) -> dict[str, Any]:
    """From per-episode achievement count dicts: success rate (%) per achievement, score, mean count.

    Returns ``{"success_rates_percent": {name: %}, "crafter_score_percent": float,
    "achievements_per_episode": float, "episodes": n}``.
    """
    if not episodes:
        raise ValueError("achievement_summary needs at least one episode")
    rates = {}
    for name in ACHIEVEMENTS:
        rates[name] = 100.0 * float(np.mean([1.0 if ep.get(name, 0) > 0 else 0.0 for ep in episodes]))
    per_episode = [sum(1 for n in ACHIEVEMENTS if ep.get(n, 0) > 0) for ep in episodes]
    return {
        "success_rates_percent": rates,
        "crafter_score_percent": crafter_score(list(rates.values())),
        "achievements_per_episode": float(np.mean(per_episode)),
        "episodes": len(episodes),
    }


# --- oracle ----------------------------------------------------------------------------------
_SOURCE = {"wood": "tree", "stone": "stone", "coal": "coal", "iron": "iron", "diamond": "diamond",
           "drink": "water", "sapling": "grass"}


def _requirements() -> dict[str, tuple[dict[str, int], list[str]]]:
    """goal -> (inventory needed, things that must be visible), read from Crafter's rules."""
    req: dict[str, tuple[dict[str, int], list[str]]] = {}
    for material, rule in constants.collect.items():
        for item in rule["receive"]:
            req[f"collect {item}"] = (dict(rule["require"]), [material])
    for name, rule in constants.place.items():
        req[f"place {name}"] = (dict(rule["uses"]), [])
    for name, rule in constants.make.items():
        req[f"make {name.replace('_', ' ')}"] = (dict(rule["uses"]), list(rule["nearby"]))
    req.update({"eat cow": ({}, ["cow"]), "eat plant": ({}, ["plant"]),
                "defeat zombie": ({}, ["zombie"]), "defeat skeleton": ({}, ["skeleton"]),
                "wake up": ({}, [])})
    return req


def _prerequisites() -> dict[str, list[str]]:
    pre: dict[str, list[str]] = {}
    for goal, (items, near) in _requirements().items():
        needs = []
        for item in items:
            if item in _SOURCE:
                needs.append(f"collect {item}")
            else:  # a tool
                needs.append(f"make {item.replace('_', ' ')}")
        if goal.startswith("make "):
            needs += [f"place {n}" for n in near]
        pre[goal] = sorted(set(needs))
    pre["eat plant"] = ["place plant"]
    return {g: pre[g] for g in GOALS}


class CrafterOracle(Oracle):
    """The 22 achievements, their prerequisites from Crafter's rules, feasibility from the state."""

    family = "crafter"
    goals = GOALS
    prerequisites = _prerequisites()
    requirements = _requirements()

    def feasible(self, info: dict) -> set[str]:
        inventory = info.get("inventory") or {}
        visible = set(info.get("visible") or ()) | {info.get("facing")}
        out = set()
        for goal, (items, near) in self.requirements.items():
            if any(inventory.get(k, 0) < v for k, v in items.items()):
                continue
            if any(n not in visible for n in near):
                continue
            if goal == "wake up" and not (inventory.get("energy", 9) < 9 or info.get("sleeping")):
                continue
            out.add(goal)
        return out

    def achieved(self, info: dict) -> set[str]:
        ach = info.get("achievements") or {}
        return {k.replace("_", " ") for k, v in ach.items() if v > 0}

    def feasible_from_caption(self, caption_text: str) -> set[str]:
        return self.feasible(parse_caption(caption_text))

    def suggest_from_caption(self, caption: str) -> list[str]:
        state = parse_caption(caption)
        feasible = self.feasible(state)
        have = state["inventory"]
        # what the caption shows is already owned is not suggested again (e.g. "make wood pickaxe")
        owned = {f"make {k.replace('_', ' ')}" for k in constants.make if have.get(k, 0) > 0}
        return [g for g in self.goals if g in feasible and g not in owned]

    # BK oracle knowledge (llm=oracle answering BK's labelling prompts; see envs/crafter_bk.py), from
    # ``requirements`` (so Craftax-Classic's oracle answers with its own recipe costs)
    def bk_program(self, mission: str = "") -> str:
        from llmguide.envs.crafter_bk import oracle_program

        return oracle_program(mission, self)

    def bk_progress(self, captions: list[str], mission: str) -> float:
        from llmguide.envs.crafter_bk import window_progress

        return window_progress(captions, mission, self)

    def bk_goals(self, mission: str) -> list[str]:
        from llmguide.envs.crafter_bk import oracle_goals

        return oracle_goals(mission, self)


def make_crafter(env_cfg: Any, seed: int | None = None) -> gym.Env:
    """Build :class:`CrafterText` from an ``env`` config (keys obs, task, max_steps, size), with ELLM's
    139 text actions when ``actions: text`` (and its rule changes with ``ellm_rules: true``)."""
    env = CrafterText(obs=cfg_get(env_cfg, "obs", "symbolic"), task=cfg_get(env_cfg, "task"),
                      max_steps=int(cfg_get(env_cfg, "max_steps", 10000)),
                      size=int(cfg_get(env_cfg, "size", 9)), seed=seed)
    if cfg_get(env_cfg, "actions", "primitive") == "text":
        from llmguide.envs.crafter_actions import CrafterTextActions

        return CrafterTextActions(env, ellm_rules=bool(cfg_get(env_cfg, "ellm_rules", False)))
    if cfg_get(env_cfg, "ellm_rules", False):
        raise ValueError("env.ellm_rules needs env.actions=text (ELLM's rules come with its action space)")
    return env
