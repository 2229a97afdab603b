"""The expert's survival rules (:mod:`.agent`): fight or flee, drink, eat, sleep, shelter at night.

Each function returns an action for one agent, or None when the rule has nothing to do now.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmguide.envs.crafter.expert.nav import MOVES, SEM
from llmguide.envs.crafter.expert.plan import DO, NOOP, SLEEP, Step
from llmguide.envs.crafter.expert.shelter import blocks, find_pocket, pocket_step
from llmguide.envs.crafter.expert.skills import do_step, explore, flee, mob_mask, toward


def threat(agent: Any) -> int | None:
    """Hit a zombie next to the agent or one step away (fleeing rarely works: they follow); flee only
    when its defeat is excluded; a skeleton is fought when next to it or when it is the goal."""
    pos = agent.map.pos
    health = agent.inventory.get("health", 9)
    for sid, name in ((SEM["zombie"], "defeat zombie"), (SEM["skeleton"], "defeat skeleton")):
        close = [(abs(x - pos[0]) + abs(y - pos[1]), (x, y)) for s, x, y in agent.map.mobs if s == sid]
        if not close:
            continue
        d, where = min(close)
        if name in agent.excluded:
            if d <= 2:
                return flee(agent, where)
            continue
        strong = health >= agent.cfg.fight_above
        fight = d == 1 or (strong and (name == "defeat zombie" and d == 2 or agent.goal == name))
        if fight:
            out = toward(agent, agent.plan, mob_mask(agent, agent.plan, [name.split()[1]]))
            if out is not None and (d == 1 or out[0] not in (DO, *MOVES) or _free_ahead(agent, out[0])):
                return out[0]  # never dig towards a creature (that opens walls and pockets)
    return None


def _free_ahead(agent: Any, action: int) -> bool:
    if action == DO:
        return False
    return agent.map.free(agent.map.pos + np.array(MOVES[action]))


def vitals(agent: Any) -> int | None:
    """Drink / eat / sleep when a vital is low (or cheaply when it is half low and water or a cow is next
    to the agent); at night, stay in a sealed pocket until the morning."""
    inv, cfg = agent.inventory, agent.cfg
    level = {"drink": inv["drink"], "food": inv["food"], "sleep": inv["energy"]}
    below = {"drink": cfg.drink_below, "food": cfg.food_below, "sleep": cfg.energy_below}
    can = {"drink": "collect drink" not in agent.excluded, "food": not {"eat cow", "eat plant"} <= agent.excluded,
           "sleep": "wake up" not in agent.excluded}
    if agent.vital == "drink" and level["drink"] >= 9 or agent.vital == "food" and level["food"] >= 8:
        agent.vital = None
    dark = agent.vital in ("night", "recover") or agent.daylight < cfg.night_below
    steps = {"drink": _drink_step(agent), "food": _food_step(agent)}
    if dark:  # out of the shelter only when a vital is empty and health runs out (starving is slow)
        urgent = [k for k in ("drink", "food") if can[k] and level[k] == 0 and inv["health"] <= 5]
        if agent.vital in ("drink", "food", "gather") and agent.vital not in urgent and \
                (agent.vital == "gather" or _cost(agent, steps[agent.vital]) > 3):
            agent.vital = None  # no more wandering in the dark: shelter
    else:
        urgent = [k for k in level if can[k] and level[k] <= 1]
    busy = agent.vital in steps and level[agent.vital] < 9 and _cost(agent, steps[agent.vital]) <= 2
    if urgent and not busy:  # the one whose water / food is known first, then the lowest (finish a drink first)
        agent.vital = min(urgent, key=lambda k: (k in steps and _cost(agent, steps[k]) >= 100, level[k]))
    elif agent.vital is None and not dark:
        low = [k for k in ("drink", "food") if can[k] and level[k] <= below[k]]
        if low:
            agent.vital = min(low, key=lambda k: level[k] - below[k])
        elif can["sleep"] and level["sleep"] <= below["sleep"]:
            agent.vital = "sleep"
        elif can["drink"] and level["drink"] <= 7 and (agent.dusk or _cost(agent, steps["drink"]) <= 10):
            agent.vital = "drink"  # cheaply on the way, or whatever it takes before the night
        elif can["food"] and level["food"] <= (6 if agent.dusk else 7) and (
                agent.dusk or _cost(agent, steps["food"]) <= (15 if level["food"] <= 6 else 8)):
            agent.vital = "food"
    if agent.vital == "drink":  # water out of memory: back towards the last water seen, else towards sand
        action = do_step(agent, agent.plan, _drink_step(agent))
        if action is None and agent.map.last_water is not None and agent.explore_target is None:
            agent.heading = np.asarray(agent.map.last_water, float) - agent.map.pos
            agent.heading /= max(np.linalg.norm(agent.heading), 1e-6)
            agent.heading_until, agent.explore_target = agent.t + 30, None
        return _or_explore(agent, action, ("sand", "water"))
    if agent.vital == "food":  # no cow known: explore towards grass
        return _or_explore(agent, do_step(agent, agent.plan, _food_step(agent)), ("grass",))
    if agent.vital == "sleep":
        return sleep(agent, urgent=level["sleep"] <= 1 or (agent.daylight > 0.5 and level["sleep"] <= below["sleep"]))
    if agent.vital in (None, "gather") and inv["health"] <= cfg.recover_below:
        agent.vital = "recover"
    if agent.vital == "gather":  # before the night: material for a shelter
        if blocks(agent) >= 6 or agent.daylight < cfg.night_below:
            agent.vital = None
        else:
            targets = tuple(t for t, g in (("stone", "collect stone"), ("tree", "collect wood"))
                            if g not in agent.excluded and (t == "tree" or agent.has_pickaxe()))
            return _or_explore(agent, do_step(agent, agent.plan, Step("do", "gather", targets=targets)))
    if agent.vital is None and agent.dusk and blocks(agent) < 6 and agent.pocket is None \
            and agent.t - agent.pocket_search_t >= 10:
        agent.pocket_search_t = agent.t
        agent.pocket = find_pocket(agent, agent.plan, dig=agent.can_dig())
        if agent.pocket is None:
            agent.vital = "gather"
            return vitals(agent)
    zombies = any(sid == SEM["zombie"] for sid, _, _ in agent.map.mobs)
    if agent.vital == "night" and agent.daylight > cfg.day_above and (not zombies or agent.daylight > 0.85):
        agent.vital, agent.pocket = None, None  # morning, and no zombie waiting at the door
    if agent.vital == "recover" and inv["health"] >= 8:
        agent.vital, agent.pocket = None, None
    if agent.vital is None and agent.daylight < cfg.night_below:
        agent.vital = "night"
    if agent.vital in ("night", "recover"):  # in a sealed pocket until morning / healed, asleep when tired
        action = sleep(agent, urgent=False)
        if action == SLEEP and level["sleep"] >= 9:
            action = NOOP
        if action is None and agent.vital == "recover":  # no pocket: keep away from creatures while healing
            pos = agent.map.pos
            near = [(abs(x - pos[0]) + abs(y - pos[1]), (x, y)) for s, x, y in agent.map.mobs
                    if s in (SEM["zombie"], SEM["skeleton"])]
            return flee(agent, min(near)[1]) if near and min(near)[0] <= 6 else None
        if action is None:
            agent.vital = None
        return action
    return None


def _drink_step(agent: Any) -> Step:
    return Step("do", "collect drink", targets=("water",))


def _food_step(agent: Any) -> Step:
    return Step("do", "eat", targets=tuple(t for t, g in (("cow", "eat cow"), ("plant", "eat plant"))
                                           if g not in agent.excluded))


def _cost(agent: Any, step: Step) -> float:
    return agent.step_cost(step)


def sleep(agent: Any, urgent: bool) -> int | None:
    """Go to (or build) a pocket and sleep sealed in it; in the open only when ``urgent`` and no zombie is in view."""
    if agent.pocket is None and agent.t - agent.pocket_search_t >= 10:
        agent.pocket_search_t = agent.t
        agent.pocket = find_pocket(agent, agent.plan, dig=agent.can_dig())
    if agent.pocket is not None:
        action = pocket_step(agent, agent.plan, agent.pocket)
        if action == SLEEP and "wake up" in agent.excluded:
            return NOOP  # walled in, awake
        if action is not None:
            return action
        agent.pocket = None
    zombies = any(s == SEM["zombie"] for s, _, _ in agent.map.mobs)
    return SLEEP if urgent and not zombies and "wake up" not in agent.excluded else None


def _or_explore(agent: Any, action: int | None, prefer=()) -> int:
    return explore(agent, agent.plan, prefer) if action is None else action
