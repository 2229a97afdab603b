"""env=craftax: Crafter's text contract on Craftax-Classic, optimistic resets, no retrace, learners.

Parity with env=crafter: the Craftax world (map, mobs, player, inventory) is mirrored into a
CrafterText env, so both describe the *same* situation; captions/visible/facing must then be
identical, and the same action in the same set-up must give the same events.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

pytest.importorskip("craftax")

from craftax.craftax_classic.constants import BlockType  # noqa: E402
from crafter import objects  # noqa: E402

from llmguide.envs import get_oracle, make_env, make_vector_env, split_infos  # noqa: E402
from llmguide.envs.craftax import text as tx  # noqa: E402
from llmguide.envs.craftax.env import TRACES, CraftaxVectorEnv, _canon  # noqa: E402
from llmguide.envs.crafter.env import CrafterText  # noqa: E402
from llmguide.envs.crafter.rules import ACHIEVEMENTS, GOALS, ITEMS, VITALS, parse_caption  # noqa: E402

NOOP, DOWN, DO, PLACE_STONE, PLACE_TABLE, PLACE_PLANT, MAKE_WOOD_PICKAXE = 0, 4, 5, 7, 8, 10, 11
CRAFTER_FACING = {1: (-1, 0), 2: (1, 0), 3: (0, -1), 4: (0, 1)}  # Craftax direction -> Crafter (dx, dy)


def one_state(env: CraftaxVectorEnv):
    return jax.device_get(jax.tree_util.tree_map(lambda x: x[0], env._carry["states"]))


def put_state(env: CraftaxVectorEnv, state) -> None:
    """Env 0 takes ``state``; the carry's view of what is in sight (the message line's "before") follows."""
    states = _canon(jax.tree_util.tree_map(lambda x, v: x.at[0].set(v), env._carry["states"], state))
    seen = jax.vmap(lambda s: tx.seen_bits(tx.caption_key(s, tx.local_ids(s))))(states)
    env._carry = {**env._carry, "states": states, "seen": seen}


def mirror(env: CraftaxVectorEnv, crafter_env: CrafterText) -> dict:
    """Copy the Craftax world into ``crafter_env``; return Crafter's info for that state."""
    s = one_state(env)
    core = crafter_env._core
    world, player = core._world, core._player
    for obj in world.objects:
        if obj is not player:
            world.remove(obj)
    lookup = np.zeros(max(b.value for b in BlockType) + 1, np.uint8)
    for block, name in tx._BLOCK_NAMES.items():
        name = "grass" if name == "plant" else name  # Crafter's plants are objects on grass
        if name is not None:
            world[(0, 0)] = name  # registers the material id
            lookup[block.value] = world._mat_ids[name]
    world._mat_map[:] = lookup[np.asarray(s.map)].T  # Crafter indexes [x, y] = Craftax [col, row]
    row, col = (int(v) for v in s.player_position)
    if tuple(int(v) for v in player.pos) != (col, row):
        world.move(player, (col, row))
    player.facing = CRAFTER_FACING[int(s.player_direction)]
    player.sleeping = bool(s.is_sleeping)
    inv = np.asarray(tx.inventory_vector(s))
    for j, k in enumerate(ITEMS):
        player.inventory[k] = int(inv[j])

    def add(cls, r, c, *args):
        if world._obj_map[c, r] == 0 and (r, c) != (row, col):
            world.add(cls(world, (c, r), *args))

    for field, cls, args in (("arrows", objects.Arrow, ((0, 1),)), ("skeletons", objects.Skeleton, (player,)),
                             ("cows", objects.Cow, ()), ("zombies", objects.Zombie, (player,))):
        mobs = getattr(s, field)
        for j in range(len(mobs.mask)):
            if mobs.mask[j]:
                add(cls, int(mobs.position[j][0]), int(mobs.position[j][1]), *args)
    for r, c in zip(*np.nonzero(np.isin(np.asarray(s.map), [BlockType.PLANT.value, BlockType.RIPE_PLANT.value])),
                    strict=True):
        add(objects.Plant, int(r), int(c))
    crafter_env._prev_ach = dict(player.achievements)
    crafter_env._prev_health = player.health
    crafter_env._ids = crafter_env._local_ids()
    return crafter_env._info(events=[])


def test_captions_match_crafter_on_the_same_world(cx, cr):
    """Along a random rollout, Crafter describes the mirrored world exactly as env=craftax does."""
    rng = np.random.default_rng(0)
    _, infos = cx.reset(seed=3)
    compared = set()
    for _ in range(150):
        info = split_infos(infos, 1)[0]
        ref = mirror(cx, cr)
        assert info["caption"] == ref["caption"]
        assert info["visible"] == ref["visible"] and info["facing"] == ref["facing"]
        assert info["inventory"] == ref["inventory"] and info["sleeping"] == ref["sleeping"]
        compared.add(info["caption"])
        _, _, term, trunc, infos = cx.step(rng.integers(0, 17, 1))
        if term[0] or trunc[0]:
            break
    assert len(compared) > 10


