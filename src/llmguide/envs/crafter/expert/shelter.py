"""Sleeping safely (:mod:`.agent`): a sealed two-cell pocket.

A Crafter / Craftax agent can only face a free cell by walking into the cell before it, so it cannot wall
itself in on the spot.  It can in a pocket of two cells in a line, P1 and P2, entered from E: walk
E -> P1 -> P2, step back to P1 (now facing E) and place a stone on E.  Every other side of P1 and P2 must
be solid (stone, water, tree, ...; zombies walk on grass, sand and path only).  A missing side wall is
built first from outside (stand two cells out, step towards it, place a stone), the end wall from
inside (facing it from P2); P1 and P2 may be stone to dig when the agent has a pickaxe.  Walls are
stones, or tables when the agent has no stone but wood.  Zombies hit
a sleeping player for 7 of its 9 health, so in the open the expert sleeps only when it must.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmguide.envs.crafter.expert.nav import SEM, Plan
from llmguide.envs.crafter.expert.plan import ACTIONS, DO, NOOP, PLACE_STONE, SLEEP
from llmguide.envs.crafter.expert.skills import move, toward

SOLID = np.array([SEM[n] for n in ("water", "stone", "tree", "coal", "iron", "diamond", "table", "furnace")] + [0])
WALK = np.array([SEM["grass"], SEM["sand"], SEM["path"]])
_DIRS = [np.array(d) for d in ((-1, 0), (1, 0), (0, -1), (0, 1))]
WALL_COST = 8.0  # path-cost equivalent of building one wall
PLACE_TABLE = ACTIONS.index("place_table")


def blocks(agent: Any) -> int:
    """Walls the agent can place: stones, then tables (wood); none of a kind whose placing is excluded."""
    wood = agent.tree.requirements["place table"][0].get("wood", 1)
    stones = 0 if "place stone" in agent.excluded else agent.inventory.get("stone", 0)
    tables = 0 if "place table" in agent.excluded else agent.inventory.get("wood", 0) // max(wood, 1)
    return stones + tables


def _wall(agent: Any) -> int | None:
    """The action placing a wall (a stone, else a table), None when the agent has neither."""
    if "place stone" not in agent.excluded and agent.inventory.get("stone", 0) > 0:
        return PLACE_STONE
    return PLACE_TABLE if blocks(agent) > 0 else None


def _walls(d: np.ndarray) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """(offset from P1, side it is built from: None for the end wall, built from inside)."""
    e = np.array([d[1], d[0]])
    return [(e, e), (-e, -e), (d + e, e), (d - e, -e), (2 * d, None)]


def find_pocket(agent: Any, plan: Plan, dig: bool) -> tuple | None:
    """The cheapest pocket (path cost to E + WALL_COST per wall to build) the agent has the stones for:
    ``(E, P1, P2, d, [(wall cell, side)])`` in map coordinates, or None."""
    win = agent.map.window_of(plan)
    pad, n = 4, plan.n
    solid = np.pad(np.isin(win, SOLID), pad)
    walk = np.pad(np.isin(win, WALK), pad)
    stone = np.pad(win == SEM["stone"], pad) if dig else np.zeros_like(walk)
    room = walk | stone
    stones = blocks(agent)

    def sh(a, off):  # out[i, j] = a[i + off[0], j + off[1]] for window cell (i, j)
        return a[pad + off[0]:pad + off[0] + n, pad + off[1]:pad + off[1] + n]

    best = None
    zero = np.zeros(2, int)
    for d in _DIRS:
        ok = sh(room, zero) & sh(room, d) & sh(walk, -d)
        missing = np.zeros((n, n), int)
        for off, side in _walls(d):
            buildable = sh(walk, off) if side is None else sh(walk, off) & sh(walk, off + side) & sh(walk, off + 2 * side)
            ok &= sh(solid, off) | buildable
            missing += ~sh(solid, off)
        ok &= missing + 1 <= stones + sh(stone, zero) + sh(stone, d)
        if not ok.any():
            continue
        entrance = np.pad(plan.dist, pad, constant_values=np.inf)
        score = np.where(ok, sh(entrance, -d) + WALL_COST * missing, np.inf)
        k = int(np.argmin(score))
        if np.isfinite(score.flat[k]) and (best is None or score.flat[k] < best[0]):
            i, j = divmod(k, n)
            p1 = np.array([i + plan.x0, j + plan.y0])
            walls = [(p1 + off, side) for off, side in _walls(d)[:4] if agent.map.at(p1 + off) not in SOLID]
            best = (score.flat[k], p1 - d, p1, p1 + d, d, walls)
    return None if best is None or best[0] > 3 * agent.map.radius else best[1:]


def _stand(agent: Any, plan: Plan, cell: np.ndarray) -> int | None:
    i, j = cell[0] - plan.x0, cell[1] - plan.y0
    if not (0 <= i < plan.n and 0 <= j < plan.n):
        return None
    mask = np.zeros((plan.n, plan.n), bool)
    mask[i, j] = True
    out = toward(agent, plan, mask, stand=True)
    return None if out is None or out[0] < 0 else out[0]


def pocket_step(agent: Any, plan: Plan, pocket: tuple) -> int | None:
    """The next action of the sleep-in-a-pocket routine; None when the pocket no longer works."""
    e, p1, p2, d, _ = pocket
    m, pos, face = agent.map, agent.map.pos, tuple(agent.facing)
    wall_action = _wall(agent)
    for off, side in _walls(d)[:4]:  # 1. side walls, from outside (again if one was dug on the way)
        wall = p1 + off
        if m.at(wall) in SOLID:
            continue
        if wall_action is None or m.at(wall) not in WALK or not all(m.free(wall + k * side) for k in (1, 2)):
            return None
        if (pos == wall + side).all() and face == tuple(-side):
            return wall_action if m.free(wall) else NOOP
        if (pos == wall + 2 * side).all():
            return move(-side)
        return _stand(agent, plan, wall + 2 * side)
    if m.at(p2 + d) not in SOLID and m.at(p2 + d) not in WALK:
        return None
    back, ahead = tuple(-d), tuple(d)
    end_open = m.at(p2 + d) not in SOLID
    if (pos == p1).all() and face == back:  # 3. seal the entrance and sleep
        if end_open:
            return move(d)
        if m.at(e) in SOLID:
            return SLEEP
        if wall_action is None:
            return None
        return wall_action if m.free(e) else DO
    if (pos == p2).all():  # 2. the end wall, from inside
        if end_open:
            if face != ahead:
                return move(-d)
            return wall_action if wall_action is not None and m.free(p2 + d) else None
        return move(-d)
    if (pos == p1).all():
        return (DO if face == ahead else move(d)) if m.at(p2) == SEM["stone"] else move(d)
    if (pos == e).all():
        return (DO if face == ahead else move(d)) if m.at(p1) == SEM["stone"] else move(d)
    return _stand(agent, plan, e)
