"""ELLM's text action space for Crafter (``env.actions=text``): 6 verb-only actions + 7 verbs × 19 nouns.

The 139 action strings ("chop tree", "drink stone", ...) map onto Crafter's 17 primitive actions.  A
verb-noun action that acts on the faced cell ("chop", "mine", "drink", "eat", "attack") runs Crafter's
``do`` only when the noun names what the agent faces and the pair is one of the game's real actions
(ELLM's ``good_actions``); otherwise it does nothing.  "place X" / "make X" run the matching place or
make action ("make crafting table" places a table, "eat cow" attacks a cow, as in ELLM).

Each step's ``info`` gains, as in the ELLM reference:

* ``action_text``: the action string;
* ``action_success``: the loose check ELLM's reward is gated on — the noun is what the agent faces, or an
  item it holds (or a verb-only action that succeeded);
* ``eval_success``: the game effect happened (an achievement counter rose, the attacked creature lost
  health, the agent moved, fell asleep, or did nothing on purpose).

``lenient_rules=True`` applies the reference's rule changes: a table costs 1 wood (Crafter: 2), attacks do
at least 5 damage (Crafter: 1 without a sword), and the env reward is the unlock reward only (no health
term).
"""

from __future__ import annotations

from types import MethodType
from typing import Any

import gymnasium as gym
import numpy as np

from llmguide.envs.base import Oracle, normalize_goal
from llmguide.envs.crafter.rules import CrafterOracle

VERB_ONLY = ["do nothing", "move left", "move right", "move up", "move down", "sleep"]
VERBS = ["mine", "eat", "attack", "chop", "drink", "place", "make"]
NOUNS = ["zombie", "skeleton", "cow", "tree", "stone", "coal", "iron", "diamond", "water", "grass",
         "crafting table", "furnace", "plant", "wood pickaxe", "stone pickaxe", "iron pickaxe", "wood sword",
         "stone sword", "iron sword"]
ACTION_STRINGS: list[str] = VERB_ONLY + [f"{v} {n}" for v in VERBS for n in NOUNS]   # 139

# the pairs that are real game actions (ELLM's good_actions), with what they act on in the world
FACED_ACTIONS = {"eat plant": "plant", "attack zombie": "zombie", "attack skeleton": "skeleton",
                 "attack cow": "cow", "eat cow": "cow", "chop tree": "tree", "chop grass": "grass",
                 "mine stone": "stone", "mine coal": "coal", "mine iron": "iron", "mine diamond": "diamond",
                 "drink water": "water"}
PRIMITIVE = {"do nothing": "noop", "move left": "move_left", "move right": "move_right", "move up": "move_up",
             "move down": "move_down", "sleep": "sleep", "place stone": "place_stone",
             "place crafting table": "place_table", "make crafting table": "place_table",
             "place furnace": "place_furnace", "place plant": "place_plant",
             **{f"make {t} {k}": f"make_{t}_{k}" for t in ("wood", "stone", "iron") for k in ("pickaxe", "sword")},
             **dict.fromkeys(FACED_ACTIONS, "do")}
GOOD_ACTIONS: list[str] = [a for a in ACTION_STRINGS if a in PRIMITIVE]

# the action that achieves each Crafter achievement (the goal vocabulary of ELLM's action-matching reward)
ACHIEVEMENT_ACTIONS = {
    "collect coal": "mine coal", "collect diamond": "mine diamond", "collect drink": "drink water",
    "collect iron": "mine iron", "collect sapling": "chop grass", "collect stone": "mine stone",
    "collect wood": "chop tree", "defeat skeleton": "attack skeleton", "defeat zombie": "attack zombie",
    "eat cow": "attack cow", "eat plant": "eat plant", "make iron pickaxe": "make iron pickaxe",
    "make iron sword": "make iron sword", "make stone pickaxe": "make stone pickaxe",
    "make stone sword": "make stone sword", "make wood pickaxe": "make wood pickaxe",
    "make wood sword": "make wood sword", "place furnace": "place furnace", "place plant": "place plant",
    "place stone": "place stone", "place table": "place crafting table", "wake up": "sleep",
}
SAME_ACTION = {"eat cow": "attack cow", "make crafting table": "place crafting table"}  # aliases


def canonical_action(text: str) -> str:
    """The action an alias stands for ("eat cow" -> "attack cow")."""
    return SAME_ACTION.get(text, text)