def set_up(env: CraftaxVectorEnv, block: BlockType, inventory: dict[str, int], table_right: bool = False):
    """Face down onto ``block``; no mobs; full vitals; the given inventory (everything else 0)."""
    s = one_state(env)
    row, col = (int(v) for v in s.player_position)
    m = np.array(s.map)
    m[row + 1, col] = block.value
    m[row, col + 1] = BlockType.CRAFTING_TABLE.value if table_right else BlockType.GRASS.value
    m[row, col] = BlockType.GRASS.value
    inv = s.inventory.replace(**{k: inventory.get(k, 0) for k in tx.NON_VITALS})
    off = {f: getattr(s, f).replace(mask=np.zeros_like(getattr(s, f).mask)) for f in ("zombies", "cows",
                                                                                      "skeletons", "arrows")}
    s = s.replace(map=m, inventory=inv, player_direction=4, is_sleeping=False, player_health=9, player_food=9,
                  player_drink=inventory.get("drink", 9), player_energy=9, **off)
    put_state(env, s)
    return s, (row + 1, col)


SCENARIOS = [
    ("collect wood", BlockType.TREE, {}, DO, False),
    ("collect drink", BlockType.WATER, {"drink": 5}, DO, False),
    ("place table", BlockType.GRASS, {"wood": 5}, PLACE_TABLE, False),
    ("make wood pickaxe", BlockType.GRASS, {"wood": 5}, MAKE_WOOD_PICKAXE, True),
    ("collect stone", BlockType.STONE, {"wood_pickaxe": 1}, DO, False),
    ("place stone", BlockType.GRASS, {"stone": 1}, PLACE_STONE, False),
    ("place plant", BlockType.GRASS, {"sapling": 1}, PLACE_PLANT, False),
    (None, BlockType.STONE, {}, DO, False),  # no pickaxe: nothing happens
    (None, BlockType.GRASS, {"wood": 0}, PLACE_TABLE, False),  # no wood: nothing happens
]


@pytest.mark.parametrize("expected,block,inventory,action,table", SCENARIOS)
def test_events_match_crafter_in_the_same_situation(cx, cr, expected, block, inventory, action, table):
    cx.reset(seed=5)
    set_up(cx, block, inventory, table_right=table)
    mirror(cx, cr)
    _, _, _, _, ref = cr.step(action)
    _, _, _, _, infos = cx.step(np.array([action]))
    info = split_infos(infos, 1)[0]
    assert info["events"] == ref["events"]
    assert info["events"] == ([expected] if expected else [])
    assert info["inventory"] == ref["inventory"]
    assert info["caption"] == ref["caption"]


@pytest.mark.parametrize("mob,field,crafter_cls", [("eat cow", "cows", objects.Cow),
                                                    ("defeat zombie", "zombies", objects.Zombie)])
def test_killing_a_mob_is_an_event_in_both(cx, cr, mob, field, crafter_cls):
    cx.reset(seed=6)
    s, target = set_up(cx, BlockType.GRASS, {})
    mobs = getattr(s, field)
    mobs = mobs.replace(position=np.asarray(mobs.position).copy(), mask=np.asarray(mobs.mask).copy(),
                        health=np.asarray(mobs.health).copy())
    mobs.position[0], mobs.mask[0], mobs.health[0] = target, True, 1
    put_state(cx, s.replace(**{field: mobs}))
    mirror(cx, cr)
    obj = cr._core._world[(target[1], target[0])][1]
    assert isinstance(obj, crafter_cls)
    obj.health = 1
    _, _, _, _, ref = cr.step(DO)
    _, _, _, _, infos = cx.step(np.array([DO]))
    # Crafter's zombie may still strike in the step it dies (a rules difference, not a text one)
    assert split_infos(infos, 1)[0]["events"] == [mob]
    assert [e for e in ref["events"] if e != "take damage"] == [mob]


def test_lava_kills_in_both(cx, cr):
    cx.reset(seed=7)
    set_up(cx, BlockType.LAVA, {})
    mirror(cx, cr)
    _, _, cr_term, _, ref = cr.step(DOWN)
    _, _, term, trunc, infos = cx.step(np.array([DOWN]))
    info = split_infos(infos, 1)[0]  # the finished step's info (final_info)
    assert info["events"] == ref["events"] == ["take damage", "die"]
    assert bool(term[0]) and cr_term and not trunc[0]


