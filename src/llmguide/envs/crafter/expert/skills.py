"""The expert's skills (:mod:`.agent`): turn one planner :class:`~.plan.Step` into a primitive action
on the agent's map memory (walk there, face it, act), plus exploring and fleeing.  Every function returns
an action id, or None when the step cannot be done from what is known."""

from __future__ import annotations

from typing import Any

import numpy as np

from llmguide.envs.crafter.expert.nav import ACTION_OF, MOVES, SEM, Plan
from llmguide.envs.crafter.expert.plan import DO, Step

_WALK = np.array([SEM["grass"], SEM["sand"], SEM["path"]])
_DIRS = [np.array(d) for d in MOVES.values()]


def move(d) -> int:
    return ACTION_OF[(int(d[0]), int(d[1]))]


def _mask(win: np.ndarray, names) -> np.ndarray:
    return np.isin(win, [SEM[n] for n in names if n in SEM])


def mob_mask(agent: Any, plan: Plan, names) -> np.ndarray:
    mask = np.zeros((plan.n, plan.n), bool)
    ids = {SEM[n] for n in names}
    for sid, x, y in agent.map.mobs:
        if sid in ids:
            mask[x - plan.x0, y - plan.y0] = True
    if "cow" in names:  # cows seen lately out of view: where they were
        for x, y in agent.map.cows:
            mask[x - plan.x0, y - plan.y0] = True
    return mask


def toward(agent: Any, plan: Plan, mask: np.ndarray, stand: bool = False) -> tuple[int, float] | None:
    """(action, cost) going to (``stand``) or facing the nearest cell of ``mask``; at the target: face and do."""
    found = plan.reach(mask, stand=stand)
    if found is None:
        return None
    cost, target, first = found
    pos = agent.map.pos
    if stand and (target == pos).all():
        return None if not stand else (-1, 0.0)
    d = first - pos
    if (first == target).all() and not stand:
        return (DO if tuple(d) == agent.facing else move(d)), cost
    what = agent.map.at(first)
    if what in (SEM["stone"], SEM["tree"]):  # dig through: face it, then do
        return (DO if tuple(d) == agent.facing else move(d)), cost
    return move(d), cost


def do_step(agent: Any, plan: Plan, step: Step) -> int | None:
    """Walk to the nearest target of ``step`` (a material, a creature, a ripe plant) and hit it."""
    out = toward(agent, plan, target_mask(agent, plan, step.targets))
    return None if out is None else out[0]


def target_mask(agent: Any, plan: Plan, targets) -> np.ndarray:
    """Window cells holding one of ``targets``: materials, creatures (seen now, cows seen lately), ripe plants."""
    mask = _mask(agent.map.window_of(plan), [t for t in targets if t != "plant"])
    mask |= mob_mask(agent, plan, [t for t in targets if t in ("cow", "zombie", "skeleton")])
    if "plant" in targets:
        for (x, y) in agent.ripe_plants():
            mask[x - plan.x0, y - plan.y0] = True
    return mask


def face_free(agent: Any, where, keep_near: np.ndarray | None = None) -> int | None:
    """An action that leaves the agent facing a free cell of ``where`` (or None when none is around):
    turn towards a non-walkable one (water for stone), or step so that the next cell ahead is one."""
    m, pos = agent.map, agent.map.pos
    ok = {SEM[n] for n in where}

    def free(c) -> bool:
        return m.at(c) in ok and all((x, y) != (int(c[0]), int(c[1])) for _, x, y in m.mobs)

    ahead = pos + np.array(agent.facing)
    if free(ahead):
        return -1  # already facing one
    options = []
    for d in _DIRS:
        c1, c2 = pos + d, pos + 2 * d
        if free(c1) and not m.free(c1):
            options.append((0, move(d)))  # turning towards it does not move the agent
        elif m.free(c1) and free(c2):
            if keep_near is None or keep_near[tuple(c1)]:
                options.append((1, move(d)))
    return min(options)[1] if options else None


def place_step(agent: Any, plan: Plan, step: Step) -> int | None:
    """Stand next to the step's companion stations when known, then face a free cell and place."""
    keep = None
    if step.near:
        near = station_stand(agent, plan, step.near)
        if near is not None:
            stand_mask, full = near
            if not full[tuple(agent.map.pos)]:
                out = toward(agent, plan, stand_mask, stand=True)
                if out is not None and out[0] >= 0:
                    return out[0]
            keep = full
    act = face_free(agent, step.where, keep)
    if act == -1:
        return step.action
    if act is None:  # nothing placeable around: walk somewhere else
        return explore(agent, plan)
    return act


