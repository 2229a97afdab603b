"""ELLM's 139 text actions on ``env=craftax`` (``env.actions=text``), vectorised over all envs.

The same action strings, primitive mapping and flags as :mod:`llmguide.envs.crafter.actions`, computed
with NumPy over the N envs of :class:`~llmguide.envs.craftax.env.CraftaxVectorEnv` instead of per env:

* a verb-noun action on the faced cell runs Craftax's ``DO`` only when the noun names the faced class
  (ELLM's ``good_actions``), otherwise nothing happens;
* ``action_success``: the noun is what the agent faced before acting or an item it holds after, or
  the action had its effect;
* ``eval_success``: the effect happened — "do nothing" always, a move moved the player, "sleep" put it
  to sleep, any other action raised an achievement counter or hit the creature it faced (JAX side:
  :func:`llmguide.envs.craftax.text.action_effects`).

ELLM's rule changes (``env.lenient_rules``) are Crafter-only: they patch Crafter's Python game logic.
"""

from __future__ import annotations

import numpy as np
from crafter import constants

from llmguide.envs.crafter.actions import ACTION_STRINGS, FACED_ACTIONS, PRIMITIVE, VERB_ONLY
from llmguide.envs.crafter.rules import ACHIEVEMENTS, ITEMS, SEMANTIC_NAMES

# Crafter's primitive actions; Craftax-Classic's ``Action`` enum has the same order
PRIMITIVES: list[str] = constants.actions
_SEM = {name: i for i, name in enumerate(SEMANTIC_NAMES) if name}
_ACHIEVEMENT_MASK = (1 << len(ACHIEVEMENTS)) - 1


def _noun(text: str) -> str | None:
    return None if text in VERB_ONLY else text.split(" ", 1)[1]


PRIMITIVE_OF = np.array([PRIMITIVES.index(PRIMITIVE.get(a, "noop")) for a in ACTION_STRINGS], np.int64)
NEEDS_FACING = np.array([_SEM[FACED_ACTIONS[a]] if a in FACED_ACTIONS else -1 for a in ACTION_STRINGS], np.int64)
NOUN_CLASS = np.array([_SEM.get("table" if n == "crafting table" else n, -1) if n else -1
                       for n in map(_noun, ACTION_STRINGS)], np.int64)
NOUN_ITEM = np.array([ITEMS.index(n.replace(" ", "_")) if n and n.replace(" ", "_") in ITEMS else -1
                      for n in map(_noun, ACTION_STRINGS)], np.int64)
IS_NOOP = np.array([a == "do nothing" for a in ACTION_STRINGS])
IS_MOVE = np.array([a.startswith("move ") for a in ACTION_STRINGS])
IS_SLEEP = np.array([a == "sleep" for a in ACTION_STRINGS])
TEXT = np.array(ACTION_STRINGS, dtype=object)


def primitive_actions(actions: np.ndarray, facing: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Craftax primitive action per env, whether the text action runs) for text actions ``actions``
    taken while facing semantic classes ``facing``."""
    need = NEEDS_FACING[actions]
    runs = (need < 0) | (need == facing)
    return np.where(runs, PRIMITIVE_OF[actions], 0), runs


def action_flags(actions: np.ndarray, runs: np.ndarray, facing: np.ndarray, inventory_after: np.ndarray,
                 event_bits: np.ndarray, effects: np.ndarray) -> dict[str, np.ndarray]:
    """``action_text``, ``action_success``, ``eval_success`` per env (``effects``: moved, asleep, hit)."""
    moved, asleep, hit = effects[:, 0], effects[:, 1], effects[:, 2]
    unlocked = (np.asarray(event_bits, np.int64) & _ACHIEVEMENT_MASK) != 0
    other = ~(IS_NOOP | IS_MOVE | IS_SLEEP)[actions]
    effect = (IS_NOOP[actions] | (IS_MOVE[actions] & moved) | (IS_SLEEP[actions] & asleep)
              | (other & (unlocked | hit)))
    eval_success = runs & effect
    noun_class, noun_item = NOUN_CLASS[actions], NOUN_ITEM[actions]
    faced = (noun_class >= 0) & (noun_class == facing)
    held = (noun_item >= 0) & (np.take_along_axis(inventory_after, np.maximum(noun_item, 0)[:, None], 1)[:, 0] > 0)
    return {"action_text": TEXT[actions], "action_success": eval_success | faced | held,
            "eval_success": eval_success}


__all__ = ["action_flags", "primitive_actions"]
