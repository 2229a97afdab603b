"""Crafter text env: events from real state changes, captions, single tasks, score, oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmguide.envs import get_oracle, make_env
from llmguide.envs.crafter.env import CrafterText
from llmguide.envs.crafter.rules import (
    ACHIEVEMENTS,
    SEMANTIC_NAMES,
    achievement_summary,
    crafter_score,
    parse_caption,
)

NOOP, DO, PLACE_TABLE = 0, 5, 8


@pytest.fixture(scope="module")
def env() -> CrafterText:
    return CrafterText(seed=0)


def face(env: CrafterText, material: str) -> tuple[int, int]:
    """Make the player face down onto ``material`` with nothing standing there; return the cell."""
    player, world = env._core._player, env._core._world
    player.facing = (0, 1)
    target = tuple(int(v) for v in player.pos + np.array(player.facing))
    _, obj = world[target]
    if obj is not None:
        world.remove(obj)
    world[target] = material
    return target


def test_place_table_event_only_when_table_really_placed(env):
    env.reset(seed=1)
    player, world = env._core._player, env._core._world
    target = face(env, "grass")
    player.inventory["wood"] = 0
    _, _, _, _, info = env.step(PLACE_TABLE)
    assert "place table" not in info["events"]
    assert world[target][0] == "grass"

    target = face(env, "grass")
    player.inventory["wood"] = 3
    _, _, _, _, info = env.step(PLACE_TABLE)
    assert world[target][0] == "table"
    assert "place table" in info["events"]
    assert player.inventory["wood"] == 1
    assert info["achievements"]["place_table"] == 1
    _, _, _, _, info = env.step(NOOP)
    assert "place table" not in info["events"]


def test_do_on_stone_without_pickaxe_collects_nothing(env):
    env.reset(seed=2)
    player, world = env._core._player, env._core._world
    target = face(env, "stone")
    _, _, _, _, info = env.step(DO)
    assert "collect stone" not in info["events"]
    assert world[target][0] == "stone" and player.inventory["stone"] == 0
    assert "You face stone." in info["caption"]

    player.inventory["wood_pickaxe"] = 1
    _, _, _, _, info = env.step(DO)
    assert "collect stone" in info["events"]
    assert world[target][0] == "path" and player.inventory["stone"] == 1
    assert "1 stone" in info["caption"] and "1 wood pickaxe" in info["caption"]


def test_caption_and_symbolic_view_match_state(env):
    _, info = env.reset(seed=3)
    player = env._core._player
    face(env, "water")
    player.inventory["drink"] = 2
    player.inventory["sapling"] = 2
    obs, _, _, _, info = env.step(NOOP)
    caption = info["caption"]
    assert "You face water." in caption
    assert "2 sapling" in caption and "thirsty" in caption
    assert caption.startswith("You see ") and "water" in info["visible"]
    image = obs["image"]  # (C, H=7, W=9): player in the centre, water just below it
    assert image.shape == (len(SEMANTIC_NAMES), 7, 9)
    assert np.allclose(image.sum(axis=0), 1.0)
    assert image[SEMANTIC_NAMES.index("player"), 3, 4] == 1.0
    assert image[SEMANTIC_NAMES.index("water"), 4, 4] == 1.0
    parsed = parse_caption(caption)
    assert parsed["facing"] == "water" and parsed["inventory"]["sapling"] == 2


def test_symbolic_mode_never_renders(env, monkeypatch):
    env.reset(seed=4)

    def boom(*args, **kwargs):
        raise AssertionError("rendered in symbolic mode")

    monkeypatch.setattr(env._core, "render", boom)
    for _ in range(5):
        env.step(NOOP)


def test_pixels_observation():
    env = make_env({"name": "crafter", "obs": "pixels", "max_steps": 50}, seed=0)
    obs, _ = env.reset()
    assert obs["image"].shape == (3, 64, 64) and obs["image"].dtype == np.uint8
    assert obs["image"].std() > 0
    assert env.observation_space.contains(obs)


def test_single_task_pays_one_and_terminates():
    env = make_env({"name": "crafter", "task": "place_table", "max_steps": 100}, seed=0)
    _, info = env.reset()
    core = env.unwrapped
    assert info["mission"] == "place table"
    player = core._core._player
    face(core, "grass")
    player.inventory["wood"] = 0
    _, reward, terminated, _, info = env.step(PLACE_TABLE)
    assert (reward, terminated, info["success"]) == (0.0, False, False)
    face(core, "grass")
    player.inventory["wood"] = 2
    _, reward, terminated, truncated, info = env.step(PLACE_TABLE)
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert info["episode"]["r"] == 1.0


def test_unknown_task_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown Crafter task"):
        make_env({"name": "crafter", "task": "fly_to_moon"})


def test_crafter_score_known_values():
    assert crafter_score([100.0] * 22) == pytest.approx(100.0)
    assert crafter_score([0.0] * 22) == pytest.approx(0.0)
    assert crafter_score([0.0, 100.0]) == pytest.approx(math.sqrt(101) - 1)
    with pytest.raises(ValueError):
        crafter_score([120.0])
    eps = [{"collect_wood": 3, "place_table": 1}, {"collect_wood": 1}, {}, {"collect_wood": 2}]
    summary = achievement_summary(eps)
    assert summary["success_rates_percent"]["collect_wood"] == 75.0
    assert summary["success_rates_percent"]["place_table"] == 25.0
    assert summary["achievements_per_episode"] == pytest.approx(1.0)
    rates = [summary["success_rates_percent"][a] for a in ACHIEVEMENTS]
    assert summary["crafter_score_percent"] == pytest.approx(crafter_score(rates))
    assert len(ACHIEVEMENTS) == 22


def test_oracle_follows_state(env):
    oracle = get_oracle("crafter")
    assert len(oracle.goals) == 22 and "collect wood" in oracle.goals
    assert oracle.prerequisites["make wood pickaxe"] == ["collect wood", "place table"]
    assert oracle.prerequisites["collect stone"] == ["make wood pickaxe"]
    env.reset(seed=5)
    player = env._core._player
    face(env, "grass")
    player.inventory["wood"] = 0
    _, _, _, _, info = env.step(NOOP)
    assert oracle.grade("place table", info) == "ill-timed"
    assert "place table" not in oracle.suggest(info)
    assert oracle.grade("fly to the moon", info) == "impossible"
    player.inventory["wood"] = 2
    _, _, _, _, info = env.step(NOOP)
    assert oracle.grade("Place_Table", info) == "good"
    assert "place table" in oracle.suggest(info)
    assert "place table" in oracle.suggest_from_caption(info["caption"])
    assert "make wood pickaxe" not in oracle.suggest(info)  # no table in view yet
    face(env, "grass")
    env.step(PLACE_TABLE)  # uses both pieces of wood
    _, _, _, _, info = env.step(NOOP)
    assert "place table" not in oracle.suggest(info)  # achieved this episode
    assert oracle.grade("make wood pickaxe", info) == "ill-timed"  # table, but no wood left
    player.inventory["wood"] = 1
    _, _, _, _, info = env.step(NOOP)
    assert oracle.grade("make wood pickaxe", info) == "good"
    assert "make wood pickaxe" in oracle.suggest_from_caption(info["caption"])


@pytest.mark.parametrize("family", ["crafter", "craftax"])
def test_one_sparse_task_definition_on_crafter_and_craftax(family, tmp_path):
    """env.task=<achievement>: reward 1 on success and 0 otherwise (no health reward), the episode ends on success,
    capped at TASK_MAX_STEPS unless env.max_steps is set; the same on both envs (rules.Task)."""
    from llmguide.envs.crafter.rules import EPISODE_STEPS, TASK_MAX_STEPS, make_task
    from llmguide.pipelines import load_config

    if family == "craftax":
        pytest.importorskip("craftax")
    assert 1000 <= TASK_MAX_STEPS <= 2000
    assert make_task("make stone pickaxe", None)[0].max_steps == TASK_MAX_STEPS
    assert make_task(None, None) == (None, EPISODE_STEPS) and make_task("eat_cow", 300)[1] == 300
    cfg = load_config([f"env={family}", "env.task=make_stone_pickaxe", f"run.dir={tmp_path}"])
    env = make_env(cfg.env, seed=0)
    _, info = env.reset(seed=0)
    inner = env.unwrapped if family == "crafter" else env.unwrapped._vec
    assert inner.max_steps == TASK_MAX_STEPS and info["mission"] == "make stone pickaxe"
    assert inner.task_def.achievement == "make_stone_pickaxe"
    free = make_env(load_config([f"env={family}", f"run.dir={tmp_path}"]).env, seed=0)
    assert (free.unwrapped if family == "crafter" else free.unwrapped._vec).max_steps == EPISODE_STEPS

    starve, craft = _task_steps(env, family)
    _, reward, terminated, truncated, info = starve()
    assert "take damage" in info["events"] and (reward, terminated, info["success"]) == (0.0, False, False)
    _, reward, terminated, truncated, info = craft()
    assert "make stone pickaxe" in info["events"]
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)


def _task_steps(env, family):
    """(a step that costs health by starvation, a step that makes a stone pickaxe at a table) for ``env``."""
    make_stone_pickaxe = 12
    if family == "crafter":
        core = env.unwrapped
        player = core._core._player

        def starve():
            player.inventory["food"], player._recover = 0, -15
            return env.step(NOOP)

        def craft():
            player.inventory.update(wood=1, stone=1, food=9)
            face(core, "table")
            return env.step(make_stone_pickaxe)

        return starve, craft
    from craftax.craftax_classic.constants import BlockType

    from test_envs_craftax import one_state, put_state, set_up

    vec = env.unwrapped._vec

    def starve():
        set_up(vec, BlockType.GRASS, {})
        put_state(vec, one_state(vec).replace(player_food=0, player_recover=-15.0))
        return env.step(NOOP)

    def craft():
        set_up(vec, BlockType.CRAFTING_TABLE, {"wood": 1, "stone": 1})
        return env.step(make_stone_pickaxe)

    return starve, craft


def test_lenient_rules_and_their_old_key():
    """``env.lenient_rules`` (ELLM's rule changes) needs the text actions; the old ``env.ellm_rules=true`` turns
    the same rules on, with one deprecation line, and ``false`` (old runs' saved configs) changes nothing."""
    from llmguide.envs.crafter.actions import CrafterTextActions

    def rules(env_cfg):
        env = make_env(env_cfg, 0)
        while not isinstance(env, CrafterTextActions):
            env = env.env
        return env.lenient_rules

    text = {"name": "crafter", "actions": "text"}
    assert rules({**text, "lenient_rules": True}) and not rules(text)
    assert not rules({**text, "ellm_rules": False})
    with pytest.warns(DeprecationWarning, match="env.ellm_rules is deprecated.*env.lenient_rules"):
        assert rules({**text, "ellm_rules": True})
    with pytest.raises(ValueError, match="env.lenient_rules needs env.actions=text"):
        make_env({"name": "crafter", "lenient_rules": True}, 0)
    with pytest.raises(ValueError, match="env.lenient_rules needs"), pytest.warns(DeprecationWarning):
        make_env({"name": "crafter", "ellm_rules": True}, 0)
