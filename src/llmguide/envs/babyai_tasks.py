"""BK's BabyAI-Text tasks (Zhang et al. 2024, ``babyai_envs/``): one big room, a few distractors.

- ``GoToLocal-<Color><Type>-S<N>``: one ``N``×``N`` room, the target object (e.g. the red ball) and
  ``num_dists`` distractors (7 by default; never a second copy of the target), mission "go to the
  red ball", ``max_steps = N²`` (400 for S20), success reward ``1 − 0.9·steps/max_steps``.
  The paper's tasks are ``GoToLocal-{RedBall,PurpleBall,RedKey,PurpleKey}-S20``.
- ``Pretraining-S<N>``: the same room with ``num_dists + 1`` random objects and a "go to" mission
  on a random one of them: the data-collection task of BK's RND pre-collection.

Env options (``env.room_size``, ``env.num_dists``, ``env.max_steps``) override the name's defaults.
"""

from __future__ import annotations

import re

from minigrid.core.constants import COLOR_NAMES, COLOR_TO_IDX
from minigrid.envs.babyai.core.roomgrid_level import RejectSampling, RoomGridLevel
from minigrid.envs.babyai.core.verifier import GoToInstr, ObjDesc

PAPER_TASKS = ("GoToLocal-RedBall-S20", "GoToLocal-PurpleBall-S20", "GoToLocal-RedKey-S20",
               "GoToLocal-PurpleKey-S20", "Pretraining-S20")
_GOTO = re.compile(r"^GoToLocal-(?P<color>[A-Z][a-z]+)(?P<kind>Ball|Key|Box)-S(?P<size>\d+)$")
_PRETRAIN = re.compile(r"^Pretraining-S(?P<size>\d+)$")
DEFAULT_DISTRACTORS = 7


class SingleRoomGoTo(RoomGridLevel):
    """One ``room_size`` room: go to ``target`` (``(color, type)``, or None: a random object)."""

    def __init__(self, target: tuple[str, str] | None, room_size: int = 20, num_dists: int = DEFAULT_DISTRACTORS,
                 max_steps: int | None = None, **kwargs):
        self.target, self.num_dists = target, int(num_dists)
        super().__init__(num_rows=1, num_cols=1, room_size=int(room_size),
                         max_steps=int(max_steps or room_size ** 2), **kwargs)

    def gen_mission(self) -> None:
        self.place_agent()
        if self.target is None:
            objs = self.add_distractors(num_distractors=self.num_dists + 1, all_unique=False)
            target = self._rand_elem(objs)
            color, kind = target.color, target.type
        else:
            color, kind = self.target
            self.add_object(0, 0, kind, color)
            for obj in self.add_distractors(num_distractors=self.num_dists, all_unique=False):
                if obj.type == kind and obj.color == color:
                    raise RejectSampling("a distractor equals the target")
        self.check_objs_reachable()
        self.instrs = GoToInstr(ObjDesc(kind, color))


def parse_task(task: str) -> dict | None:
    """``{"target", "room_size"}`` for a BK task name, else None."""
    m = _GOTO.match(task)
    if m:
        color = m["color"].lower()
        if color not in COLOR_NAMES:
            raise ValueError(f"env.task: unknown colour {m['color']!r} in {task!r}; choose one of {COLOR_NAMES}")
        return {"target": (color, m["kind"].lower()), "room_size": int(m["size"])}
    m = _PRETRAIN.match(task)
    if m:
        return {"target": None, "room_size": int(m["size"])}
    return None


def build_bk_level(task: str, room_size: int | None = None, num_dists: int | None = None,
                   max_steps: int | None = None) -> SingleRoomGoTo | None:
    """The level of a BK task name (options override its defaults), or None if ``task`` is not one."""
    spec = parse_task(task)
    if spec is None:
        return None
    size = int(room_size or spec["room_size"])
    return SingleRoomGoTo(spec["target"], room_size=size,
                          num_dists=DEFAULT_DISTRACTORS if num_dists is None else int(num_dists),
                          max_steps=max_steps)


# --- BK oracle knowledge (ground truth, for llm=oracle) ---------------------------------------
def oracle_potential_program(vocab: list[str]) -> str:
    """BK-Code's oracle program: reads the mission ("go to the red ball") from ``obs['vector']``'s
    bag of words, finds that object in the egocentric one-hot image; Φ = 0.5 − distance/12 when it
    is visible (agent at row 6, column 3), −1 when not (the visibility bonus)."""
    words = {w: 4 + i for i, w in enumerate(vocab)}
    colors = {c: words[c] for c in COLOR_NAMES}
    kinds = {"key": (words["key"], 5), "ball": (words["ball"], 6), "box": (words["box"], 7)}
    channels = {c: 11 + COLOR_TO_IDX[c] for c in COLOR_NAMES}
    return f'''import numpy as np

COLORS = {colors!r}          # colour word -> index in obs["vector"]
KINDS = {kinds!r}       # type word -> (index in obs["vector"], object-type channel)
COLOR_CHANNEL = {channels!r}   # colour word -> colour channel of obs["image"]


def potential(obs, caption):
    image, vector = np.asarray(obs["image"]), np.asarray(obs["vector"])
    color = next((c for c, i in COLORS.items() if vector[i] > 0), None)
    kind = next((k for k, (i, _) in KINDS.items() if vector[i] > 0), None)
    if kind is None:
        return 0.0
    mask = image[KINDS[kind][1]] > 0.5
    if color is not None:
        mask = mask & (image[COLOR_CHANNEL[color]] > 0.5)
    rows, cols = np.nonzero(mask)
    if len(rows) == 0:
        return -1.0
    distance = int(np.min(np.abs(rows - 6) + np.abs(cols - 3)))
    return 0.5 - distance / 12.0
'''


_SEE = re.compile(r"You see an? (?:(?:open|closed|locked) )?(\w+ \w+) (.*)")
_OFFSET = re.compile(r"(\d+) steps? (left|right|forward)")


def caption_potential(caption: str, target: str) -> float:
    """The oracle program's Φ computed from a caption: 0.5 − distance/12 to ``target`` ("red ball")
    if the caption mentions it, else −1."""
    best = None
    for sentence in caption.split(","):
        m = _SEE.match(sentence.strip())
        if not m or m.group(1) != target:
            continue
        dist = sum(int(n) for n, _ in _OFFSET.findall(m.group(2)))
        best = dist if best is None else min(best, dist)
    return -1.0 if best is None else 0.5 - best / 12.0


def mission_target(mission: str) -> str | None:
    """"go to the red ball" -> "red ball" (None for other missions)."""
    m = re.match(r"go to (?:the|a) (\w+ \w+)$", mission.strip().lower())
    return m.group(1) if m else None


def oracle_goals(mission: str) -> list[str]:
    """BK-Goal's oracle library for a go-to mission."""
    target = mission_target(mission)
    if target is None:
        return []
    return [f"go to the {target}", f"approach the {target}", f"you see a {target} 1 step forward"]
