"""BK's oracle knowledge for Crafter and Craftax-Classic single tasks (``llm=oracle`` answering BK's
labelling prompts), derived from the env family's rules (``Oracle.requirements``), never per task.

- **Progress** (:func:`task_progress`): ``1 − cost(state) / cost(empty state)``, where ``cost`` counts
  the steps still needed for the task along its requirement tree: one per missing material unit
  (plus the tool its collection needs, once), per tool or station (table, furnace) still to make or
  place (with its own materials, consumed from the same inventory), plus an approach cost in [0, 1]
  for each thing that must be next to the player (a tree to collect wood from, a table to craft at,
  a cow to eat): 0 when adjacent, ``distance / 8`` when in view, 1 when not seen.
- **BK-Code** (:func:`oracle_program`): a program computing that progress from ``obs`` (inventory
  from ``obs['vector']``, distances from the one-hot ``obs['image']``), with ``potential(obs,
  caption)`` per state and an equivalent vectorised ``potential_batch(obs, captions)`` (one sandbox
  call per rollout evaluates the whole batch at once).  :func:`task_progress` is embedded in the
  program from its source, so the sandboxed program and the in-process oracle are the same code.
- **BK-Pref** (:func:`caption_progress`): the same progress from a caption (facing thing: adjacent;
  other visible things: distance 4), a window's progress = last − first.
- **BK-Goal** (:func:`oracle_goals`): the task and its prerequisite goals, prerequisites first.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from llmguide.envs.base import normalize_goal

STATIONS = ("table", "furnace")


def task_progress(task, inv, dist, near, req, sources):
    """Ground-truth progress in [0, 1] toward ``task`` ("place table"); ``""``: mean over every goal.

    ``inv``: item -> count; ``dist``: thing -> Manhattan distance of the nearest one in view (absent:
    not seen); ``near``: things within one tile (Chebyshev); ``req``: goal -> (items needed, things that
    must be near); ``sources``: material -> the thing it is collected from.  Pure Python (no imports):
    its source is embedded in the BK-Code oracle program.
    """
    if not task:
        goals = sorted(req)
        return sum(task_progress(g, inv, dist, near, req, sources) for g in goals) / max(len(goals), 1)
    if task not in req:
        return 0.0
    kind, _, thing = task.partition(" ")
    thing = thing.replace(" ", "_")
    vitals = ("health", "food", "drink", "energy")
    if kind == "make" and inv.get(thing, 0) > 0:
        return 1.0
    if kind == "collect" and thing not in vitals and inv.get(thing, 0) > 0:
        return 1.0
    if kind == "place" and thing in ("table", "furnace") and thing in dist:
        return 1.0

    def approach(name, seen):
        if name in seen.get("near", ()):
            return 0.0
        if name in seen.get("dist", {}):
            return min(float(seen["dist"][name]), 8.0) / 8.0
        return 1.0

    def cost(goal, have, seen, depth):
        """Steps still needed for ``goal`` (its own action included); consumes ``have`` in place."""
        if goal not in req or depth > 8:
            return 1.0
        items, nearby = req[goal]
        total = 1.0
        consumes = not goal.startswith("collect ")
        for item in sorted(items):
            n = int(items[item])
            got = have.get(item, 0)
            use = min(got, n)
            if consumes:
                have[item] = got - use
            missing = n - use
            if missing <= 0:
                continue
            if item in sources:                     # a material: collect it (the tool once, then 1 per unit)
                total += cost("collect " + item, have, seen, depth + 1) + (missing - 1)
            else:                                   # a tool: make it; it stays in the inventory
                total += missing * cost("make " + item.replace("_", " "), have, seen, depth + 1)
                if not consumes:
                    have[item] = have.get(item, 0) + missing
        for name in nearby:
            if name in ("table", "furnace") and name not in seen["dist"] and name not in seen["near"]:
                total += cost("place " + name, have, seen, depth + 1)   # placed next to the player
                seen["near"] = set(seen["near"]) | {name}
            else:
                total += approach(name, seen)
        return total

    full = cost(task, {}, {"dist": {}, "near": set()}, 0)
    now = cost(task, dict(inv), {"dist": dict(dist), "near": set(near)}, 0)
    return max(0.0, min(1.0, 1.0 - now / full)) if full > 0 else 0.0


def oracle_rules(oracle: Any) -> tuple[dict[str, tuple[dict[str, int], list[str]]], dict[str, str]]:
    """``(req, sources)`` for :func:`task_progress` from the oracle's requirements: each goal's items and things
    that must be near, and each material -> the thing it is collected from (the one near "collect <material>")."""
    req = {g: (dict(items), list(near)) for g, (items, near) in oracle.requirements.items()}
    sources = {g.removeprefix("collect "): near[0] for g, (_, near) in req.items() if g.startswith("collect ") and near}
    return req, sources


def mission_goal(mission: str, oracle: Any) -> str:
    """"place table" / "place_table" -> "place table"; "" for no task; ValueError for an unknown one."""
    goal = normalize_goal(mission or "")
    if goal and goal not in oracle.requirements:
        raise ValueError(f"no Crafter goal {mission!r} (known: {sorted(oracle.requirements)})")
    return goal


def caption_progress(caption: str, mission: str, oracle: Any) -> float:
    """:func:`task_progress` from a caption: the faced thing is adjacent, other visible things at distance 4."""
    from llmguide.envs.crafter.rules import parse_caption

    state = parse_caption(caption)
    facing = state["facing"]
    dist = {name: 4 for name in state["visible"]}
    near: set[str] = set()
    if facing and facing != "nothing":
        dist[facing], near = 1, {facing}
    req, sources = oracle_rules(oracle)
    return task_progress(mission_goal(mission, oracle), state["inventory"], dist, near, req, sources)


def window_progress(captions: Sequence[str], mission: str, oracle: Any) -> float:
    """Progress of a window: progress(last caption) − progress(first caption)."""
    if not captions:
        return 0.0
    return caption_progress(captions[-1], mission, oracle) - caption_progress(captions[0], mission, oracle)


def oracle_goals(mission: str, oracle: Any) -> list[str]:
    """BK-Goal's oracle library: the task's prerequisite goals (recursively, prerequisites first), then the task."""
    goal = mission_goal(mission, oracle)
    if not goal:
        return []
    out: list[str] = []

    def visit(g: str, depth: int) -> None:
        if g in out or depth > 8:
            return
        for p in oracle.prerequisites.get(g, []):
            visit(p, depth + 1)
        out.append(g)

    visit(goal, 0)
    return out


_PROGRAM_BODY = '''

def _observe(obs):
    """Inventory counts, distance of the nearest thing of each kind in view, things within one tile."""
    image, vector = np.asarray(obs["image"]), np.asarray(obs["vector"])
    inv = {name: int(round(float(vector[i]) * 9)) for i, name in enumerate(ITEMS)}
    h, w = image.shape[1], image.shape[2]
    dist, near = {}, set()
    chans, rows, cols = np.nonzero(image > 0.5)
    for c, r, k in zip(chans.tolist(), rows.tolist(), cols.tolist()):
        name = CLASSES[c]
        if name is None or name == "player":
            continue
        dy, dx = abs(r - h // 2), abs(k - w // 2)
        if dy + dx < dist.get(name, 1 << 30):
            dist[name] = dy + dx
        if max(dy, dx) <= 1:
            near.add(name)
    return inv, dist, near


def potential(obs, caption):
    inv, dist, near = _observe(obs)
    return float(task_progress(TASK, inv, dist, near, REQ, SOURCES))


def potential_batch(obs, captions):
    """potential() of every state of a batch (obs arrays with a leading batch dim), vectorised:
    distances for all states at once, task_progress once per distinct (inventory, distances, near)."""
    image, vector = np.asarray(obs["image"]), np.asarray(obs["vector"])
    n, c, h, w = image.shape
    rows, cols = np.abs(np.arange(h) - h // 2)[:, None], np.abs(np.arange(w) - w // 2)[None, :]
    manhattan, chebyshev = (rows + cols).reshape(-1), np.maximum(rows, cols).reshape(-1)
    present = image.reshape(n, c, h * w) > 0.5
    dist = np.where(present, manhattan, 1 << 30).min(axis=2)
    near = (present & (chebyshev <= 1)).any(axis=2)
    inv = np.rint(vector[:, :len(ITEMS)] * 9).astype(np.int64)
    keep = [j for j, name in enumerate(CLASSES) if name is not None and name != "player"]
    memo, out = {}, np.zeros(n)
    for i in range(n):
        key = (inv[i].tobytes(), dist[i, keep].tobytes(), near[i, keep].tobytes())
        if key not in memo:
            d = {CLASSES[j]: int(dist[i, j]) for j in keep if dist[i, j] < (1 << 30)}
            s = {CLASSES[j] for j in keep if near[i, j]}
            memo[key] = float(task_progress(TASK, dict(zip(ITEMS, inv[i].tolist())), d, s, REQ, SOURCES))
        out[i] = memo[key]
    return out
'''


def oracle_program(mission: str, oracle: Any) -> str:
    """BK-Code's oracle program for ``mission`` under ``oracle``'s rules (see the module docstring)."""
    from llmguide.envs.crafter.rules import ITEMS, SEMANTIC_NAMES

    req, sources = oracle_rules(oracle)
    header = (f"import numpy as np\n\nTASK = {mission_goal(mission, oracle)!r}   # the task; '': every goal\n"
              f"ITEMS = {list(ITEMS)!r}   # obs['vector'][:{len(ITEMS)}] * 9 = these counts\n"
              f"CLASSES = {list(SEMANTIC_NAMES)!r}   # obs['image'] channel -> thing\n"
              f"REQ = {req!r}   # goal -> (items needed, things that must be near)\n"
              f"SOURCES = {sources!r}   # material -> what it is collected from\n\n\n")
    return header + inspect.getsource(task_progress) + _PROGRAM_BODY
