"""BabyAI-Text on current ``minigrid`` BabyAI levels (GLAM's description format, made faithful).

Descriptions follow GLAM's strings ("You see a wall 2 steps forward", "You see a red ball 1 step
left and 2 steps forward", "You carry a blue ball") with two fixes (GLAM issue #20): walls are
found by scanning forward/left/right *through* objects (objects never hide a wall, doors are part
of the wall they sit in), and only cells the agent really sees (minigrid's visibility mask) are
described.  Objects are listed nearest first, then left to right, then near to far.

Tasks (``task:`` in the env config): GoToLocal, PickupLocal, PutNextLocal, Open, Unlock,
GoToRedBall, any stock ``BabyAI-*`` id, and MixedTrainLocal / MixedTestLocal.  The mixed levels
sample one of five families per episode from the reset seed: go to, pick up, put next,
"pick up A then go to B" (or "go to B after you pick up A"), and open (unlock a locked door between
two rooms with its key).  As in GLAM, MixedTrainLocal never mentions the held-out combinations
yellow box, red key, red door, green ball, grey door; MixedTestLocal's missions always mention one
of them (its open family uses red or grey doors).  PickupPickupLocal ("pick up A, then pick up B")
is GLAM's new-composition test: a composition no mixed level trains on.
"""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

import gymnasium as gym
import numpy as np
from minigrid.core.constants import COLOR_NAMES, IDX_TO_COLOR, IDX_TO_OBJECT, OBJECT_TO_IDX
from minigrid.envs.babyai.core.roomgrid_level import RejectSampling, RoomGridLevel
from minigrid.envs.babyai.core.verifier import (
    AfterInstr,
    BeforeInstr,
    GoToInstr,
    ObjDesc,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)

from llmguide.core.config import cfg_get
from llmguide.envs.babyai.tasks import BIG_ROOM_TASKS, build_big_room_level, parse_task

ACTION_STRINGS = ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]
HELD_OUT = ("yellow box", "red key", "red door", "green ball", "grey door")
OBJ_TYPES = ("ball", "box", "key")
DOOR_STATES = {0: "open", 1: "closed", 2: "locked"}
VOCAB = ["go", "to", "the", "a", "pick", "up", "put", "next", "open", "door", "ball", "box", "key",
         *COLOR_NAMES, "then", "after", "you", "and", "in", "front", "of", "behind", "on", "your",
         "left", "right", "<unk>"]
