"""BabyAI-Text's oracle: the goal vocabulary, prerequisites from missions, feasibility from captions (the
methods' own oracle answerers, e.g. :mod:`llmguide.methods.bk.babyai`, build on it)."""

from __future__ import annotations

import re

from minigrid.core.constants import COLOR_NAMES

from llmguide.envs.babyai.env import OBJ_TYPES
from llmguide.envs.base import Oracle, normalize_goal

# --- vocabulary --------------------------------------------------------------------------------
_THINGS = [f"{c} {t}" for c in COLOR_NAMES for t in (*OBJ_TYPES, "door")] + \
    [t for t in (*OBJ_TYPES, "door")]


def _goal_vocabulary() -> list[str]:
    goals = [f"go to the {x}" for x in _THINGS]
    goals += [f"pick up the {x}" for x in _THINGS if not x.endswith("door")]
    goals += [f"drop the {x}" for x in _THINGS if not x.endswith("door")]
    goals += [f"open the {x}" for x in _THINGS if x.endswith("door")]
    goals += [f"put the {x} next to the {y}" for x in _THINGS if not x.endswith("door")
              for y in _THINGS if y != x]
    return goals


def _matches(desc: str, name: str) -> bool:
    """'ball' matches 'red ball'; 'red ball' matches only 'red ball'."""
    return desc == name or (" " not in desc and name.endswith(" " + desc))


def _prereq(goal: str) -> list[str]:
    m = re.match(r"(pick up|drop|open|put) the (.+?)(?: next to the (.+))?$", goal)
    if not m:
        return []
    verb, x, y = m.groups()
    if verb in ("pick up", "open"):
        return [f"go to the {x}"]
    if verb == "drop":
        return [f"pick up the {x}"]
    return [f"pick up the {x}", f"go to the {y}"]


def mission_subgoals(mission: str) -> list[str]:
    """Ordered sub-goals of a BabyAI mission, e.g. 'put the red ball next to the blue key' ->
    [go to the red ball, pick up the red ball, go to the blue key, put the red ball next to the blue key]."""
    text = normalize_goal(mission).replace(" a ", " the ")
    text = re.sub(r"^(go to|pick up|open|put) a ", r"\1 the ", text)
    parts = re.split(r", then | then | after you ", text) if text else []
    if " after you " in text:
        parts = parts[::-1]
    out: list[str] = []
    for part in parts:
        part = part.strip().rstrip(",")
        m = re.match(r"(go to|pick up|open|put) the (.+?)(?: next to the (.+))?$", part)
        if not m:
            continue
        verb, x, y = m.groups()
        if verb == "pick up":
            out += [f"go to the {x}", part]
        elif verb == "open":
            color = x.split()[0] if " " in x else ""
            key = f"{color} key".strip()
            out += [f"go to the {key}", f"pick up the {key}", f"go to the {x}", part]
        elif verb == "put":
            out += [f"go to the {x}", f"pick up the {x}", f"go to the {y}", part]
        else:
            out.append(part)
    return list(dict.fromkeys(out))


class BabyAIOracle(Oracle):
    """Goals over BabyAI objects; feasibility from what the agent sees, faces and carries now."""

    family = "babyai"
    goals = _goal_vocabulary()
    prerequisites = {g: _prereq(g) for g in goals}

    def feasible(self, info: dict) -> set[str]:
        visible = list(info.get("visible") or ())
        doors = dict(info.get("doors") or {})
        front, carrying = info.get("front", "nothing"), info.get("carrying", "")
        out = set()
        for goal in self.goals:
            m = re.match(r"(go to|pick up|drop|open|put) the (.+?)(?: next to the (.+))?$", goal)
            verb, x, y = m.groups()
            if verb == "go to":
                ok = any(_matches(x, v) for v in visible) and not _matches(x, front)
            elif verb == "pick up":
                ok = not carrying and _matches(x, front)
            elif verb == "drop":
                ok = bool(carrying) and _matches(x, carrying) and front == "nothing"
            elif verb == "open":
                state = doors.get(front, "")
                ok = _matches(x, front) and (state == "closed" or (
                    state == "locked" and carrying == f"{front.split()[0]} key"))
            else:
                ok = bool(carrying) and _matches(x, carrying) and any(_matches(y, v) for v in visible)
            if ok:
                out.add(goal)
        return out

    def suggest(self, info: dict) -> list[str]:
        """Mission sub-goals achievable now and not yet done; all feasible goals without a mission."""
        feasible, done = self.feasible(info), set(info.get("episode_events") or ())
        mission = info.get("mission") or ""
        if not mission:
            return [g for g in self.goals if g in feasible and g not in done]
        return [g for g in mission_subgoals(mission) if g in feasible and g not in done]

    def feasible_from_caption(self, caption: str) -> set[str]:
        visible, doors, front, carrying = [], {}, "nothing", ""
        for sentence in caption.split(","):
            sentence = sentence.strip()
            m = re.match(r"You carry an? (\w+ \w+)", sentence)
            if m:
                carrying = m.group(1)
                continue
            if sentence.startswith("You see a wall"):
                if sentence.endswith(" 1 step forward"):
                    front = "wall"
                continue
            m = re.match(r"You see an? (?:(open|closed|locked) )?(\w+) (\w+) (.*)", sentence)
            if not m:
                continue
            name = f"{m.group(2)} {m.group(3)}"
            visible.append(name)
            if m.group(1):
                doors[name] = m.group(1)
            if m.group(4) == "1 step forward":
                front = name
        return self.feasible({"visible": visible, "doors": doors, "front": front, "carrying": carrying})
