"""NetHack / MiniHack text envs: message captions, events from messages and status, oracle."""

from __future__ import annotations

import numpy as np
import pytest

from llmguide.envs import get_oracle, make_env
from llmguide.envs.nethack.env import decode_message
from llmguide.envs.nethack.oracle import message_events
from llmguide.methods.oni.oracle import helpful


def test_caption_is_the_real_message_and_status_events():
    env = make_env({"name": "nethack", "id": "NetHackScore-v0", "blstats_deltas": True}, seed=0)
    _, info = env.reset()
    # NetHack's first message: the welcome, or the moon phase on full/new moon nights (it follows the date)
    assert "welcome to NetHack" in info["caption"] or "moon" in info["caption"]
    core = env.unwrapped
    rng = np.random.default_rng(0)
    prev_hp, saw_message = info["hp"], False
    for _ in range(600):
        obs, _, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        raw = core._env.last_observation[core._env._observation_keys.index("message")]
        assert info["message"] == decode_message(raw)
        assert info["caption"].startswith(info["message"])
        saw_message |= bool(info["message"])
        assert ("take damage" in info["events"]) == (info["hp"] < prev_hp)
        if info["hp"] != prev_hp:
            assert f"HP {prev_hp}->{info['hp']}." in info["caption"]
        prev_hp = info["hp"]
        assert env.observation_space.contains(obs)
        if terminated or truncated:
            _, info = env.reset()
            prev_hp = info["hp"]
    assert saw_message


@pytest.mark.parametrize("message,event", [
    ("You kill the newt!", "kill a monster"),
    ("The door opens.", "open a door"),
    ("f - a key named The Master Key of Thievery.", "pick up an item"),
    ("This orange is delicious!", "eat food"),
    ("Welcome to experience level 2.", "gain a level"),
    ("$ - 12 gold pieces.", "collect gold"),
    ("The newt bites!  You hear someone counting money.", "hear gold"),
    ("You are lucky!  Full moon tonight.  f - a yellow potion.", "pick up an item"),
    ("You start to float in the air!", "start levitating"),
    ("You finish your dressing maneuver.  You start to float in the air!", "start levitating"),
    ("You push the boulder into the water.  Now you can cross it!", "fill a pool"),
    ("The lava cools and solidifies.", "freeze a pool"),
    ("The water freezes.", "freeze a pool"),
    ("The door unlocks!", "open a door"),
    ("You succeed in unlocking the door.", "open a door"),
])
def test_message_patterns(message, event):
    assert message_events(message) == [event]
    assert message_events("It's a wall.") == []
    assert message_events("a - an uncursed +2 pair of leather gloves (being worn).") == []


@pytest.mark.parametrize("message", [
    # equipping an item already owned prints the same "x - item" line as a pick-up; it is not an item gained
    "a - a +1 club (weapon in hand).", "b - a +2 sling (alternate weapon; not wielded).",
    "c - 13 uncursed flint stones (wielded).", "c - an uncursed flint stone (in quiver pouch).",
    "f - a ring of levitation (on left hand).", "Moving: x - 28 uncursed rocks.",
    # levitation's side effect and a boulder lost in the water are not progress
    "You float in the opposite direction.", "There is a large splash as you push the boulder into the water.",
])
def test_equipping_and_non_progress_messages_are_no_event(message):
    assert message_events(message) == []


def test_the_key_step_of_a_levitation_task_is_reported_as_progress():
    """MiniHack-LavaCross-Levitate-Potion-Pickup: picking up the potion and quaffing it are the two steps;
    in random play (seeded) both messages show up and carry a progress event the oracle pays for."""
    env = make_env({"name": "minihack", "id": "MiniHack-LavaCross-Levitate-Potion-Pickup-Restricted-v0"}, seed=0)
    names = env.unwrapped.action_strings
    rng = np.random.default_rng(0)
    seen: set[str] = set()
    for ep in range(60):  # random play until both steps have been seen (about 1 in 15 random episodes)
        env.reset(seed=ep)
        done = False
        while not done:
            _, _, term, trunc, info = env.step(int(rng.integers(len(names))))
            seen.update(info["events"])
            done = term or trunc
        if {"pick up an item", "start levitating"} <= seen:
            break
    assert {"pick up an item", "start levitating"} <= seen
    oracle = get_oracle("minihack")
    assert helpful(oracle, "You start to float in the air!") and helpful(oracle, "f - an orange potion.")
    assert not helpful(oracle, "c - an uncursed flint stone (in quiver pouch).")


def test_minihack_room_success_staircase_and_oracle():
    env = make_env({"name": "minihack", "id": "MiniHack-Room-5x5-v0", "oracle_facts": True}, seed=1)
    obs, info = env.reset()
    oracle = get_oracle("minihack")
    core = env.unwrapped
    assert "staircase down" in info["visible"]
    assert info["events"] == []  # nothing has happened yet, though the goal stairs are in view
    assert oracle.grade("descend the stairs", info) == "good"
    assert "find the staircase" not in oracle.suggest(info)
    assert oracle.grade("cast a fireball", info) == "impossible"
    rng = np.random.default_rng(1)
    successes = 0
    for _ in range(1500):
        _, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        assert info["success"] == (terminated and info["end_status"] == 2)
        if info["success"]:
            assert reward > 0
            successes += 1
        if terminated or truncated:
            env.reset()
    assert successes > 0
    assert core.action_strings[:4] == ["n", "e", "s", "w"]


def test_nethack_oracle_without_stairs_in_view():
    env = make_env({"name": "nethack", "id": "NetHackScore-v0", "oracle_facts": True}, seed=0)
    _, info = env.reset()
    oracle = get_oracle("nethack")
    assert "staircase down" not in info["visible"]
    assert oracle.grade("descend the stairs", info) == "ill-timed"
    assert oracle.prerequisites["descend the stairs"] == ["find the staircase"]
    assert "find the staircase" in oracle.suggest(info)
    assert "descend the stairs" in oracle.suggest_from_caption("There is a staircase down here.")


def test_unknown_id_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown minihack id"):
        make_env({"name": "minihack", "id": "MiniHack-Nope-v0"})


def test_oracle_falls_back_to_caption_without_map_facts():
    env = make_env({"name": "minihack", "id": "MiniHack-Room-5x5-v0"}, seed=1)
    _, info = env.reset()
    oracle = get_oracle("minihack")
    assert "visible" not in info
    assert oracle.suggest(info) == oracle.suggest_from_caption(info["caption"])
    info = dict(info, caption="There is a staircase down here.")
    assert oracle.grade("descend the stairs", info) == "good"
