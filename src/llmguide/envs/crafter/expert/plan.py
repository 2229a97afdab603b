"""The expert's planner over the requirement tree (:mod:`.agent`).

Everything comes from the env family's oracle (``CrafterOracle.requirements`` / ``prerequisites``,
or Craftax-Classic's with its own costs): a goal ``collect X`` provides item X, ``make X`` the tool
X, ``place X`` the station X; a goal's requirement is (items, things nearby).  :meth:`RequirementTree.resolve`
walks the tree from a goal down to the one thing to do now (a :class:`Step`): collect a missing
resource, make a missing tool, place a missing station, or the goal's own final action.  Resources
are counted for the whole subtree first (a stone pickaxe without a table needs 1 + 2 wood + the
wooden pickaxe's 1), tools are never consumed.  A goal whose resolution passes through an excluded
goal is infeasible.  Nothing here is a hand-written order: which goal comes next is the policy's choice
(:mod:`.agent`), among the goals this tree says are feasible.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Protocol

from crafter import constants

ACTIONS: list[str] = list(constants.actions)  # Crafter's 17 primitive actions (Craftax-Classic: same order)
NOOP, DO, SLEEP = ACTIONS.index("noop"), ACTIONS.index("do"), ACTIONS.index("sleep")
PLACE_STONE = ACTIONS.index("place_stone")


@dataclass(frozen=True)
class Step:
    """One thing to do now for ``goal``.

    ``kind``: "do" (face a cell holding one of ``targets`` and press do), "do_walkable" (the same for a
    walkable cell: grass for a sapling), "place" (face a free cell of ``where`` and press ``action``),
    "make" (stand within one cell of every station in ``stations`` and press ``action``), "sleep".
    """

    kind: str
    goal: str
    targets: tuple[str, ...] = ()
    action: int = NOOP
    where: tuple[str, ...] = ()
    stations: tuple[str, ...] = ()
    near: tuple[str, ...] = field(default=())  # place: stand next to these stations first when known
    depth: int = 0  # how many requirements down the tree from the goal it serves


class Context(Protocol):
    """What the planner needs to know about one agent now."""

    inventory: dict[str, int]
    excluded: set[str]

    def station_usable(self, name: str) -> bool:
        """A ``name`` (table, furnace, ripe plant) is known and close enough to walk to."""

    def plant_growing(self) -> bool:
        """A plant the agent knows is growing (not ripe yet)."""


class RequirementTree:
    """Requirements, providers and stations of one env family, read from its oracle."""

    def __init__(self, oracle):
        self.goals: list[str] = list(oracle.goals)
        self.requirements = {g: (dict(items), tuple(near)) for g, (items, near) in oracle.requirements.items()}
        self.prerequisites = {g: list(p) for g, p in oracle.prerequisites.items()}
        self.provider: dict[str, str] = {}  # item -> the goal that yields it (collect X, make X)
        self.station: dict[str, str] = {}  # thing -> the goal that puts it in the world (place X)
        for goal in self.goals:
            verb, _, noun = goal.partition(" ")
            if verb in ("collect", "make"):
                self.provider[noun.replace(" ", "_")] = goal
            elif verb == "place":
                self.station[noun] = goal
        self.tools = {item for item, g in self.provider.items() if g.startswith("make ")}
        # a station to place next to the other stations that some recipe needs together with it
        self.companions: dict[str, tuple[str, ...]] = {}
        for goal, (_, near) in self.requirements.items():
            if goal.startswith("make "):
                for s in near:
                    others = tuple(o for o in near if o != s and o in self.station)
                    self.companions[s] = tuple(sorted(set(self.companions.get(s, ())) | set(others)))

    # --- resolution ----------------------------------------------------------------------
    def _stations_needed(self, goal: str) -> tuple[str, ...]:
        _, near = self.requirements[goal]
        if goal.startswith("make ") or goal == "eat plant":
            return tuple(n for n in near if n in self.station)
        return ()

    def total_need(self, goal: str, ctx: Context, seen: set[str] | None = None) -> Counter:
        """Resources (consumables) the whole subtree of ``goal`` still uses, given held tools and known stations."""
        seen = set() if seen is None else seen
        items, _ = self.requirements[goal]
        need: Counter = Counter()
        for item, n in items.items():
            if item in self.tools:
                if ctx.inventory.get(item, 0) < n and self.provider[item] not in seen:
                    seen.add(self.provider[item])
                    need += self.total_need(self.provider[item], ctx, seen)
            else:
                need[item] += n
                collect = self.provider.get(item)  # the tools collecting it needs, when it must be collected
                if collect and ctx.inventory.get(item, 0) < n and collect not in seen:
                    seen.add(collect)
                    need += self.total_need(collect, ctx, seen)
        for s in self._stations_needed(goal):
            if s != "plant" and not ctx.station_usable(s) and self.station[s] not in seen:
                seen.add(self.station[s])
                need += self.total_need(self.station[s], ctx, seen)
        return need

    def _tool_ready(self, item: str, ctx: Context) -> bool:
        """The goal providing ``item`` needs no tool the agent lacks."""
        items, _ = self.requirements[self.provider[item]]
        return all(ctx.inventory.get(t, 0) >= n for t, n in items.items() if t in self.tools)

    def resolve(self, goal: str, ctx: Context, depth: int = 0) -> Step | None:
        """The step to take now towards ``goal`` (its ``goal`` the sub-goal whose action it is, ``depth`` how
        far down); None when it is infeasible (needs an excluded goal, or waits for a plant to ripen)."""
        return self._resolve(goal, ctx, depth)

    def _resolve(self, goal: str, ctx: Context, depth: int) -> Step | None:
        if goal in ctx.excluded or depth > 10 or goal not in self.requirements:
            return None
        if goal.startswith("collect ") and goal.split(" ", 1)[1] in self.tools:
            return None
        need = self.total_need(goal, ctx)
        short = [i for i, n in need.items() if ctx.inventory.get(i, 0) < min(n, 9)]
        if short:  # resources first, those collectable with the tools at hand before the others
            item = min(short, key=lambda i: (not self._tool_ready(i, ctx), short.index(i)))
            return self._resolve(self.provider[item], ctx, depth + 1) if item in self.provider else None
        items, near = self.requirements[goal]
        for tool, n in items.items():  # tools before stations: a furnace waits for the iron it serves
            if tool in self.tools and ctx.inventory.get(tool, 0) < n:
                return self._resolve(self.provider[tool], ctx, depth + 1)
        for s in self._stations_needed(goal):
            if not ctx.station_usable(s):
                if s == "plant" and ctx.plant_growing():
                    return None  # wait for it to ripen
                return self._resolve(self.station[s], ctx, depth + 1)
        return replace(self.final(goal), depth=depth)

    def final(self, goal: str) -> Step:
        """The goal's own action once its requirements hold."""
        verb, _, noun = goal.partition(" ")
        _, near = self.requirements[goal]
        if verb == "place":
            where = tuple(constants.place[noun]["where"])
            return Step("place", goal, action=ACTIONS.index(f"place_{noun}"), where=where,
                        near=self.companions.get(noun, ()))
        if verb == "make":
            return Step("make", goal, action=ACTIONS.index(f"make_{noun.replace(' ', '_')}"), stations=near)
        if goal == "wake up":
            return Step("sleep", goal, action=SLEEP)
        if near and near[0] in constants.walkable:
            return Step("do_walkable", goal, targets=near, action=DO)
        return Step("do", goal, targets=near, action=DO)

    # --- which goals ---------------------------------------------------------------------
    def frontier(self, achieved: set[str], excluded: set[str]) -> list[str]:
        """Goals whose prerequisites were all achieved this episode (the next layer of the tree)."""
        return [g for g in self.goals if g not in excluded
                and all(p in achieved for p in self.prerequisites.get(g, ()))]

    def closure(self, goal: str) -> set[str]:
        """``goal`` and every goal it can require from scratch (its prerequisites, recursively)."""
        out, todo = set(), [goal]
        while todo:
            g = todo.pop()
            if g not in out:
                out.add(g)
                todo += self.prerequisites.get(g, [])
        return out

    def uses_excluded(self, goal: str, excluded: set[str], seen: set[str] | None = None) -> bool:
        """Whether ``goal`` or anything it can require from scratch is excluded."""
        seen = set() if seen is None else seen
        if goal in excluded:
            return True
        seen.add(goal)
        return any(self.uses_excluded(p, excluded, seen) for p in self.prerequisites.get(goal, ()) if p not in seen)