_WORD = {w: i for i, w in enumerate(VOCAB)}
N_OBJ, N_COL, N_STATE = len(IDX_TO_OBJECT), len(IDX_TO_COLOR), 3
VIEW = 7
AGENT = (VIEW // 2, VIEW - 1)  # agent cell in the egocentric view, facing "up"
_PLANE_OFFSETS = np.array([0, N_OBJ, N_OBJ + N_COL])
_CELLS = np.arange(VIEW * VIEW)[:, None]


# --- levels ------------------------------------------------------------------------------
class LocalLevel(RoomGridLevel):
    """One 8x8 room (or two for ``open``) with 8 distractors; GLAM's mixed task families.

    ``split``: None (any combination), "train" (held-out combinations never mentioned) or "test"
    (a held-out combination always mentioned).
    """

    FAMILIES = ("goto", "pickup", "putnext", "pickup_goto", "open", "pickup_pickup")
    MIXED = FAMILIES[:5]   # the mixed levels' families; "pickup_pickup" is GLAM's new-composition test

    def __init__(self, family: str, split: str | None = None, num_dists: int = 8, room_size: int = 8, **kwargs):
        if family not in self.FAMILIES:
            raise ValueError(f"unknown BabyAI family {family!r}; choose one of {self.FAMILIES}")
        self.family, self.split, self.num_dists = family, split, num_dists
        cols = 2 if family == "open" else 1
        super().__init__(num_rows=1, num_cols=cols, room_size=room_size, **kwargs)

    def _allowed(self, obj) -> bool:
        name = f"{obj.color} {obj.type}"
        return self.split != "train" or name not in HELD_OUT

    def gen_mission(self) -> None:
        if self.family == "open":
            self._gen_open()
            return
        self.place_agent()
        objs = self.add_distractors(num_distractors=self.num_dists, all_unique=True)
        if self.split == "test":  # make sure a held-out object exists, then mention it
            held = [h for h in HELD_OUT if h.split()[1] in OBJ_TYPES]
            color, kind = self._rand_elem(held).split()
            if not any(o.color == color and o.type == kind for o in objs):
                obj, _ = self.add_object(0, 0, kind, color)
                objs.append(obj)
        self.check_objs_reachable()
        allowed = [o for o in objs if self._allowed(o)]
        held = [o for o in objs if f"{o.color} {o.type}" in HELD_OUT]
        if self.split == "test":
            first, rest = self._rand_elem(held), objs
        else:
            first, rest = self._rand_elem(allowed), allowed
        other = self._rand_elem([o for o in rest if o is not first])
        a, b = (first, other) if self._rand_bool() else (other, first)
        da, db = ObjDesc(a.type, a.color), ObjDesc(b.type, b.color)
        if self.family == "goto":
            self.instrs = GoToInstr(ObjDesc(first.type, first.color))
        elif self.family == "pickup":
            self.instrs = PickupInstr(ObjDesc(first.type, first.color))
        elif self.family == "putnext":
            self.instrs = PutNextInstr(da, db)
        elif self.family == "pickup_pickup":
            self.instrs = BeforeInstr(PickupInstr(da), PickupInstr(db))
        elif self._rand_bool():
            self.instrs = BeforeInstr(PickupInstr(da), GoToInstr(db))
        else:
            self.instrs = AfterInstr(GoToInstr(db), PickupInstr(da))

    def _gen_open(self) -> None:
        colors = {"train": ["yellow", "green", "blue", "purple"], "test": ["red", "grey"]}.get(
            self.split, list(COLOR_NAMES))
        color = self._rand_elem(colors)
        door, _ = self.add_door(0, 0, 0, color=color, locked=True)
        self.add_object(0, 0, "key", color)
        for obj in self.add_distractors(0, 0, num_distractors=3, all_unique=False):
            if obj.type == "key" and obj.color == color:
                raise RejectSampling("a second key of the door's colour")
        self.place_agent(0, 0)
        self.instrs = OpenInstr(ObjDesc("door", color))


STOCK_TASKS = {"GoToLocal": "BabyAI-GoToLocal-v0", "PutNextLocal": "BabyAI-PutNextLocal-v0",
               "Unlock": "BabyAI-UnlockLocal-v0", "GoToRedBall": "BabyAI-GoToRedBall-v0",
               "GoToRedBallGrey": "BabyAI-GoToRedBallGrey-v0", "GoToObj": "BabyAI-GoToObj-v0"}
CUSTOM_TASKS = {"PickupLocal": (["pickup"], None), "Open": (["open"], None),
                "MixedTrainLocal": (list(LocalLevel.MIXED), "train"),
                "MixedTestLocal": (list(LocalLevel.MIXED), "test"),
                "PickupPickupLocal": (["pickup_pickup"], None)}
TASKS = sorted([*STOCK_TASKS, *CUSTOM_TASKS, *BIG_ROOM_TASKS])


def _build_levels(task: str, max_steps: int | None, room_size: int | None = None,
                  num_dists: int | None = None) -> list[RoomGridLevel]:
    big_room = build_big_room_level(task, room_size, num_dists, max_steps)
    if big_room is not None:
        return [big_room]
    kwargs: dict[str, Any] = {"max_steps": max_steps} if max_steps else {}
    if num_dists is not None:
        kwargs["num_dists"] = int(num_dists)
    if task in CUSTOM_TASKS:
        if room_size:
            kwargs["room_size"] = int(room_size)
        families, split = CUSTOM_TASKS[task]
        return [LocalLevel(f, split=split, **kwargs) for f in families]
    env_id = STOCK_TASKS.get(task, task)
    if not env_id.startswith("BabyAI-") or env_id not in gym.registry:
        raise ValueError(f"env.task: {task_problem({'task': task})}")
    if room_size:
        kwargs["room_size"] = int(room_size)
    try:
        return [gym.make(env_id, **kwargs).unwrapped]
    except TypeError as err:
        raise ValueError(f"env.task={task!r} does not take the options {sorted(kwargs)}: {err}") from err


def task_problem(env_cfg: Any) -> str | None:
    """Why ``env.task`` names no BabyAI task (None when it names one), without building its level: checked
    when the config loads, so a sweep's typo fails before its first run."""
    task = str(cfg_get(env_cfg, "task", "GoToLocal"))
    try:
        if task in CUSTOM_TASKS or parse_task(task) is not None:
            return None
    except ValueError as err:   # a big-room task name with an unknown colour
        return str(err).removeprefix("env.task: ")
    env_id = STOCK_TASKS.get(task, task)
    if env_id.startswith("BabyAI-") and env_id in gym.registry:
        return None
    return (f"unknown BabyAI task {task!r}; choose one of {TASKS}, GoToLocal-<Color><Ball|Key|Box>-S<N>, "
            "Pretraining-S<N> or a registered BabyAI-*-v0 id")


# --- description ---------------------------------------------------------------------------
def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def _offset(right: int, forward: int) -> str:
    side = _steps(abs(right)) + (" right" if right > 0 else " left")
    if right == 0:
        return _steps(forward) + " forward"
    if forward == 0:
        return side
    return f"{side} and {_steps(forward)} forward"


_SKIP = frozenset(OBJECT_TO_IDX[n] for n in ("unseen", "empty", "wall", "floor", "agent"))
_WALLISH = frozenset((OBJECT_TO_IDX["wall"], OBJECT_TO_IDX["door"]))  # a door sits in a wall
_UNSEEN = OBJECT_TO_IDX["unseen"]
# every cell but the agent's, as (x, y, right, forward), nearest first, then left to right, near to far
_ORDER = sorted(((x, y, x - AGENT[0], AGENT[1] - y) for x in range(VIEW) for y in range(VIEW)
                 if (x, y) != AGENT), key=lambda c: (abs(c[2]) + c[3], c[2], c[3]))
_RAYS = [(label, [(AGENT[0] + dx * k, AGENT[1] + dy * k) for k in range(1, VIEW)
                  if 0 <= AGENT[0] + dx * k < VIEW and 0 <= AGENT[1] + dy * k < VIEW])
         for label, (dx, dy) in (("forward", (0, -1)), ("left", (-1, 0)), ("right", (1, 0)))]


def _walls(kinds: list[list[int]]) -> list[str]:
    """Nearest wall straight forward, left and right, scanning through objects (a door is in a wall)."""
    out = []
    for label, ray in _RAYS:
        for k, (x, y) in enumerate(ray, start=1):
            kind = kinds[x][y]
            if kind == _UNSEEN:
                break
            if kind in _WALLISH:
                out.append(f"You see a wall {_steps(k)} {label}")
                break
    return out


def _objects(image: np.ndarray) -> list[tuple[str, str | None, int, int]]:
    """Visible objects as (name, door state or None, right, forward), nearest first, then left
    to right, then near to far; the agent's own cell (what it carries) is left out."""
    cells = image.tolist()
    out = []
    for x, y, right, forward in _ORDER:
        kind, color, state = cells[x][y]
        if kind in _SKIP:
            continue
        name = f"{IDX_TO_COLOR[color]} {IDX_TO_OBJECT[kind]}"
        out.append((name, DOOR_STATES[state] if IDX_TO_OBJECT[kind] == "door" else None, right, forward))
    return out


def _sentence(name: str, state: str | None, right: int, forward: int) -> str:
    if state is None:
        return f"You see a {name} {_offset(right, forward)}"
    article = "an" if state == "open" else "a"
    return f"You see {article} {state} {name} {_offset(right, forward)}"


def describe(image: np.ndarray, carrying: Any = None,
             objects: list[tuple[str, str | None, int, int]] | None = None) -> list[str]:
    """GLAM-style sentences for a (7, 7, 3) egocentric minigrid image (unseen cells are skipped)."""
    out = [f"You carry a {carrying.color} {carrying.type}"] if carrying is not None else []
    out += _walls(image[:, :, 0].tolist())
    out += [_sentence(*obj) for obj in (objects if objects is not None else _objects(image))]
    return out


def mission_bow(mission: str) -> np.ndarray:
    """Bag of words of a mission over the fixed BabyAI vocabulary (unknown words -> <unk>)."""
    vec = np.zeros(len(VOCAB), np.float32)
    for word in re.findall(r"[a-z]+", mission.lower()):
        vec[_WORD.get(word, _WORD["<unk>"])] += 1.0
    return vec


# --- env -----------------------------------------------------------------------------------
class BabyAIText(gym.Env):
    """BabyAI level with GLAM text in ``info``; 6 actions; task family sampled per episode."""

    metadata = {"render_modes": []}
    action_strings = list(ACTION_STRINGS)

    def __init__(self, task: str = "GoToLocal", max_steps: int | None = None, room_size: int | None = None,
                 num_dists: int | None = None):
        self.task = task
        self.levels = _build_levels(task, max_steps, room_size, num_dists)
        self.level: RoomGridLevel = self.levels[0]
        image = gym.spaces.Box(0.0, 1.0, (N_OBJ + N_COL + N_STATE, VIEW, VIEW), np.float32)
        vector = gym.spaces.Box(0.0, np.inf, (4 + len(VOCAB),), np.float32)
        self.observation_space = gym.spaces.Dict({"image": image, "vector": vector})
        self.action_space = gym.spaces.Discrete(len(ACTION_STRINGS))
        self._episode_events: dict[str, None] = {}  # distinct events so far, in order

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.level = self.levels[int(self.np_random.integers(len(self.levels)))]
        with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints rejected samples
            obs, _ = self.level.reset(seed=int(self.np_random.integers(2**31 - 1)))
        self._episode_events = {}
        self.last_obs = obs
        return self._observation(obs), self._info(obs, [], False)

    def step(self, action: int):
        level = self.level
        before_carry = level.carrying
        front = level.grid.get(*level.front_pos)
        front_open = getattr(front, "is_open", None)
        obs, reward, terminated, truncated, _ = level.step(int(action))
        self.last_obs = obs
        events = []
        if level.carrying is not before_carry:
            if before_carry is not None:
                events.append(f"drop the {before_carry.color} {before_carry.type}")
                events += [f"put the {before_carry.color} {before_carry.type} next to the {o}"
                           for o in self._neighbours(before_carry)]
            if level.carrying is not None:
                events.append(f"pick up the {level.carrying.color} {level.carrying.type}")
        if front is not None and front.type == "door" and front_open is not None \
                and front.is_open != front_open:
            events.append(f"{'open' if front.is_open else 'close'} the {front.color} door")
        new_front = level.grid.get(*level.front_pos)
        if new_front is not None and new_front.type != "wall" and new_front is not front \
                and new_front is not before_carry:
            events.append(f"go to the {new_front.color} {new_front.type}")
        for event in events:
            self._episode_events.setdefault(event)
        success = bool(terminated and reward > 0)
        info = self._info(obs, events, success)
        return self._observation(obs), float(reward), bool(terminated), bool(truncated), info

    def _neighbours(self, obj) -> list[str]:
        if obj.cur_pos is None:
            return []
        x, y = obj.cur_pos
        out = []
        for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            other = self.level.grid.get(x + dx, y + dy)
            if other is not None and other.type in OBJ_TYPES + ("door",):
                out.append(f"{other.color} {other.type}")
        return out

    def _observation(self, obs: dict) -> dict[str, np.ndarray]:
        idx = obs["image"].transpose(1, 0, 2).reshape(VIEW * VIEW, 3).astype(np.intp)  # row-major
        np.minimum(idx[:, 2], 2, out=idx[:, 2])
        idx += _PLANE_OFFSETS
        planes = np.zeros((VIEW * VIEW, N_OBJ + N_COL + N_STATE), np.float32)
        planes[_CELLS, idx] = 1.0
        planes = np.ascontiguousarray(planes.T).reshape(-1, VIEW, VIEW)
        direction = np.zeros(4, np.float32)
        direction[int(obs["direction"])] = 1.0
        return {"image": planes, "vector": np.concatenate([direction, mission_bow(obs["mission"])])}

    def _info(self, obs: dict, events: list[str], success: bool) -> dict[str, Any]:
        level = self.level
        objects = _objects(obs["image"])
        descriptions = describe(obs["image"], level.carrying, objects)
        visible = [name for name, _, _, _ in objects]
        doors = {name: state for name, state, _, _ in objects if state is not None}
        front = level.grid.get(*level.front_pos)
        return {
            "caption": ", ".join(descriptions),
            "descriptions": descriptions,
            "events": events,
            "mission": str(obs["mission"]),
            "success": success,
            "visible": visible,
            "doors": doors,
            "front": "nothing" if front is None else ("wall" if front.type == "wall"
                                                      else f"{front.color} {front.type}"),
            "carrying": "" if level.carrying is None else f"{level.carrying.color} {level.carrying.type}",
            "episode_events": list(self._episode_events),
            "family": getattr(level, "family", self.task),
        }


def make_babyai(env_cfg: Any, seed: int | None = None) -> BabyAIText:
    """Build :class:`BabyAIText` from an ``env`` config (keys task, max_steps, room_size, num_dists)."""
    max_steps, room_size, num_dists = (cfg_get(env_cfg, k) for k in ("max_steps", "room_size", "num_dists"))
    return BabyAIText(task=str(cfg_get(env_cfg, "task", "GoToLocal")),
                      max_steps=int(max_steps) if max_steps else None,
                      room_size=int(room_size) if room_size else None,
                      num_dists=None if num_dists is None else int(num_dists))


# --- bot demonstrations --------------------------------------------------------------------
def bot_demonstrations(env_cfg: Any, num_episodes: int, seed: int) -> list[dict[str, Any]]:
    """Expert episodes from minigrid's ``BabyAIBot`` (:func:`~llmguide.envs.babyai.bot.bot_episodes`, seeds
    ``seed + i``): mission, captions, actions, rewards, success; ``bot_error`` names a failure (the episode
    is kept as it stands).  ``captions[t]`` is the text the agent saw before ``actions[t]``; ``rewards[t]`` follows it.
    """
    from llmguide.envs.babyai.bot import bot_episodes

    return [{"mission": ep.mission, "captions": [i["caption"] for i in ep.infos[:-1]], "actions": ep.actions,
             "action_strings": [ACTION_STRINGS[a] for a in ep.actions], "rewards": ep.rewards, "success": ep.success,
             "max_steps": ep.max_steps, "bot_error": ep.error}
            for ep in bot_episodes([make_babyai(env_cfg)], range(seed, seed + num_episodes))]
