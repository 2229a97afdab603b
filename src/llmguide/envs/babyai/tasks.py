"""Big-room BabyAI-Text tasks: one big room, a few distractors (the tasks of BK, Zhang et al. 2024, ``babyai_envs/``;
any method can run on them, as the bot and the baselines do).

- ``GoToLocal-<Color><Type>-S<N>``: one ``N``×``N`` room, the target object (e.g. the red ball) and
  ``num_dists`` distractors (7 by default; never a second copy of the target), mission "go to the
  red ball", ``max_steps = N²`` (400 for S20), success reward ``1 − 0.9·steps/max_steps``.
  The paper's tasks are ``GoToLocal-{RedBall,PurpleBall,RedKey,PurpleKey}-S20``.
- ``Pretraining-S<N>``: the same room with ``num_dists + 1`` random objects and a "go to" mission
  on a random one of them: a data-collection task (BK's RND pre-collection).

Env options (``env.room_size``, ``env.num_dists``, ``env.max_steps``) override the name's defaults.
"""

from __future__ import annotations

import re

from minigrid.core.constants import COLOR_NAMES
from minigrid.envs.babyai.core.roomgrid_level import RejectSampling, RoomGridLevel
from minigrid.envs.babyai.core.verifier import GoToInstr, ObjDesc

BIG_ROOM_TASKS = ("GoToLocal-RedBall-S20", "GoToLocal-PurpleBall-S20", "GoToLocal-RedKey-S20",
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
    """``{"target", "room_size"}`` for a big-room task name, else None."""
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


def build_big_room_level(task: str, room_size: int | None = None, num_dists: int | None = None,
                         max_steps: int | None = None) -> SingleRoomGoTo | None:
    """The level of a big-room task name (options override its defaults), or None if ``task`` is not one."""
    spec = parse_task(task)
    if spec is None:
        return None
    size = int(room_size or spec["room_size"])
    return SingleRoomGoTo(spec["target"], room_size=size,
                          num_dists=DEFAULT_DISTRACTORS if num_dists is None else int(num_dists),
                          max_steps=max_steps)
