"""The scripted Crafter / Craftax-Classic expert: requirement-tree planner, path finding on the seen map,
dead reckoning, play on a fixed seed, data mode's exclusions, the vector-env API."""

from __future__ import annotations

import numpy as np
import pytest

from llmguide.envs.crafter.expert.agent import ExpertPolicy
from llmguide.envs.crafter.expert.nav import ORIGIN, SEM, LocalMap
from llmguide.envs.crafter.expert.plan import ACTIONS, RequirementTree
from llmguide.envs.crafter.rules import CrafterOracle
from llmguide.envs.vector import make_vector_env


class Ctx:
    """A planner context: an inventory, known stations, excluded goals."""

    def __init__(self, stations=(), excluded=(), growing=False, **inventory):
        self.inventory = inventory
        self.stations = set(stations)
        self.excluded = set(excluded)
        self.growing = growing

    def station_usable(self, name):
        return name in self.stations

    def plant_growing(self):
        return self.growing


@pytest.fixture(scope="module")
def tree():
    return RequirementTree(CrafterOracle())


def test_planner_walks_the_requirement_tree(tree):
    step = tree.resolve("make wood pickaxe", Ctx())
    assert (step.kind, step.goal, step.targets) == ("do", "collect wood", ("tree",))
    table_wood = CrafterOracle.requirements["place table"][0]["wood"]
    # enough wood for the table and the pickaxe: place the table first, then make
    step = tree.resolve("make wood pickaxe", Ctx(wood=table_wood + 1))
    assert (step.kind, step.action) == ("place", ACTIONS.index("place_table"))
    step = tree.resolve("make wood pickaxe", Ctx(stations=["table"], wood=1))
    assert (step.kind, step.action, step.stations) == ("make", ACTIONS.index("make_wood_pickaxe"), ("table",))
    # iron: the whole chain, wood first (the only resource collectable without a tool)
    assert tree.resolve("collect iron", Ctx()).goal == "collect wood"
    assert tree.resolve("collect iron", Ctx(stations=["table"], wood=9)).goal == "make wood pickaxe"
    assert tree.resolve("collect iron", Ctx(stations=["table"], wood=9, wood_pickaxe=1)).goal == "collect stone"
    step = tree.resolve("collect iron", Ctx(wood_pickaxe=1, stone_pickaxe=1))
    assert (step.kind, step.goal, step.targets, step.depth) == ("do", "collect iron", ("iron",), 0)
    # resources of the whole subtree are counted: stone pickaxe from nothing = its wood + table + wooden pickaxe
    need = tree.total_need("make stone pickaxe", Ctx())
    assert need["wood"] == 1 + table_wood + 1 and need["stone"] == 1
    assert tree.resolve("wake up", Ctx()).kind == "sleep"
    assert tree.resolve("collect sapling", Ctx()).kind == "do_walkable"


def test_planner_respects_exclusions_and_waits_for_plants(tree):
    assert tree.resolve("make wood pickaxe", Ctx(excluded=["place table"], wood=5)) is None
    # a usable table makes placing one unnecessary
    assert tree.resolve("make wood pickaxe", Ctx(stations=["table"], excluded=["place table"], wood=1)).kind == "make"
    assert tree.resolve("collect stone", Ctx(excluded=["make wood pickaxe"], wood=9, stations=["table"])) is None
    assert tree.resolve("eat plant", Ctx(growing=True)) is None
    assert tree.resolve("eat plant", Ctx()).goal == "collect sapling"
    assert tree.resolve("eat plant", Ctx(stations=["plant"])).targets == ("plant",)


def test_requirements_come_from_the_family_oracle(tree):
    from llmguide.envs.craftax.env import CraftaxOracle

    crafter_cost = CrafterOracle.requirements["place furnace"][0]["stone"]
    craftax_cost = CraftaxOracle.requirements["place furnace"][0]["stone"]
    assert craftax_cost < crafter_cost
    ctx = Ctx(stone=craftax_cost, wood_pickaxe=1)
    assert RequirementTree(CraftaxOracle()).resolve("place furnace", ctx).kind == "place"
    assert tree.resolve("place furnace", ctx).goal == "collect stone"