class CrafterTextActions(gym.Wrapper):
    """ELLM's 139 text actions over :class:`~llmguide.envs.crafter.env.CrafterText` (see the module doc)."""

    action_strings = ACTION_STRINGS

    def __init__(self, env: gym.Env, lenient_rules: bool = False):
        super().__init__(env)
        from crafter import constants

        self._primitive = {a: constants.actions.index(PRIMITIVE.get(a, "noop")) for a in ACTION_STRINGS}
        self.action_space = gym.spaces.Discrete(len(ACTION_STRINGS))
        self.lenient_rules = bool(lenient_rules)
        self._unlocked: set[str] = set()

    @property
    def _player(self) -> Any:
        return self.env.unwrapped._core._player

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self._unlocked = set()
        if self.lenient_rules:
            _apply_lenient_rules(self._player)
        return obs, {**info, "action_text": "", "action_success": False, "eval_success": False}

    def step(self, action: int):
        text = ACTION_STRINGS[int(action)]
        player, world = self._player, self.env.unwrapped._core._world
        faced_material, faced_obj = world[player.pos + np.array(player.facing)]
        faced = type(faced_obj).__name__.lower() if faced_obj is not None else faced_material
        faced = "crafting table" if faced == "table" else faced
        runs = text not in FACED_ACTIONS or FACED_ACTIONS[text] == faced
        before = (dict(player.achievements), tuple(player.pos), getattr(faced_obj, "health", None), player.sleeping)
        obs, reward, terminated, truncated, info = self.env.step(self._primitive[text] if runs else 0)
        eval_success = self._effect(text, before, faced_obj) if runs else False
        noun = text.split(" ", 1)[1] if text not in VERB_ONLY else None
        held = noun is not None and player.inventory.get(noun.replace(" ", "_"), 0) > 0
        info.update(action_text=text, eval_success=eval_success,
                    action_success=bool(eval_success or (noun is not None and (noun == faced or held))))
        if self.lenient_rules:  # the unlock reward only (Crafter adds a health term)
            new = {k for k, v in player.achievements.items() if v > 0} - self._unlocked
            self._unlocked |= new
            if self.env.unwrapped.task is None:
                reward = 1.0 if new else 0.0
        return obs, reward, terminated, truncated, info

    def _effect(self, text: str, before: tuple, faced_obj: Any) -> bool:
        achievements, pos, health, sleeping = before
        player = self._player
        if text == "do nothing":
            return True
        if text.startswith("move "):
            return tuple(player.pos) != pos
        if text == "sleep":
            return player.sleeping and not sleeping
        if any(v > achievements.get(k, 0) for k, v in player.achievements.items()):
            return True
        return health is not None and faced_obj is not None and faced_obj.health < health


def _apply_lenient_rules(player: Any) -> None:
    """The lenient rules (ELLM's reference) on one Crafter player: a table costs 1 wood, attacks do >= 5 damage."""
    place, do_object = player._place, player._do_object

    def cheap_table(self: Any, name: str, target: Any, material: Any) -> None:
        if name == "table" and self.inventory["wood"] == 1:
            self.inventory["wood"] += 1          # Crafter asks 2: lend one, take it back if unused
            place(name, target, material)
            if self.inventory["wood"] == 2:
                self.inventory["wood"] -= 1
            return
        wood = self.inventory["wood"]
        place(name, target, material)
        if name == "table" and self.inventory["wood"] == wood - 2:
            self.inventory["wood"] += 1          # placed: charge 1 wood, not 2

    def hard_hit(self: Any, obj: Any) -> None:
        if type(obj).__name__ in ("Zombie", "Skeleton", "Cow"):
            inv = self.inventory
            damage = max(1, inv["wood_sword"] and 2, inv["stone_sword"] and 3, inv["iron_sword"] and 5)
            obj.health -= 5 - damage     # Crafter then deals `damage` and checks the kill: 5 in all
        do_object(obj)

    player._place = MethodType(cheap_table, player)
    player._do_object = MethodType(hard_hit, player)


class CrafterActionOracle(Oracle):
    """Crafter's oracle in the action vocabulary of ELLM's text actions ("chop tree" for "collect wood"):
    the goals ELLM's reference oracle suggests and its action-matching reward pays for."""

    family = "crafter"

    def __init__(self, base: Oracle | None = None) -> None:
        self.base = base or CrafterOracle()   # the rules (recipe costs) behind the goals: Craftax passes its own
        self.goals = list(dict.fromkeys(ACHIEVEMENT_ACTIONS[g] for g in self.base.goals))
        self.prerequisites = {ACHIEVEMENT_ACTIONS[g]: [ACHIEVEMENT_ACTIONS[p] for p in pre]
                              for g, pre in self.base.prerequisites.items()}

    def _actions(self, goals: set[str]) -> set[str]:
        return {ACHIEVEMENT_ACTIONS[g] for g in goals if g in ACHIEVEMENT_ACTIONS}

    def feasible(self, info: dict) -> set[str]:
        return self._actions(self.base.feasible(info))

    def feasible_from_caption(self, caption: str) -> set[str]:
        return self._actions(self.base.feasible_from_caption(caption))

    def achieved(self, info: dict) -> set[str]:
        return self._actions(self.base.achieved(info))

    def suggest_from_caption(self, caption: str) -> list[str]:
        return [ACHIEVEMENT_ACTIONS[g] for g in self.base.suggest_from_caption(caption)]

    def canonical(self, goal: str) -> str | None:
        name = normalize_goal(goal)
        name = canonical_action(ACHIEVEMENT_ACTIONS.get(name, name))
        return name if name in self.goals else None


def make_oracle(actions: str = "primitive") -> Oracle:
    """Crafter's goal oracle; with ``actions="text"`` in ELLM's action vocabulary."""
    return CrafterActionOracle() if actions == "text" else CrafterOracle()