def test_repeated_collection_repeats_the_event_and_counts(cx):
    """Craftax's achievements are booleans; events and counts follow the state like Crafter's counters."""
    cx.reset(seed=8)
    counts = []
    for _ in range(2):
        set_up(cx, BlockType.TREE, {"wood": counts[-1] if counts else 0})
        _, _, _, _, infos = cx.step(np.array([DO]))
        info = split_infos(infos, 1)[0]
        assert info["events"] == ["collect wood"]
        counts.append(info["inventory"]["wood"])
    assert counts == [1, 2] and info["achievements"]["collect_wood"] == 2
    _, _, _, _, infos = cx.step(np.array([NOOP]))
    assert split_infos(infos, 1)[0]["events"] == []


def test_observation_layout_matches_crafter_symbolic(cx, cr):
    obs, _ = cx.reset(seed=9)
    ref_obs, _ = cr.reset(seed=9)
    assert cx.single_observation_space == cr.observation_space
    set_up(cx, BlockType.WATER, {"sapling": 3, "drink": 2})
    mirror(cx, cr)
    obs, _, _, _, _ = cx.step(np.array([NOOP]))
    ref_obs, _, _, _, _ = cr.step(NOOP)
    image, vector = obs["image"][0], obs["vector"][0]
    assert image.shape == (19, 7, 9) and np.allclose(image.sum(axis=0), 1.0)
    assert np.array_equal(image[:, 3:5, 3:6], ref_obs["image"][:, 3:5, 3:6])  # player and the water below
    assert vector[ITEMS.index("sapling")] == pytest.approx(3 / 9)
    assert np.array_equal(vector[16:20], ref_obs["vector"][16:20])  # facing down


def test_optimistic_reset_gives_fresh_worlds_and_sane_lengths():
    env = make_vector_env({"name": "craftax", "max_steps": 25, "reset_ratio": 2}, 4, seed=1)
    assert isinstance(env, CraftaxVectorEnv) and env.num_envs == 4
    rng = np.random.default_rng(1)
    obs, _ = env.reset(seed=1)
    lengths, steps, finished = [], np.zeros(4, int), 0
    for _ in range(60):
        obs, reward, term, trunc, infos = env.step(rng.integers(0, 17, 4))
        steps += 1
        done = term | trunc
        if done.any():
            per_env = split_infos(infos, 4)
            for i in np.flatnonzero(done):
                lengths.append(steps[i])
                finished += 1
                assert per_env[i]["achievements"] == {k: int(infos["final_info"]["achievements"][k][i])
                                                      for k in ACHIEVEMENTS}
                assert all(int(infos["achievements"][k][i]) == 0 for k in ACHIEVEMENTS)
                assert infos["final_obs"][i]["image"].shape == (19, 7, 9)
                assert np.allclose(obs["vector"][i][:4], 1.0)  # fresh world: full vitals
            timestep = np.asarray(env._carry["states"].timestep)
            assert (timestep[done] == 0).all()
            steps[done] = 0
    assert finished >= 8 and all(1 <= n <= 25 for n in lengths)
    assert any(n == 25 for n in lengths)


def test_no_retrace_on_second_call_or_new_env_of_same_size():
    env = CraftaxVectorEnv(4, seed=2)
    env.reset(seed=2)
    env.step(np.zeros(4, int))
    before = dict(TRACES)
    for _ in range(3):
        env.step(np.full(4, DO))
    env.reset(seed=3)
    env.step(np.zeros(4, int))
    other = CraftaxVectorEnv(4, seed=4, task="collect_wood", max_steps=50)
    other.reset()
    other.step(np.zeros(4, int))
    assert TRACES == before


def test_caption_strings_are_built_once_per_key(cx):
    cx.reset(seed=10)
    built = []
    original = tx.decode_key

    def counting(key):
        built.append(1)
        return original(key)

    tx.decode_key, cx.text.captions = counting, {}
    try:
        rng = np.random.default_rng(3)
        for _ in range(40):
            _, _, _, _, infos = cx.step(rng.integers(1, 5, 1))
    finally:
        tx.decode_key = original
    assert len(built) == len(cx.text.captions) <= 40


def test_single_env_task_and_oracle():
    env = make_env({"name": "craftax", "task": "collect_wood", "max_steps": 40}, seed=0)
    obs, info = env.reset()
    assert info["mission"] == "collect wood" and obs["image"].shape == (19, 7, 9)
    core = env.unwrapped._vec
    set_up(core, BlockType.TREE, {})
    _, reward, terminated, truncated, info = env.step(DO)
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert info["episode"]["r"] == 1.0
    oracle = get_oracle("craftax")
    assert oracle.goals == GOALS and oracle.family == "craftax"
    assert "place furnace" in oracle.feasible({"inventory": {"stone": 1}, "visible": [], "facing": "grass"})
    assert "collect stone" in oracle.prerequisites["make iron pickaxe"]
    parsed = parse_caption(info["caption"])
    assert set(parsed["inventory"]) == set(ITEMS) and all(parsed["inventory"][v] >= 4 for v in VITALS)