def test_frontier_is_the_next_layer(tree):
    first = set(tree.frontier(set(), set()))
    assert {"collect wood", "collect drink", "collect sapling", "eat cow", "wake up"} <= first
    assert "make wood pickaxe" not in first and "place table" not in first
    later = set(tree.frontier({"collect wood", "place table"}, {"make wood sword"}))
    assert "make wood pickaxe" in later and "make wood sword" not in later and "collect stone" not in later


def _known_map(rows: list[str]) -> LocalMap:
    """A LocalMap whose cells around the start are ``rows`` (``#`` stone, ``~`` water, ``.`` grass, ``T`` tree,
    ``@`` the agent), everything else outside the world."""
    chars = {"#": "stone", "~": "water", ".": "grass", "T": "tree", "@": "grass", "L": "lava"}
    m = LocalMap(radius=12)
    m.mat[:] = 0
    for y, row in enumerate(rows):
        for x, ch in enumerate(row):
            m.mat[ORIGIN + x, ORIGIN + y] = SEM[chars[ch]]
            if ch == "@":
                m.pos = np.array([ORIGIN + x, ORIGIN + y])
    return m


def _walk(m: LocalMap, target: str, dig: bool = False, limit: int = 50) -> int:
    """Follow the plan's first steps to a cell next to the nearest ``target``; steps taken."""
    for n in range(limit):
        plan = m.plan(dig_stone=dig, dig_tree=False)
        found = plan.reach(plan.window(m.mat) == SEM[target])
        assert found is not None
        _, goal, first = found
        if (first == goal).all():
            assert np.abs(goal - m.pos).sum() == 1
            return n
        assert m.mat[tuple(first)] in (SEM["grass"], SEM["stone"] if dig else -99)
        m.mat[tuple(first)] = SEM["grass"]  # dug (stone) or walked
        m.pos = first
    raise AssertionError("never arrived")


def test_path_finding_on_a_known_map():
    rows = ["#########",
            "#@..#..T#",
            "#.#.#.#.#",
            "#.#...#.#",
            "#########"]
    # around the walls: right 2, down 2, right 2, up 2, right 1 -> next to the tree after 9 moves
    assert _walk(_known_map(rows), "tree") == 9
    lava = ["#####",
            "#@LT#",
            "#...#",
            "#####"]
    assert _walk(_known_map(lava), "tree") == 3  # down, right, right: never onto the lava
    # digging through stone (cost 3: do + walk) is a shortcut only when allowed
    dig = ["########",
           "#@.#.T.#",
           "#..#...#",
           "#..#...#",
           "#......#",
           "########"]
    assert _walk(_known_map(dig), "tree") == 9
    assert _walk(_known_map(dig), "tree", dig=True) == 3
    assert _known_map(dig).plan(dig_stone=False, dig_tree=False).reach(np.zeros((25, 25), bool)) is None


def test_dead_reckoning_tracks_the_true_position():
    from llmguide.envs.crafter.env import CrafterText

    env = CrafterText(seed=3)
    obs, info = env.reset(seed=3)
    policy = ExpertPolicy({"name": "crafter"}, seed=3)
    start = np.array(env._core._player.pos)
    for _ in range(400):
        action = policy.act(obs, {"achievements": info["achievements"]})
        obs, _, term, trunc, info = env.step(action)
        if term or trunc:
            break
    policy.act(obs, {"achievements": info["achievements"]})
    moved = np.array(env._core._player.pos) - start
    assert (policy.agents[0].map.pos - ORIGIN == moved).all()
    assert np.abs(moved).sum() > 5  # it did go somewhere


