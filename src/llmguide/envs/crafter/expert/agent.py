"""A scripted expert for Crafter and Craftax-Classic (``policy=expert`` for datasets; the ``bot`` row).

:class:`ExpertPolicy` acts for a whole vector env from what a learner gets — the observation (9x7 semantic view +
inventory / facing / sleeping vector) and the info's per-episode achievement counts — so the same code drives
``env=crafter`` and ``env=craftax`` (no access to the simulator's state).  Per env an :class:`_Agent` keeps a map of
the cells it has seen within ``radius`` (:mod:`.nav`), and each step, in order:

1. fights a zombie or skeleton close by (flees instead when its defeat is excluded);
2. keeps the vitals up: drinks, eats (cow, ripe plant), sleeps in a sealed two-cell pocket;
3. pursues a goal, resolved through the requirement tree (:mod:`.plan`) into one step that the skills (:mod:`.skills`)
   turn into an action: walk (Dijkstra on the seen map, digging through stone and trees), face, do / place / make.

``mode="plain"`` picks, among the goals not achieved this episode, the feasible one that is cheapest to reach now.
``mode="data"`` samples each subgoal among the feasible goals of the tree's frontier (prerequisites achieved), takes
ε-random actions (``eps``) and short random exploration segments (``explore_prob``): competent, varied play for
offline datasets.  ``exclude`` names goals the expert never pursues (nor anything needing them; its random actions
avoid completing them too); ``target`` makes it pursue one goal only (with its prerequisites and the vitals): a
single task's reference player.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from llmguide.envs.base import normalize_goal
from llmguide.envs.crafter.expert.nav import MOVES, SEM, LocalMap, view_ids
from llmguide.envs.crafter.expert.plan import ACTIONS, DO, NOOP, SLEEP, RequirementTree, Step
from llmguide.envs.crafter.expert.shelter import find_pocket
from llmguide.envs.crafter.expert.skills import (
    do_step,
    explore,
    make_step,
    place_step,
    random_move,
    station_stand,
    target_mask,
    walkable_do_step,
)
from llmguide.envs.crafter.expert.survival import sleep, threat, vitals
from llmguide.envs.crafter.rules import ITEMS

# what keeps the expert alive (drink, eat, sleep, fight): never excluded by a ``target``
VITALS = {"collect drink", "eat cow", "eat plant", "wake up", "defeat zombie", "defeat skeleton"}
# steps a placed sapling needs before it can be eaten (Crafter: grown > 300; Craftax-Classic: age >= 600)
RIPE_AFTER = {"crafter": 310, "craftax": 610}
_FACING = [MOVES[a] for a in (1, 2, 3, 4)]  # the vector's facing one-hot: left, right, up, down
_COLLECTS = {SEM["tree"]: "collect wood", SEM["stone"]: "collect stone", SEM["coal"]: "collect coal",
             SEM["iron"]: "collect iron", SEM["diamond"]: "collect diamond", SEM["water"]: "collect drink",
             SEM["grass"]: "collect sapling", SEM["cow"]: "eat cow", SEM["zombie"]: "defeat zombie",
             SEM["skeleton"]: "defeat skeleton", SEM["plant"]: "eat plant"}


@dataclass
class ExpertSettings:
    """Every knob of the expert (``ExpertPolicy(..., **settings)`` overrides any of them)."""

    eps: float = 0.0  # probability of a random action each step (data mode default 0.1)
    explore_prob: float = 0.0  # probability that a subgoal pick becomes a random walk (data mode default 0.15)
    explore_len: tuple[int, int] = (4, 16)
    radius: int = 24  # memory: cells farther than this (Chebyshev) are forgotten
    goal_budget: int = 300  # steps on one goal before it is dropped for a while (data mode default 150)
    ban_steps: int = 200
    station_range: float = 20.0  # a known table / furnace farther than this (path cost) is rebuilt
    drink_below: int = 5
    food_below: int = 5
    energy_below: int = 3
    ripe_after: int = 310
    night_below: float = 0.45  # daylight under which the agent shelters in a pocket (zombies spawn in the dark)
    day_above: float = 0.7
    recover_below: int = 4  # health at which the agent shelters in a pocket to heal
    fight_above: int = 6  # health needed to pursue a zombie / skeleton as a goal
    new_weight: float = 3.0  # data mode: weight of a goal not achieved yet this episode (achieved ones: 1)


def _cfg(cfg: Any, key: str, default: Any) -> Any:
    value = cfg.get(key, default) if cfg is not None and hasattr(cfg, "get") else default
    return default if value is None else value


class _Agent:
    """One env's expert: map memory, current goal and vital routine."""

    def __init__(self, tree: RequirementTree, cfg: ExpertSettings, excluded: set[str], rng: np.random.Generator):
        self.tree, self.cfg, self.excluded, self.rng = tree, cfg, excluded, rng
        self.map = LocalMap(cfg.radius)
        self.t, self.facing, self.inventory = 0, (0, 1), {k: 0 for k in ITEMS}
        self.counts: dict[str, int] = dict.fromkeys(tree.goals, 0)
        self.goal: str | None = None
        self.goal_t = self.goal_count = 0
        self.banned: dict[str, int] = {}
        self.vital: str | None = None
        self.pocket: tuple | None = None
        self.pocket_search_t = -99
        self.heading, self.heading_until, self.explore_target = None, 0, None
        self.segment, self.segment_dir = 0, 0
        self.last_action: int | None = None
        self.asleep = False
        self.daylight, self.dusk = 1.0, False
        self.tried: dict[tuple[int, int], int] = {}
        self.plan = None
        self._usable: dict[str, bool] = {}

    # --- the planner's Context ------------------------------------------------------------
    def station_usable(self, name: str) -> bool:
        if name not in self._usable:
            self._usable[name] = self._station_usable(name)
        return self._usable[name]

    def _station_usable(self, name: str) -> bool:
        if name == "plant":
            return bool(self.ripe_plants())
        mask = self.plan.window(self.map.mat) == SEM[name]
        found = self.plan.reach(mask)
        if found is None or found[0] > self.cfg.station_range:
            return False
        others = [o for o in self.tree.companions.get(name, ()) if (self.map.mat == SEM[o]).any()]
        return not others or name == "table" or station_stand(self, self.plan, (name, *others)) is not None

    def plant_growing(self) -> bool:
        return bool(self.map.plants) and not self.ripe_plants()

    def ripe_plants(self) -> list[tuple[int, int]]:
        t = self.map.t
        return [c for c, t0 in self.map.plants.items()
                if t - t0 >= self.cfg.ripe_after and t - self.tried.get(c, -10**9) > 40]

    # --- one step ----------------------------------------------------------------------------
    def observe(self, ids: np.ndarray, vector: np.ndarray, counts: dict[str, int] | None) -> None:
        self.map.observe(ids, self.last_action, self.asleep)
        inv = np.rint(np.asarray(vector[:len(ITEMS)], np.float64) * 9.0).astype(int)
        self.inventory = dict(zip(ITEMS, inv.tolist(), strict=True))
        self.facing = _FACING[int(np.argmax(vector[len(ITEMS):len(ITEMS) + 4]))]
        asleep = bool(vector[len(ITEMS) + 4] > 0.5)
        light = float(vector[len(ITEMS) + 5])
        self.dusk = light < 0.7 and light < self.daylight  # evening: top up before the night
        self.daylight = light
        if self.asleep and not asleep:  # woke up: the sleep routine is over
            self.vital, self.pocket = (None, None) if self.vital == "sleep" else (self.vital, self.pocket)
        self.asleep = asleep
        if counts is not None:
            if self.goal is not None and any(counts.get(g, 0) > c for g, c in self.counts.items()):
                self.goal = None  # something was achieved: choose again (plain mode: the cheapest now)
            self.counts.update(counts)
        self.t += 1

    def act(self, mode_data: bool) -> int:
        if self.asleep:
            action = NOOP
        else:
            self.plan = self.map.plan(dig_stone=self.can_dig(), dig_tree="collect wood" not in self.excluded)
            self._usable = {}
            action = self._decide(mode_data)
            sheltering = self.pocket is not None and self.vital in ("night", "recover", "sleep")
            if self.rng.random() < self.cfg.eps and not sheltering:  # no noise while walled in
                action = self.random_action()
        if action == DO and self.map.at(self.map.facing_cell(self.facing)) == SEM["plant"]:
            self.tried[self.map.facing_cell(self.facing)] = self.map.t
        self.last_action = int(action)
        return int(action)

    def has_pickaxe(self) -> bool:
        return any(self.inventory.get(k, 0) > 0 for k in ("wood_pickaxe", "stone_pickaxe", "iron_pickaxe"))

    def can_dig(self) -> bool:
        """Stone may be dug through (mining it is collecting stone, which may be excluded)."""
        return self.has_pickaxe() and "collect stone" not in self.excluded

    def _decide(self, mode_data: bool) -> int:
        if self.segment > 0:  # a random exploration segment (data mode)
            self.segment -= 1
            if self.rng.random() < 0.3 or not self.segment_dir:
                self.segment_dir = random_move(self)
            return self.segment_dir
        for rule in (threat, vitals):
            action = rule(self)
            if action is not None:
                return action
        return self._pursue(mode_data)

    def _pursue(self, mode_data: bool) -> int:
        if self.goal is not None and self.t - self.goal_t > self.cfg.goal_budget:
            self.banned[self.goal] = self.t + self.cfg.ban_steps
            self.goal = None
        for _ in range(3):
            if self.goal is None and not self._choose(mode_data):
                break
            if self.segment > 0:
                return self._decide(mode_data)
            step = self.tree.resolve(self.goal, self)
            if step is not None:
                action = self.execute(step)
                if action is not None:
                    return action
                return explore(self, self.plan)
            self.banned[self.goal] = self.t + 20
            self.goal = None
        return explore(self, self.plan)

    def execute(self, step: Step) -> int | None:
        if step.kind == "do":
            return do_step(self, self.plan, step)
        if step.kind == "do_walkable":
            return walkable_do_step(self, self.plan, step)
        if step.kind == "place":
            return place_step(self, self.plan, step)
        if step.kind == "make":
            return make_step(self, self.plan, step)
        action = sleep(self, urgent=False)  # "wake up": sleep sealed in a pocket, never in the open by choice
        if action is not None:
            self.vital = "sleep"
        return action

    def _open(self) -> list[str]:
        risky = self.inventory["health"] < self.cfg.fight_above
        return [g for g in self.tree.goals if g not in self.excluded and self.banned.get(g, -1) < self.t
                and (g != "wake up" or self.inventory["energy"] <= 7) and not (risky and g.startswith("defeat"))]

    def _choose(self, mode_data: bool) -> bool:
        """Plain: the cheapest goal not achieved yet.  Data: a random goal of the tree's frontier that is
        feasible now (its next step's target is known), new ones weighted ``new_weight``; when none is,
        the cheapest frontier goal (exploring for it); sometimes a random exploration segment instead."""
        if mode_data and self.rng.random() < self.cfg.explore_prob:
            self.segment = int(self.rng.integers(*self.cfg.explore_len))
            return True
        if mode_data:
            achieved = {g for g, c in self.counts.items() if c > 0}
            frontier = set(self.tree.frontier(achieved, self.excluded))
            goals = [g for g in self._open() if g in frontier]
        else:
            goals = [g for g in self._open() if self.counts[g] == 0]
        costs = {}
        for g in goals:
            step = self.tree.resolve(g, self)
            if step is not None:
                costs[g] = self.step_cost(step)
        if not costs:
            return False
        now = [g for g, c in costs.items() if c < 100.0]
        if mode_data and now:
            weights = np.array([1.0 if self.counts[g] > 0 else self.cfg.new_weight for g in now])
            goal = now[int(self.rng.choice(len(now), p=weights / weights.sum()))]
        else:
            goal = min(costs, key=costs.get)
        self.goal, self.goal_t, self.goal_count = goal, self.t, self.counts.get(goal, 0)
        return True

    def step_cost(self, step: Step) -> float:
        if step.kind == "do":
            found = self.plan.reach(target_mask(self, self.plan, step.targets))
            return 100.0 + 15.0 * step.depth if found is None else found[0] + 15.0 * step.depth
        if step.kind == "make":
            near = station_stand(self, self.plan, step.stations)
            found = None if near is None else self.plan.reach(near[0], stand=True)
            return 15.0 * step.depth + (100.0 if found is None else found[0])
        if step.kind == "sleep":
            pocket = self.pocket or find_pocket(self, self.plan, dig=self.can_dig())
            if pocket is None:
                return 1000.0
            i, j = pocket[0][0] - self.plan.x0, pocket[0][1] - self.plan.y0
            return 40.0 + (float(self.plan.dist[i, j]) if 0 <= i < self.plan.n and 0 <= j < self.plan.n else 100.0)
        return 3.0 + 15.0 * step.depth

    def random_action(self) -> int:
        """A uniformly random action that neither steps into lava, falls asleep, nor completes an excluded goal.

        An excluded goal's own place/make action stays among the random actions wherever it cannot complete the
        goal (its materials are not held, or no station it needs is near): the data then hold every primitive
        action, so a policy cloned from them can still press it, but never the excluded achievement."""
        faced = self.map.at(self.map.facing_cell(self.facing))
        ok = []
        for a, name in enumerate(ACTIONS):
            if a == SLEEP or (a in MOVES and self.map.at(self.map.pos + np.array(MOVES[a])) == SEM["lava"]):
                continue
            if a == DO and _COLLECTS.get(faced) in self.excluded:
                continue
            goal = name.replace("_", " ")
            if name.startswith(("place_", "make_")) and goal in self.excluded and self.could_complete(goal):
                continue
            ok.append(a)
        return int(self.rng.choice(ok))

    def could_complete(self, goal: str) -> bool:
        """Whether pressing ``goal``'s place/make action now might complete it: its materials are held and every
        station it needs is within two cells (a margin over both envs' crafting distance of one)."""
        items, near = self.tree.requirements[goal]
        if any(self.inventory.get(item, 0) < n for item, n in items.items()):
            return False
        x, y = (int(v) for v in self.map.pos)
        around = self.map.mat[max(x - 2, 0):x + 3, max(y - 2, 0):y + 3]
        return all((around == SEM[s]).any() for s in near if s in SEM)


