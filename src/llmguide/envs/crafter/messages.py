"""The message line of Crafter and Craftax-Classic: one grammar that captions every change of the agent's
situation, as NetHack's message line does (``info["message"]``, ``""`` when nothing happened).

A step's :class:`Change` lists what changed, and :func:`render` writes it as sentences, always in this order:

========================  ==========================================================================
change                    sentence(s)
========================  ==========================================================================
a failed action           "Nothing happens." (an action other than noop that changed nothing)
a creature hit, alive     "You hit a zombie."
achievements              "You collect wood.", "You place a table.", "You make a stone pickaxe.",
                          "You drink water.", "You eat a cow.", "You defeat a zombie.", ... (every time)
inventory gains, losses   "You get 1 wood pickaxe.", "You lose 1 wood." (the 12 non-vital items)
falling asleep, waking    "You fall asleep.", "You wake up."
damage and its source     "You are hit by a zombie.", "... by an arrow.", "You are burnt by lava.",
                          "You suffer from hunger." (thirst, fatigue), "You are hurt." (unknown)
vitals crossing           "You feel hungry." (below 5 of 9; hurt, thirsty, sleepy), "You no longer feel
thresholds                hungry." (back to 5), "You are starving." (food 0; dehydrated, exhausted)
touching water or lava    "You are next to water.", "You are next to lava." (it became adjacent)
a new kind in view        "You see a cow, a tree and water." (came into view this step)
death                     "You die."
========================  ==========================================================================

Crafter builds its :class:`Change` from two :class:`Snapshot` s of its Python state (:func:`diff`, the reference
rules); Craftax-Classic computes the same differences inside its jitted step
(:func:`llmguide.envs.craftax.text.message_key`) and decodes them into a :class:`Change` on the host, once per
distinct key.  Both render with :func:`render`, so the strings are the same.  :func:`message_achievements`
reads the achievements back from a message (the oracle's message ground truth).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from crafter import constants

ACHIEVEMENT_NAMES: list[str] = list(constants.achievements)
ITEM_NAMES: list[str] = list(constants.items)
VITALS = ("health", "food", "drink", "energy")
NON_VITALS = [k for k in ITEM_NAMES if k not in VITALS]
FEELINGS = {"health": "hurt", "food": "hungry", "drink": "thirsty", "energy": "sleepy"}
FEEL_BELOW = 5  # "You feel thirsty." when drink < 5 (of 9)
EMPTY = {"food": "starving", "drink": "dehydrated", "energy": "exhausted"}  # a vital at 0 (health 0: death)
CREATURES = ("cow", "zombie", "skeleton")
# the kinds whose coming into view is news (ground that is everywhere, arrows and the player are not)
SIGHTS = ("water", "stone", "tree", "coal", "iron", "diamond", "table", "furnace", "lava", "cow", "zombie",
          "skeleton", "plant")
TOUCH = ("water", "lava")
DAMAGE_SOURCES = ("zombie", "arrow", "lava", "hunger", "thirst", "fatigue", "unknown")
ARROW_RANGE, SKELETON_RANGE = 2, 5  # an arrow this close before the step, a skeleton this close after it

_NOUN = {"water": "water", "lava": "lava", "stone": "stone", "coal": "coal", "iron": "iron", "diamond": "a diamond",
         "tree": "a tree", "table": "a table", "furnace": "a furnace", "plant": "a plant", "cow": "a cow",
         "zombie": "a zombie", "skeleton": "a skeleton", "sapling": "a sapling", "arrow": "an arrow"}
ACHIEVEMENT_SENTENCES = {
    "collect_coal": "You collect coal.", "collect_diamond": "You collect a diamond.",
    "collect_drink": "You drink water.", "collect_iron": "You collect iron.",
    "collect_sapling": "You collect a sapling.", "collect_stone": "You collect stone.",
    "collect_wood": "You collect wood.", "defeat_skeleton": "You defeat a skeleton.",
    "defeat_zombie": "You defeat a zombie.", "eat_cow": "You eat a cow.", "eat_plant": "You eat a plant.",
    "make_iron_pickaxe": "You make an iron pickaxe.", "make_iron_sword": "You make an iron sword.",
    "make_stone_pickaxe": "You make a stone pickaxe.", "make_stone_sword": "You make a stone sword.",
    "make_wood_pickaxe": "You make a wood pickaxe.", "make_wood_sword": "You make a wood sword.",
    "place_furnace": "You place a furnace.", "place_plant": "You place a plant.",
    "place_stone": "You place stone.", "place_table": "You place a table.", "wake_up": "You wake up.",
}
assert set(ACHIEVEMENT_SENTENCES) == set(ACHIEVEMENT_NAMES)
_KILLS = {"cow": "eat_cow", "zombie": "defeat_zombie", "skeleton": "defeat_skeleton"}
_DAMAGE = {"zombie": "You are hit by a zombie.", "arrow": "You are hit by an arrow.",
           "lava": "You are burnt by lava.", "hunger": "You suffer from hunger.",
           "thirst": "You suffer from thirst.", "fatigue": "You suffer from fatigue.", "unknown": "You are hurt."}
_BY_SENTENCE = {s: name.replace("_", " ") for name, s in ACHIEVEMENT_SENTENCES.items()}
_SENTENCES = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Change:
    """What one step changed in the agent's situation (every field empty: nothing happened)."""

    failed: bool = False                            # an action other than noop changed nothing
    hit: str | None = None                          # the creature the action hit (cow, zombie, skeleton)
    achievements: tuple[str, ...] = ()              # ACHIEVEMENT_NAMES, in that order, each time it happens
    gained: tuple[tuple[str, int], ...] = ()        # (non-vital item, amount), ITEM_NAMES order
    lost: tuple[tuple[str, int], ...] = ()
    fell_asleep: bool = False
    woke_up: bool = False
    damage: str | None = None                       # one of DAMAGE_SOURCES when health went down
    vitals: tuple[tuple[str, str], ...] = ()        # (vital, "low" | "ok" | "empty"), VITALS order
    touched: tuple[str, ...] = ()                   # TOUCH kinds that became adjacent
    seen: tuple[str, ...] = ()                      # SIGHTS that came into view, SIGHTS order
    died: bool = False