def _play(env_id: str, seed: int, steps: int, **kw):
    cfg = {"name": env_id, "max_steps": 10000}
    envs = make_vector_env(cfg, 1, seed, "sync")
    policy = ExpertPolicy(cfg, seed=seed, **kw)
    obs, infos = envs.reset(seed=seed)
    first, goals, steps_seen = {}, [], []
    for t in range(steps):
        actions = policy.act(obs, infos)
        assert actions.shape == (1,) and actions.dtype == np.int64
        agent = policy.agents[0]
        goals.append(agent.goal)
        if agent.goal is not None:
            step = agent.tree.resolve(agent.goal, agent)
            steps_seen.append(step.goal if step else None)
        obs, _, term, trunc, infos = envs.step(actions)
        for name, count in infos["achievements"].items():
            if not name.startswith("_") and count[0] > 0:
                first.setdefault(name, t)
        if term[0] or trunc[0]:
            break
    envs.close()
    return first, goals, steps_seen


def test_expert_unlocks_the_wooden_tools_on_a_fixed_seed():
    first, _, _ = _play("crafter", 0, 300)
    for name in ("collect_wood", "place_table", "make_wood_pickaxe", "make_wood_sword", "collect_stone"):
        assert name in first and first[name] < 300, (name, first)
    assert first["collect_wood"] < first["place_table"] < first["make_wood_pickaxe"] < first["collect_stone"]


def test_data_mode_never_pursues_an_excluded_achievement():
    excluded = ["make_wood_pickaxe", "collect_sapling"]
    first, goals, sub = _play("crafter", 1, 600, mode="data", exclude=excluded)
    assert "make wood pickaxe" not in goals and "collect sapling" not in goals
    assert "make wood pickaxe" not in sub and "collect sapling" not in sub
    assert "make_wood_pickaxe" not in first and "collect_sapling" not in first
    assert "collect_wood" in first and "place_table" in first  # it still plays
    assert len({g for g in goals if g}) >= 4  # several different subgoals were sampled


def test_random_actions_keep_an_excluded_goals_action_wherever_it_cannot_complete_it():
    """PTGM clones the data: a craft action missing from them could never be pressed by the frozen low level."""
    cfg = {"name": "crafter"}
    envs = make_vector_env(cfg, 1, 0, "sync")
    policy = ExpertPolicy(cfg, seed=0, mode="data", exclude=["make_stone_pickaxe", "place_table"])
    obs, infos = envs.reset(seed=0)
    policy.act(obs, infos)
    envs.close()
    agent = policy.agents[0]
    stone_pickaxe, table = ACTIONS.index("make_stone_pickaxe"), ACTIONS.index("place_table")
    x, y = (int(v) for v in agent.map.pos)
    agent.map.mat[x - 4:x + 5, y - 4:y + 5] = SEM["grass"]
    agent.inventory.update(wood=0, stone=0)

    def pressed() -> set[int]:
        return {agent.random_action() for _ in range(400)}

    assert {stone_pickaxe, table} <= pressed()          # no materials: pressing them does nothing
    agent.inventory.update(wood=3, stone=2)
    assert stone_pickaxe in pressed() and table not in pressed()   # materials but no table near; placing would work
    agent.map.mat[x + 2, y] = SEM["table"]
    assert stone_pickaxe not in pressed()               # a table two cells away: it might complete the goal
    agent.inventory.update(stone=0)
    assert stone_pickaxe in pressed()