class ExpertPolicy:
    """The scripted expert for a vector env of ``env=crafter`` or ``env=craftax`` (primitive actions).

    ``act(obs, infos)`` takes the batched observation and infos of the vector env (Gymnasium layout, as
    ``make_vector_env`` returns them; SAME_STEP autoreset: envs whose ``infos["_final_info"]`` is set
    start a new episode and their memory is cleared) and returns one action per env.  A single env's
    observation (image of ndim 3) gives a single int.
    """

    def __init__(self, env_cfg: Any = None, seed: int = 0, mode: str = "plain", exclude=(), target: str | None = None,
                 eps: float | None = None, explore_prob: float | None = None, radius: int = 24,
                 goal_budget: int | None = None, family: str | None = None, **settings: Any):
        if mode not in ("plain", "data"):
            raise ValueError(f"expert mode must be 'plain' or 'data', got {mode!r}")
        family = family or _cfg(env_cfg, "name", "crafter")
        if family not in RIPE_AFTER:
            raise ValueError(f"the expert plays env=crafter or env=craftax, not {family!r}")
        if _cfg(env_cfg, "actions", "primitive") != "primitive":
            raise ValueError("the expert acts with the 17 primitive actions (env.actions=primitive)")
        if _cfg(env_cfg, "obs", "symbolic") != "symbolic" or int(_cfg(env_cfg, "size", 9)) != 9:
            raise ValueError("the expert reads the symbolic 9x7 view (env.obs=symbolic, env.size=9)")
        from llmguide.envs.registry import get_oracle

        self.tree = RequirementTree(get_oracle(family, "primitive"))
        self.exclude = {normalize_goal(g) for g in exclude}
        unknown = self.exclude - set(self.tree.goals)
        if unknown:
            raise ValueError(f"expert exclude: unknown goals {sorted(unknown)}; choose from {self.tree.goals}")
        if target is not None:   # only the target, its prerequisites and the vitals (a task's reference player)
            goal = normalize_goal(target)
            if goal not in self.tree.goals:
                raise ValueError(f"expert target: unknown goal {goal!r}; choose from {self.tree.goals}")
            self.exclude |= set(self.tree.goals) - self.tree.closure(goal) - VITALS
        data = mode == "data"
        self.mode, self.seed = mode, int(seed)
        self.settings = ExpertSettings(
            eps=(0.1 if data else 0.0) if eps is None else float(eps),
            explore_prob=(0.15 if data else 0.0) if explore_prob is None else float(explore_prob),
            radius=int(radius), goal_budget=(150 if data else 300) if goal_budget is None else int(goal_budget),
            ripe_after=RIPE_AFTER[family], **settings)
        self.agents: list[_Agent] = []
        self._episodes = 0

    def _new_agent(self) -> _Agent:
        self._episodes += 1
        rng = np.random.default_rng([self.seed, self._episodes])
        return _Agent(self.tree, self.settings, self.exclude, rng)

    def reset(self, index: int | None = None) -> None:
        """Forget env ``index`` (all envs when None): its next observation starts an episode."""
        if index is None:
            self.agents = []
        elif index < len(self.agents):
            self.agents[index] = self._new_agent()

    def act(self, obs: dict, infos: dict | None = None) -> np.ndarray | int:
        image, vector = np.asarray(obs["image"]), np.asarray(obs["vector"])
        single = image.ndim == 3
        if single:
            image, vector = image[None], vector[None]
        n = image.shape[0]
        while len(self.agents) < n:
            self.agents.append(self._new_agent())
        infos = infos or {}
        for key in ("_final_info", "_final_obs"):
            if key in infos:
                for i in np.flatnonzero(np.asarray(infos[key])):
                    self.agents[i] = self._new_agent()
                break
        ids = view_ids(image)
        counts = _counts(infos.get("achievements"), n)
        out = np.empty(n, np.int64)
        for i, agent in enumerate(self.agents[:n]):
            agent.observe(ids[i], vector[i], counts[i])
            out[i] = agent.act(self.mode == "data")
        return int(out[0]) if single else out

    __call__ = act

    def executed(self, actions: np.ndarray) -> None:
        """The actions the envs took when another policy drives (DAgger): dead reckoning follows those moves."""
        for agent, action in zip(self.agents, np.asarray(actions).reshape(-1), strict=False):
            agent.last_action = int(action)

    @property
    def goals(self) -> list[str | None]:
        """Each env's current goal (None while surviving, exploring or idle)."""
        return [a.goal for a in self.agents]


def _counts(ach: Any, n: int) -> list[dict[str, int] | None]:
    """Per env ``{goal: count this episode}`` from an info's ``achievements`` (dict of arrays or of ints)."""
    if not isinstance(ach, dict):
        return [None] * n
    out: list[dict[str, int]] = [{} for _ in range(n)]
    for name, value in ach.items():
        if name.startswith("_"):
            continue
        col = np.broadcast_to(np.asarray(value), (n,))
        for i in range(n):
            out[i][name.replace("_", " ")] = int(col[i])
    return out


__all__ = ["ExpertPolicy", "ExpertSettings", "RIPE_AFTER"]