def _listing(nouns: list[str]) -> str:
    return nouns[0] if len(nouns) == 1 else ", ".join(nouns[:-1]) + " and " + nouns[-1]


def render(change: Change) -> str:
    """The message line of one step (module docstring); ``""`` when nothing happened."""
    out: list[str] = []
    if change.failed:
        out.append("Nothing happens.")
    if change.hit and _KILLS[change.hit] not in change.achievements:
        out.append(f"You hit {_NOUN[change.hit]}.")
    out += [ACHIEVEMENT_SENTENCES[a] for a in change.achievements if a != "wake_up"]
    out += [f"You get {n} {k.replace('_', ' ')}." for k, n in change.gained]
    out += [f"You lose {n} {k.replace('_', ' ')}." for k, n in change.lost]
    if change.fell_asleep:
        out.append("You fall asleep.")
    if change.woke_up or "wake_up" in change.achievements:
        out.append("You wake up.")
    if change.damage:
        out.append(_DAMAGE[change.damage])
    for vital, kind in change.vitals:
        out.append({"low": f"You feel {FEELINGS[vital]}.", "ok": f"You no longer feel {FEELINGS[vital]}.",
                    "empty": f"You are {EMPTY.get(vital, 'dying')}."}[kind])
    out += [f"You are next to {k}." for k in change.touched]
    if change.seen:
        out.append("You see " + _listing([_NOUN[k] for k in change.seen]) + ".")
    if change.died:
        out.append("You die.")
    return " ".join(out)


def message_achievements(message: str) -> list[str]:
    """The achievements a message reports, as goal strings ("collect wood"), in message order."""
    if not message:
        return []
    return [_BY_SENTENCE[s] for s in _SENTENCES.split(message.strip()) if s in _BY_SENTENCE]


