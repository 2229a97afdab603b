"""Crafter's rules as the env family's knowledge: names, the caption grammar, the single-task definition
(:class:`Task`), the requirement tree read from Crafter's own constants, the Crafter score and the ground-truth
goal oracle (which also measures the progress a message line of :mod:`llmguide.envs.crafter.messages` reports:
the methods' message-label answerers read it).  The env (:mod:`llmguide.envs.crafter.env`), its text actions
and Craftax-Classic import this module."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from crafter import constants

from llmguide.envs.base import Oracle, normalize_goal
from llmguide.envs.crafter.messages import FEEL_BELOW, FEELINGS, VITALS, message_achievements

ACHIEVEMENTS: list[str] = list(constants.achievements)  # the 22 names, e.g. "collect_wood"
GOALS: list[str] = [a.replace("_", " ") for a in ACHIEVEMENTS]
EVENTS: list[str] = GOALS + ["take damage", "die"]
ITEMS: list[str] = list(constants.items)  # health, food, drink, energy, sapling, wood, ...
OBJECT_TYPES = ["player", "cow", "zombie", "skeleton", "arrow", "plant"]
SEMANTIC_NAMES: list[str | None] = [None, *constants.materials, *OBJECT_TYPES]  # 19 classes

# --- single tasks ----------------------------------------------------------------------------
EPISODE_STEPS = 10000  # Crafter's episode length (env.max_steps null, no task)
TASK_MAX_STEPS = 1500  # a single task's episode cap (env.max_steps null, env.task set)


def default_max_steps(env_cfg: Any) -> int:
    """The episode cap of a Crafter / Craftax config whose ``env.max_steps`` is null."""
    task = env_cfg.get("task") if env_cfg is not None else None
    return TASK_MAX_STEPS if task not in (None, "", "null", "none") else EPISODE_STEPS


@dataclass(frozen=True)
class Task:
    """``env.task=<achievement>``, the same on Crafter and Craftax-Classic: reward 1 when the achievement
    happens and 0 otherwise (no health reward, no other achievement), the episode ends on that success
    (``terminated``), and it is cut at ``max_steps`` (:data:`TASK_MAX_STEPS` unless ``env.max_steps`` is set)."""

    achievement: str                 # ACHIEVEMENTS name, e.g. "make_stone_pickaxe"
    max_steps: int = TASK_MAX_STEPS

    @property
    def goal(self) -> str:
        """The goal string ("make stone pickaxe"), the env's ``mission``."""
        return self.achievement.replace("_", " ")

    @property
    def index(self) -> int:
        return ACHIEVEMENTS.index(self.achievement)

    def reward(self, events: Sequence[str]) -> tuple[float, bool]:
        """(reward, success) of a step with these events."""
        success = self.goal in events
        return (1.0 if success else 0.0), success


def task_name(task: str | None) -> str | None:
    """The achievement that ``env.task`` names (``"make stone pickaxe"`` → ``"make_stone_pickaxe"``), or None."""
    if task in (None, "", "null", "none"):
        return None
    name = normalize_goal(task).replace(" ", "_")
    if name not in ACHIEVEMENTS:
        raise ValueError(f"env.task: unknown Crafter task {task!r}; choose one of {ACHIEVEMENTS} or null")
    return name


def task_problem(env_cfg: Any) -> str | None:
    """Why ``env.task`` names no Crafter achievement (None when it names one or is null): checked when the config
    loads, so a sweep's typo fails before its first run."""
    try:
        task_name(env_cfg.get("task") if env_cfg is not None else None)
    except ValueError as err:
        return str(err).removeprefix("env.task: ")
    return None


def make_task(task: str | None, max_steps: int | None = None) -> tuple[Task | None, int]:
    """The :class:`Task` of ``env.task`` (None without one) and the episode cap: ``max_steps`` when given, else
    :data:`TASK_MAX_STEPS` with a task and :data:`EPISODE_STEPS` without."""
    name = task_name(task)
    if max_steps is not None and int(max_steps) <= 0:
        raise ValueError(f"env.max_steps must be > 0 or null, got {max_steps}")
    limit = int(max_steps) if max_steps is not None else (TASK_MAX_STEPS if name else EPISODE_STEPS)
    return (Task(name, limit) if name else None), limit


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

    # --- message ground truth: how much progress towards the goal a message reports ----------------------
    def goal_achievements(self, goal: str | None = None) -> frozenset[str]:
        """The achievements that are progress towards ``goal``: the achievement it names and all it needs in the
        requirement tree (:attr:`prerequisites`, transitively); every achievement when it names none (no goal, or
        a task-agnostic one such as "make progress in the game")."""
        name = named_goal(goal, self.goals)
        if name is None:
            return frozenset(self.goals)
        out: set[str] = set()
        todo = [name]
        while todo:
            g = todo.pop()
            if g not in out:
                out.add(g)
                todo += self.prerequisites.get(g, [])
        return frozenset(out)

    def message_progress(self, message: str, goal: str | None = None) -> int:
        """How many achievements serving ``goal`` the message line reports (:func:`message_achievements`)."""
        wanted = self.goal_achievements(goal)
        return sum(a in wanted for a in message_achievements(message))


def named_goal(goal: str | None, goals: Sequence[str]) -> str | None:
    """The vocabulary goal that ``goal`` names ("make_stone_pickaxe", "Make a stone pickaxe."), or None: the
    text normalised without articles, or else the one vocabulary goal it contains."""
    if not goal:
        return None
    text = " ".join(w for w in normalize_goal(goal).split() if w not in ("a", "an", "the"))
    if text in goals:
        return text
    found = [g for g in goals if re.search(rf"\b{re.escape(g)}\b", text)]
    return found[0] if len(found) == 1 else None
