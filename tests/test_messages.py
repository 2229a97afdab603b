"""The message line of Crafter and Craftax-Classic (``info["message"]``, envs/crafter/messages.py): the grammar,
Crafter's message from real state changes, and parity: the same situation stepped with the same action in both
envs gives the same string (the Craftax world is mirrored into Crafter, as in test_envs_craftax.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from llmguide.envs.crafter.env import CrafterText
from llmguide.envs.crafter.messages import (
    ACHIEVEMENT_NAMES,
    ACHIEVEMENT_SENTENCES,
    Change,
    message_achievements,
    render,
)
from llmguide.envs.crafter.rules import CrafterOracle
from llmguide.methods.oni.oracle import helpful, prefer

NOOP, RIGHT, DOWN, DO, SLEEP, PLACE_STONE, PLACE_TABLE, MAKE_WOOD_PICKAXE = 0, 2, 4, 5, 6, 7, 8, 11


# --- the grammar ----------------------------------------------------------------------------------------
def test_every_kind_of_change_has_its_sentence_in_a_fixed_order():
    change = Change(failed=False, hit="zombie", achievements=("make_wood_pickaxe",), gained=(("wood_pickaxe", 1),),
                    lost=(("wood", 1),), fell_asleep=False, woke_up=True, damage="zombie",
                    vitals=(("health", "low"), ("food", "ok"), ("drink", "empty")), touched=("water", "lava"),
                    seen=("iron", "cow", "zombie"), died=True)
    assert render(change) == (
        "You hit a zombie. You make a wood pickaxe. You get 1 wood pickaxe. You lose 1 wood. You wake up. "
        "You are hit by a zombie. You feel hurt. You no longer feel hungry. You are dehydrated. "
        "You are next to water. You are next to lava. You see iron, a cow and a zombie. You die.")
    assert render(Change()) == ""
    assert render(Change(failed=True, seen=("tree",))) == "Nothing happens. You see a tree."
    assert render(Change(fell_asleep=True, damage="hunger")) == "You fall asleep. You suffer from hunger."
    # a creature killed is its achievement, not a hit
    assert render(Change(hit="cow", achievements=("eat_cow",))) == "You eat a cow."


def test_every_achievement_is_read_back_from_its_message():
    for name in ACHIEVEMENT_NAMES:
        message = render(Change(achievements=(name,), seen=("cow",)))
        assert message_achievements(message) == [name.replace("_", " ")]
    assert len(set(ACHIEVEMENT_SENTENCES.values())) == len(ACHIEVEMENT_NAMES)
    assert message_achievements("Nothing happens. You see a diamond.") == []
    assert message_achievements("") == []


def test_the_oracle_calls_a_message_helpful_when_it_reports_progress_towards_the_goal():
    oracle = CrafterOracle()
    wood, sapling = "You collect wood. You get 1 wood.", "You collect a sapling. You get 1 sapling."
    pickaxe = "You make a stone pickaxe. You get 1 stone pickaxe. You lose 1 wood. You lose 1 stone."
    unhelpful = ["", "Nothing happens.", "You see a diamond.", "You are hit by a zombie. You die.", "You feel hungry."]
    assert all(helpful(oracle, m) for m in (wood, sapling, pickaxe, "You wake up."))   # no goal: any achievement
    assert not any(helpful(oracle, m) for m in unhelpful)
    # a goal: the achievement and its prerequisites in the requirement tree, nothing else
    for goal in ("make_stone_pickaxe", "make stone pickaxe", "Make a stone pickaxe."):
        assert helpful(oracle, wood, goal) and helpful(oracle, pickaxe, goal)
        assert helpful(oracle, "You place a table. You lose 1 wood.", goal)
        assert not helpful(oracle, sapling, goal) and not helpful(oracle, "You drink water.", goal)
    assert oracle.goal_achievements("make progress in the game") == frozenset(oracle.goals)
    assert prefer(oracle, wood, "Nothing happens.") == "A" and prefer(oracle, "You see a cow.", pickaxe) == "B"
    assert prefer(oracle, sapling, wood, "make_stone_pickaxe") == "B" and prefer(oracle, sapling, "", "eat cow") == "="


def test_craftax_oracle_judges_with_craftax_costs():
    pytest.importorskip("craftax")
    from llmguide.envs.craftax.env import CraftaxOracle

    stone = "You collect stone. You get 1 stone."
    assert helpful(CraftaxOracle(), stone, "place furnace") and helpful(CraftaxOracle(), stone, "make iron sword")
    assert not helpful(CraftaxOracle(), "You collect coal. You get 1 coal.", "make stone sword")


# --- Crafter ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def crafter() -> CrafterText:
    return CrafterText(seed=0)


def test_crafter_reports_its_changes_as_a_message_line(crafter):
    _, info = crafter.reset(seed=1)
    assert info["message"] == ""
    player, world = crafter._core._player, crafter._core._world
    player.facing = (0, 1)
    target = tuple(int(v) for v in player.pos + np.array(player.facing))
    world[target] = "stone"
    assert crafter.step(DO)[4]["message"].startswith("Nothing happens.")   # no pickaxe
    world[target] = "tree"
    assert crafter.step(DO)[4]["message"].startswith("You collect wood. You get 1 wood.")
    messages = set()
    rng = np.random.default_rng(0)
    for _ in range(300):
        _, _, term, trunc, info = crafter.step(int(rng.integers(0, 17)))
        assert isinstance(info["message"], str)
        messages.add(info["message"])
        if term or trunc:
            crafter.reset()
    assert "" in messages and "Nothing happens." in messages and len(messages) > 5


# --- parity with Craftax-Classic ------------------------------------------------------------------------------
def _situation(cx, cr, block, inventory=(), vitals=(), sleeping=False, zombie=None, right=(), table=False):
    """Face down onto ``block``; no mobs but an optional zombie (health) on the faced cell; inventory and vitals
    as given (vitals 9, hidden counters 0 otherwise); ``right`` = blocks to the right of the player (1, 2, ...),
    or a table there (``table``)."""
    from test_envs_craftax import mirror, put_state, set_up

    cx.reset(seed=5)
    s, target = set_up(cx, block, dict(inventory), table_right=table)
    row, col = (int(v) for v in s.player_position)
    m = np.array(s.map)
    for j, b in enumerate(right, start=1):
        m[row, col + j] = b.value
    v = {"health": 9, "food": 9, "drink": 9, "energy": 9, **dict(vitals)}
    zombies = s.zombies
    mob_map = np.zeros_like(np.asarray(s.mob_map))
    if zombie is not None:
        pos, mask, health = (np.array(x) for x in (zombies.position, zombies.mask, zombies.health))
        pos[0], mask[0], health[0] = target, True, zombie
        zombies = zombies.replace(position=pos, mask=mask, health=health,
                                  attack_cooldown=np.zeros_like(np.asarray(zombies.attack_cooldown)))
        mob_map[target] = True
    s = s.replace(map=m, mob_map=mob_map, zombies=zombies, is_sleeping=sleeping, player_health=v["health"],
                  player_food=v["food"], player_drink=v["drink"], player_energy=v["energy"], player_hunger=0.0,
                  player_thirst=0.0, player_fatigue=0.0, player_recover=0.0)
    put_state(cx, s)
    mirror(cx, cr)
    player = cr._core._player
    player._hunger = player._thirst = player._fatigue = player._recover = 0
    if zombie is not None:
        obj = cr._core._world[(target[1], target[0])][1]
        obj.health, obj.cooldown = zombie, 0
        obj.random = type("Toward", (), {"uniform": staticmethod(lambda *a: 0.0)})()   # always steps towards
    return player


def _both(cx, cr, action: int) -> tuple[str, str]:
    from llmguide.envs import split_infos

    ref = cr.step(action)[4]["message"]
    info = split_infos(cx.step(np.array([action]))[4], 1)[0]
    return info["message"], ref


def _blocks():
    from craftax.craftax_classic.constants import BlockType

    return BlockType


SCENARIOS = [  # (expected message, block faced, inventory, vitals, sleeping, action)
    ("You collect wood. You get 1 wood.", "TREE", {}, {}, False, DO),
    ("You drink water. You no longer feel thirsty.", "WATER", {}, {"drink": 4}, False, DO),
    ("You place a table. You lose 1 wood. You see a table.", "GRASS", {"wood": 5}, {}, False, PLACE_TABLE),
    ("You place stone. You lose 1 stone.", "GRASS", {"stone": 1}, {}, False, PLACE_STONE),
    ("Nothing happens.", "STONE", {}, {}, False, DO),
    ("Nothing happens.", "GRASS", {}, {}, False, PLACE_TABLE),
    ("Nothing happens.", "GRASS", {}, {}, False, SLEEP),             # energy full
    ("You fall asleep.", "GRASS", {}, {"energy": 3}, False, SLEEP),
    ("You wake up.", "GRASS", {}, {"energy": 9}, True, NOOP),
    ("", "GRASS", {}, {}, False, NOOP),
    # *: what comes into view (a mob Craftax spawns this step in the new row is a rules difference, not a text one)
    ("You are burnt by lava. You feel hurt. * You die.", "LAVA", {}, {}, False, DOWN),
]


@pytest.mark.parametrize("expected,block,inventory,vitals,sleeping,action", SCENARIOS,
                         ids=[f"{s[1].lower()}-{s[5]}-{s[0][:20]}" for s in SCENARIOS])
def test_craftax_and_crafter_give_the_same_message(cx, cr, expected, block, inventory, vitals, sleeping, action):
    _situation(cx, cr, getattr(_blocks(), block), inventory, vitals, sleeping)
    got, ref = _both(cx, cr, action)
    if expected.startswith("You place a table"):   # Crafter and Craftax-Classic tables cost the same, whatever it is
        expected = re.sub(r"lose \d wood", f"lose {5 - cr._core._player.inventory['wood']} wood", expected)
    if "*" in expected:
        head, tail = expected.split(" * ")
        sights = re.compile(r" You see [^.]*\.")
        assert sights.sub("", got) == sights.sub("", ref) == f"{head} {tail}"
    else:
        assert got == ref == expected


def test_hunger_thirst_and_starvation_give_the_same_message(cx, cr):
    player = _situation(cx, cr, _blocks().GRASS, {}, {"food": 5})
    player._hunger = 25   # the next step eats one food
    from test_envs_craftax import one_state, put_state

    put_state(cx, one_state(cx).replace(player_hunger=25.0))
    assert _both(cx, cr, NOOP) == ("You feel hungry.", "You feel hungry.")
    player = _situation(cx, cr, _blocks().GRASS, {}, {"food": 0})
    player._recover = -15  # the next step costs one health
    put_state(cx, one_state(cx).replace(player_recover=-15.0))
    assert _both(cx, cr, NOOP) == ("You suffer from hunger.", "You suffer from hunger.")


def test_a_zombie_hit_and_its_attack_give_the_same_message(cx, cr):
    _situation(cx, cr, _blocks().GRASS, zombie=5)
    assert _both(cx, cr, DO) == ("You hit a zombie. You are hit by a zombie.",) * 2
    _situation(cx, cr, _blocks().GRASS, zombie=1)
    got, ref = _both(cx, cr, DO)
    # Crafter's zombie may still strike in the step it dies (a rules difference, not a text one)
    assert got == "You defeat a zombie." and ref.startswith("You defeat a zombie.")


def test_water_coming_close_and_a_new_kind_in_view_give_the_same_message(cx, cr):
    b = _blocks()
    _situation(cx, cr, b.GRASS, right=(b.GRASS, b.WATER, b.GRASS, b.GRASS, b.DIAMOND))   # diamond: 1 column away
    got, ref = _both(cx, cr, RIGHT)
    assert got == ref and "You are next to water." in got and "a diamond" in got


def test_crafting_gives_the_same_message(cx, cr):
    _situation(cx, cr, _blocks().GRASS, {"wood": 5}, table=True)
    got, ref = _both(cx, cr, MAKE_WOOD_PICKAXE)
    assert got == ref == "You make a wood pickaxe. You get 1 wood pickaxe. You lose 1 wood."


def test_craftax_renders_messages_only_for_envs_where_something_happened():
    pytest.importorskip("craftax")
    from llmguide.envs.craftax.env import CraftaxVectorEnv

    env = CraftaxVectorEnv(8, seed=0)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(40):
        infos = env.step(rng.integers(0, 17, 8))[4]
        assert len(infos["message"]) == 8 and all(isinstance(m, str) for m in infos["message"])
        seen.update(infos["message"])
    assert "" in seen and "Nothing happens." in seen
    assert len(env.text.messages) >= len(seen - {""})   # rendered once per distinct non-zero key