def vital_crossings(before: dict[str, int], after: dict[str, int]) -> tuple[tuple[str, str], ...]:
    """(vital, kind) for each vital that crossed :data:`FEEL_BELOW` (low / ok) or reached 0 (empty)."""
    out = []
    for k in VITALS:
        v0, v1 = int(before.get(k, 9)), int(after.get(k, 9))
        if v0 >= FEEL_BELOW > v1:
            out.append((k, "low"))
        elif v0 < FEEL_BELOW <= v1:
            out.append((k, "ok"))
        if k != "health" and v0 > 0 and v1 == 0:
            out.append((k, "empty"))
    return tuple(out)


def damage_source(on_lava: bool, zombie_adjacent: bool, arrow_before: bool, skeleton_after: bool,
                  vitals_after: dict[str, int], sleeping_after: bool) -> str:
    """The source of a health loss, first match: lava underfoot, a zombie next to the player, an arrow
    (one within :data:`ARROW_RANGE` before the step or a skeleton within :data:`SKELETON_RANGE` after it),
    an empty vital (food, drink, energy while awake), else unknown."""
    if on_lava:
        return "lava"
    if zombie_adjacent:
        return "zombie"
    if arrow_before or skeleton_after:
        return "arrow"
    if vitals_after.get("food", 9) == 0:
        return "hunger"
    if vitals_after.get("drink", 9) == 0:
        return "thirst"
    if vitals_after.get("energy", 9) == 0 and not sleeping_after:
        return "fatigue"
    return "unknown"


@dataclass
class Snapshot:
    """The parts of a Crafter-like state that :func:`diff` compares (built by the env before and after a step)."""

    inventory: dict[str, int]
    achievements: dict[str, int]
    sleeping: bool
    pos: tuple[int, int]
    facing: tuple[int, int]
    target: str | None                      # material of the faced cell (before the step: the action's target)
    creature: str | None                    # creature standing on the faced cell
    visible: frozenset[str] = field(default_factory=frozenset)
    touching: frozenset[str] = field(default_factory=frozenset)   # TOUCH kinds underfoot or 4-adjacent
    on_lava: bool = False
    zombie_adjacent: bool = False           # a zombie at distance 1
    arrow_near: bool = False                # an arrow within ARROW_RANGE
    skeleton_near: bool = False             # a skeleton within SKELETON_RANGE


def diff(before: Snapshot, after: Snapshot, action: str, target_after: str | None) -> Change:
    """The :class:`Change` of one step ``before --action--> after`` (Crafter's reference rules; the JAX version
    is :func:`llmguide.envs.craftax.text.message_key`).  ``target_after`` is the material of the cell that was
    faced before the step, read after it.  An action taken while asleep counts as noop."""
    action = "noop" if before.sleeping else action
    ach = tuple(a for a in ACHIEVEMENT_NAMES if after.achievements.get(a, 0) > before.achievements.get(a, 0))
    delta = {k: int(after.inventory.get(k, 0)) - int(before.inventory.get(k, 0)) for k in NON_VITALS}
    hit = before.creature if action == "do" else None
    changed = (bool(ach) or any(delta.values()) or hit is not None or before.pos != after.pos
               or before.facing != after.facing or before.sleeping != after.sleeping or before.target != target_after)
    hurt = after.inventory.get("health", 0) < before.inventory.get("health", 0)
    return Change(
        failed=action != "noop" and not changed,
        hit=hit,
        achievements=ach,
        gained=tuple((k, d) for k, d in delta.items() if d > 0),
        lost=tuple((k, -d) for k, d in delta.items() if d < 0),
        fell_asleep=after.sleeping and not before.sleeping,
        woke_up=before.sleeping and not after.sleeping,
        damage=damage_source(after.on_lava, after.zombie_adjacent, before.arrow_near, after.skeleton_near,
                             after.inventory, after.sleeping) if hurt else None,
        vitals=vital_crossings(before.inventory, after.inventory),
        touched=tuple(k for k in TOUCH if k in after.touching and k not in before.touching),
        seen=tuple(k for k in SIGHTS if k in after.visible and k not in before.visible),
        died=after.inventory.get("health", 0) <= 0 or after.on_lava,
    )


__all__ = ["ACHIEVEMENT_SENTENCES", "Change", "SIGHTS", "Snapshot", "diff", "message_achievements", "render"]