def test_ppo_runs_on_the_batched_env():
    from llmguide.learners.ppo import PPO

    envs = make_vector_env({"name": "craftax"}, 4, seed=0)
    agent = PPO(envs, {"num_steps": 8, "num_minibatches": 2, "update_epochs": 1}, seed=0)
    agent.learn(64, progress=False)
    assert agent.global_step == 64 and np.isfinite(agent.last_metrics["losses/value_loss"])


# --- ELLM's text actions (env.actions=text) -------------------------------------------------------
TEXT_SCENARIOS = [  # (action string, faced block, inventory, crafting table to the right)
    ("chop tree", BlockType.TREE, {}, False),
    ("chop tree", BlockType.STONE, {}, False),         # wrong noun: nothing runs
    ("mine stone", BlockType.STONE, {}, False),        # faced, no pickaxe: attempted, no effect
    ("mine stone", BlockType.STONE, {"wood_pickaxe": 1}, False),
    ("drink water", BlockType.WATER, {"drink": 5}, False),
    ("place crafting table", BlockType.GRASS, {"wood": 5}, False),
    ("make wood pickaxe", BlockType.GRASS, {"wood": 5}, True),
    ("make wood pickaxe", BlockType.GRASS, {}, True),  # no wood: nothing made
    ("place stone", BlockType.GRASS, {"stone": 2}, False),
    ("eat plant", BlockType.GRASS, {}, False),
    ("attack cow", BlockType.GRASS, {}, False),
    ("move up", BlockType.GRASS, {}, False),
    ("move down", BlockType.STONE, {}, False),         # blocked: no move
    ("do nothing", BlockType.GRASS, {}, False),
]


@pytest.fixture(scope="module")
def cx_text() -> CraftaxVectorEnv:
    env = CraftaxVectorEnv(1, seed=0, reset_ratio=1, actions="text")
    env.reset(seed=0)
    return env


@pytest.mark.parametrize("text,block,inventory,table", TEXT_SCENARIOS)
def test_text_actions_flags_match_crafter(cx_text, cr, text, block, inventory, table):
    """The same action string in the same situation: same primitive effect, action_success, eval_success."""
    from llmguide.envs.crafter.actions import ACTION_STRINGS, CrafterTextActions

    cx_text.reset(seed=9)
    s, _ = set_up(cx_text, block, inventory, table_right=table)
    key = np.asarray(tx.caption_key(s, tx.local_ids(s)))
    cx_text._facing = np.array([(int(key[2]) >> 4) & 31])  # the state was replaced under the env
    mirror(cx_text, cr)
    ref_env = CrafterTextActions(cr)
    _, _, _, _, ref = ref_env.step(ACTION_STRINGS.index(text))
    _, _, _, _, infos = cx_text.step(np.array([ACTION_STRINGS.index(text)]))
    info = split_infos(infos, 1)[0]
    assert info["action_text"] == ref["action_text"] == text
    assert (info["action_success"], info["eval_success"]) == (ref["action_success"], ref["eval_success"])
    assert info["events"] == ref["events"]


def test_text_actions_run_through_the_runner_with_ellm_oracle(tmp_path):
    """ELLM-oracle on env=craftax with text actions pays goals through the one Runner."""
    from llmguide.cli import main

    run = tmp_path / "ellm_craftax"
    code = main(["train", "env=craftax", "env.actions=text", "method=ellm_oracle", "method.extrinsic_coef=0.0",
                 "num_envs=4", "env.max_steps=100", "total_steps=512", "agent.num_steps=32", "eval.episodes=0",
                 "progress=false", f"run.dir={tmp_path}", "run.name=ellm_craftax"])
    assert code == 0
    from llmguide.core.rundir import read_metrics

    paid = [r["ellm/goals_paid"] for r in read_metrics(run) if "ellm/goals_paid" in r]
    assert paid and paid[-1] > 0


@pytest.mark.slow
@pytest.mark.parametrize("method", ["none", "rnd", "noveld", "icm", "apt", "ellm_novelty", "ellm_oracle"])
def test_every_crafter_method_runs_on_craftax(tmp_path, method):
    from llmguide.cli import main
    from llmguide.core.rundir import read_metrics

    actions = ["env.actions=text"] if method == "ellm_novelty" else []
    code = main(["train", "env=craftax", f"method={method}", *actions, "num_envs=4", "env.max_steps=20",
                 "total_steps=128", "agent.num_steps=32", "eval.episodes=0", "progress=false",
                 f"run.dir={tmp_path}", "run.name=m"])
    assert code == 0
    assert any("charts/episodic_return" in r for r in read_metrics(tmp_path / "m"))  # episodes of <= 20 steps