def test_policy_api_checks_its_arguments_and_resets_finished_envs():
    with pytest.raises(ValueError, match="unknown goals"):
        ExpertPolicy({"name": "crafter"}, exclude=["collect unicorn"])
    with pytest.raises(ValueError, match="mode"):
        ExpertPolicy({"name": "crafter"}, mode="greedy")
    with pytest.raises(ValueError, match="primitive"):
        ExpertPolicy({"name": "crafter", "actions": "text"})
    with pytest.raises(ValueError, match="symbolic"):
        ExpertPolicy({"name": "crafter", "obs": "pixels"})
    with pytest.raises(ValueError, match="crafter or env=craftax"):
        ExpertPolicy({"name": "babyai"})
    cfg = {"name": "crafter"}
    envs = make_vector_env(cfg, 2, 0, "sync")
    obs, infos = envs.reset(seed=0)
    policy = ExpertPolicy(cfg, seed=0)
    for _ in range(5):
        obs, _, _, _, infos = envs.step(policy.act(obs, infos))
    old = policy.agents[1]
    policy.act(obs, {**infos, "_final_info": np.array([False, True])})
    assert policy.agents[0].t == 6 and policy.agents[1] is not old and policy.agents[1].t == 1
    single = policy.act({k: v[0] for k, v in obs.items()})
    assert isinstance(single, int) and 0 <= single < len(ACTIONS)
    envs.close()


def test_craftax_expert_plays_from_the_same_observation():
    from llmguide.envs.craftax.env import CraftaxVectorEnv

    envs = CraftaxVectorEnv(1, seed=0, reset_ratio=1)  # the shape test_envs_craftax compiles
    policy = ExpertPolicy({"name": "craftax"}, seed=0)
    obs, infos = envs.reset(seed=0)
    start = np.asarray(envs._carry["states"].player_position[0])
    for _ in range(150):
        obs, _, term, trunc, infos = envs.step(policy.act(obs, infos))
        assert not (term[0] or trunc[0])
    policy.act(obs, infos)
    row, col = np.asarray(envs._carry["states"].player_position[0]) - start
    assert (policy.agents[0].map.pos - ORIGIN == (col, row)).all()  # map x = Craftax column, y = row
    got = {k for k, v in infos["achievements"].items() if v[0] > 0}
    assert {"collect_wood", "place_table", "make_wood_pickaxe", "collect_stone"} <= got


def test_ptgm_collects_competent_play_with_the_expert_and_never_the_excluded_achievement(tmp_path):
    import json

    from llmguide.data import EpisodeDataset
    from llmguide.pipelines import load_config, run

    cfg = load_config(["env=craftax", "env.max_steps=300", "num_envs=2", "method=ptgm", "method.collect.policy=expert",
                       "method.collect.agent_steps=1200", "method.collect.exclude=[place_table]", "progress=false",
                       f"run.dir={tmp_path}", "run.name=data"])
    assert run("collect", cfg) == 0
    summary = json.loads((tmp_path / "data" / "collect_summary.json").read_text())
    assert summary["collector"] == "expert" and summary["episodes"] >= 2
    episodes = EpisodeDataset(tmp_path / "data" / "dataset").episodes()
    events = [e for ep in episodes for step in ep.events for e in step]
    assert "collect wood" in events and "place table" not in events


def test_ptgm_collects_the_plain_experts_general_play_and_refuses_an_unknown_mode(tmp_path):
    """``method.collect.expert_mode=plain``: the expert plays every achievement cheapest first, so the data hold
    the wood pickaxe's whole chain (data mode samples subgoals, ε-random actions); a bad mode names its key."""
    import json

    from llmguide.core.errors import ConfigError
    from llmguide.data import EpisodeDataset
    from llmguide.pipelines import load_config, run

    base = ["env=craftax", "env.max_steps=300", "num_envs=2", "method=ptgm", "method.collect.policy=expert",
            "method.collect.agent_steps=1200", "progress=false", f"run.dir={tmp_path}"]
    cfg = load_config([*base, "method.collect.expert_mode=plain", "run.name=plain"])
    assert run("collect", cfg) == 0
    assert json.loads((tmp_path / "plain" / "collect_summary.json").read_text())["episodes"] >= 2
    for episode in EpisodeDataset(tmp_path / "plain" / "dataset").episodes():
        events = [e for step in episode.events for e in step]
        assert {"collect wood", "place table", "make wood pickaxe"} <= set(events)
    with pytest.raises(ConfigError, match="method.collect.expert_mode"):
        load_config([*base, "method.collect.expert_mode=chaos", "run.name=bad"])