def station_stand(agent: Any, plan: Plan, stations) -> tuple[np.ndarray, np.ndarray] | None:
    """(window mask, full-map mask) of walkable cells within one cell (8-neighbourhood) of every station."""
    m = agent.map
    full = np.ones_like(m.mat, bool)
    for s in stations:
        cells = m.mat == SEM[s]
        if not cells.any():
            return None
        grown = cells.copy()
        grown[1:] |= cells[:-1]
        grown[:-1] |= cells[1:]
        g2 = grown.copy()
        g2[:, 1:] |= grown[:, :-1]
        g2[:, :-1] |= grown[:, 1:]
        full &= g2
    full &= np.isin(m.mat, _WALK)
    if not full.any():
        return None
    return plan.window(np.pad(full, 0)), full


def make_step(agent: Any, plan: Plan, step: Step) -> int | None:
    near = station_stand(agent, plan, step.stations)
    if near is None:
        return None
    mask, full = near
    if full[tuple(agent.map.pos)]:
        return step.action
    out = toward(agent, plan, mask, stand=True)
    return None if out is None or out[0] < 0 else out[0]


def walkable_do_step(agent: Any, plan: Plan, step: Step) -> int | None:
    """Face a walkable target (grass for a sapling) and do."""
    act = face_free(agent, step.targets)
    if act == -1:
        return DO
    if act is not None:
        return act
    win = agent.map.window_of(plan)
    out = toward(agent, plan, _mask(win, step.targets), stand=True)
    return explore(agent, plan) if out is None or out[0] < 0 else out[0]


def explore(agent: Any, plan: Plan, prefer=()) -> int:
    """Walk to a far cell in the agent's heading (kept until reached, unreachable or stale); a new heading
    towards the known cells of ``prefer`` (e.g. grass when looking for cows) that are not close by, else random."""
    for _ in range(3):
        if agent.explore_target is None or agent.t >= agent.heading_until:
            if agent.heading is None or agent.t >= agent.heading_until:
                agent.heading = _heading(agent, plan, prefer)
            agent.heading_until = agent.t + int(agent.rng.integers(30, 90))
            goal = plan.n // 2 + agent.heading * (agent.map.radius - 2)
            ii, jj = np.meshgrid(np.arange(plan.n), np.arange(plan.n), indexing="ij")
            score = np.abs(ii - goal[0]) + np.abs(jj - goal[1]) + 0.3 * plan.dist
            score[~np.isfinite(plan.dist)] = np.inf
            flat = int(np.argmin(score))
            if not np.isfinite(score.flat[flat]) or flat == (plan.n // 2) * plan.n + plan.n // 2:
                agent.heading, agent.explore_target = None, None
                continue
            agent.explore_target = np.array(divmod(flat, plan.n)) + (plan.x0, plan.y0)
        i, j = agent.explore_target - (plan.x0, plan.y0)
        if 0 <= i < plan.n and 0 <= j < plan.n and not (agent.explore_target == agent.map.pos).all():
            mask = np.zeros((plan.n, plan.n), bool)
            mask[i, j] = True
            out = toward(agent, plan, mask, stand=True)
            if out is not None and out[0] >= 0:
                return out[0]
        agent.heading, agent.explore_target = None, None
    return random_move(agent)


def _heading(agent: Any, plan: Plan, prefer) -> np.ndarray:
    if prefer:
        cells = np.argwhere(_mask(agent.map.window_of(plan), prefer)) - plan.n // 2
        cells = cells[np.abs(cells).sum(axis=1) >= 6]
        if len(cells) >= 5:
            mean = cells.mean(axis=0)
            if np.abs(mean).sum() > 1:
                return mean / np.linalg.norm(mean)
    angle = agent.rng.uniform(0, 2 * np.pi)
    return np.array([np.cos(angle), np.sin(angle)])


def random_move(agent: Any) -> int:
    """A move that does not step into lava."""
    ok = [move(d) for d in _DIRS if agent.map.at(agent.map.pos + d) != SEM["lava"]]
    return int(agent.rng.choice(ok)) if ok else 0


def flee(agent: Any, threat: tuple[int, int]) -> int:
    """The free neighbouring cell farthest from ``threat``."""
    m = agent.map
    best = [(np.abs(m.pos + d - np.array(threat)).sum(), move(d)) for d in _DIRS if m.free(m.pos + d)]
    return max(best)[1] if best else random_move(agent)
