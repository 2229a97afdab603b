"""BK on Crafter single tasks, on env=craftax (Craftax-Classic, batched JAX) and env=crafter: the oracle's
knowledge (program, progress, goals), one batched sandbox call per rollout, and the whole pipeline."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmguide.envs.crafter.env import CrafterText
from llmguide.envs.crafter.rules import ITEMS, SEMANTIC_NAMES, CrafterOracle
from llmguide.llm.backends.oracle import OracleLM
from llmguide.methods import bk
from llmguide.methods.bk.crafter import (
    oracle_goals,
    oracle_program,
    oracle_rules,
    task_progress,
    window_progress,
)
from llmguide.methods.bk.oracle import BKOracleAnswers
from llmguide.methods.bk.prompts import template as load_template
from llmguide.sandbox import Sandbox, SandboxLimits

pytest.importorskip("craftax")

from llmguide.envs.craftax.env import CraftaxOracle  # noqa: E402

ORACLES = [CrafterOracle(), CraftaxOracle()]
H, W = 7, 9


def state(inv: dict[str, int] | None = None, things: dict[tuple[int, int], str] | None = None) -> dict:
    """A symbolic obs: grass around the player (row 3, column 4), ``things`` at (row, col), inventory ``inv``."""
    ids = np.full((H, W), SEMANTIC_NAMES.index("grass"))
    ids[H // 2, W // 2] = SEMANTIC_NAMES.index("player")
    for (r, c), name in (things or {}).items():
        ids[r, c] = SEMANTIC_NAMES.index(name)
    image = (ids[None] == np.arange(len(SEMANTIC_NAMES))[:, None, None]).astype(np.float32)
    vector = np.zeros(len(ITEMS) + 6, np.float32)
    vector[:4] = 1.0
    for k, v in (inv or {}).items():
        vector[ITEMS.index(k)] = v / 9.0
    return {"image": image, "vector": vector}


FAR_TREE, NEXT_TREE, NEXT_TABLE = {(3, 8): "tree"}, {(3, 5): "tree"}, {(2, 4): "table"}
PATHS = {  # states along each task, each one step nearer to it
    "place table": [state(), state({}, FAR_TREE), state({}, NEXT_TREE), state({"wood": 1}, NEXT_TREE),
                    state({"wood": 2}, NEXT_TREE), state({}, NEXT_TABLE)],
    "make wood pickaxe": [state(), state({}, NEXT_TREE), state({"wood": 1}, NEXT_TREE),
                          state({"wood": 2}, NEXT_TREE), state({"wood": 3}, NEXT_TREE),
                          state({"wood": 1}, NEXT_TABLE), state({"wood_pickaxe": 1}, NEXT_TABLE)],
    "collect stone": [state(), state({"wood": 1}, NEXT_TREE), state({"wood": 3}, NEXT_TREE),
                      state({"wood_pickaxe": 1}, {(3, 8): "stone"}), state({"wood_pickaxe": 1}, {(3, 5): "stone"}),
                      state({"wood_pickaxe": 1, "stone": 1}, {(3, 5): "path"})],
}


def sandbox() -> Sandbox:
    return Sandbox(SandboxLimits(timeout=30))


def columns(states: list[dict], captions: list[str] | None = None):
    return bk.stack_states([(s, c) for s, c in zip(states, captions or [""] * len(states), strict=True)])


@pytest.mark.parametrize("oracle", ORACLES, ids=["crafter", "craftax"])
@pytest.mark.parametrize("task", sorted(PATHS))
def test_oracle_program_potential_rises_along_the_task(oracle, task):
    program = oracle_program(task, oracle)
    res = sandbox().evaluate_batch(program, "potential", columns(PATHS[task]))
    assert res.ok and res.batched and res.item_errors == 0
    phi = res.values
    assert np.all(np.diff(phi) > 0), phi                  # strictly more potential at every step of the way
    assert phi[0] == pytest.approx(0.0) and phi[-1] == pytest.approx(1.0)


def test_oracle_program_is_written_for_the_task_and_the_rules():
    assert "TASK = 'place table'" in oracle_program("place_table", CrafterOracle())
    req_crafter, sources = oracle_rules(CrafterOracle())
    req_craftax, _ = oracle_rules(CraftaxOracle())
    assert list(sources.items()) == [("wood", "tree"), ("stone", "stone"), ("coal", "coal"), ("iron", "iron"),
                                     ("diamond", "diamond"), ("drink", "water"), ("sapling", "grass")]
    assert req_crafter["place furnace"][0] != req_craftax["place furnace"][0]   # Craftax-Classic's recipe costs
    assert f"{req_craftax['place furnace']!r}" in oracle_program("place furnace", CraftaxOracle())
    with pytest.raises(ValueError, match="no Crafter goal"):
        oracle_program("fly to the moon", CrafterOracle())


def test_program_in_the_sandbox_equals_the_in_process_progress():
    """The sandboxed program embeds task_progress: same numbers as the oracle computes in process."""
    oracle = CraftaxOracle()
    req, sources = oracle_rules(oracle)
    inside = sandbox().evaluate_batch(oracle_program("make wood pickaxe", oracle), "potential",
                                      columns(PATHS["make wood pickaxe"])).values
    outside = [task_progress("make wood pickaxe", inv, dist, near, req, sources) for inv, dist, near in [
        ({}, {}, set()), ({}, {"tree": 1}, {"tree"}), ({"wood": 1}, {"tree": 1}, {"tree"}),
        ({"wood": 2}, {"tree": 1}, {"tree"}), ({"wood": 3}, {"tree": 1}, {"tree"}),
        ({"wood": 1}, {"table": 1}, {"table"}), ({"wood_pickaxe": 1}, {"table": 1}, {"table"})]]
    assert np.allclose(inside, outside)


@pytest.fixture(scope="module")
def craftax_rollout():
    """Real Craftax-Classic states: 8 envs × 24 random steps (obs rows and captions). 8 envs at the default
    reset ratio: the step test_messages compiles too (a compile is the cost of this fixture)."""
    from llmguide.envs.craftax.env import CraftaxVectorEnv

    env = CraftaxVectorEnv(8, seed=3)
    obs, infos = env.reset(seed=3)
    rng = np.random.default_rng(0)
    rows, caps = [], []
    for _ in range(24):
        actions = rng.integers(0, 17, 8)
        actions[:4] = 5                                   # some envs keep "doing": wood gets collected
        obs, _, _, _, infos = env.step(actions)
        rows.append({k: v.copy() for k, v in obs.items()})
        caps += [str(c) for c in infos["caption"]]
    env.close()
    return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}, caps


def test_one_batched_sandbox_call_gives_the_per_state_potentials(craftax_rollout):
    obs, caps = craftax_rollout
    n = len(caps)
    assert obs["image"][:, SEMANTIC_NAMES.index("player"), H // 2, W // 2].all()   # the layout the program assumes
    box = sandbox()
    program = oracle_program("place table", CraftaxOracle())
    potential = bk.CodePotential(program, box)
    infos = [{"caption": c} for c in caps]
    calls = box.calls
    phi = potential(obs, infos, np.zeros(n, np.int64))
    assert box.calls == calls + 1 and potential.batched_calls == 1            # one sandbox call, vectorised
    assert phi.shape == (n,) and len(np.unique(phi)) > 1
    rows = [({k: v[i] for k, v in obs.items()}, caps[i]) for i in range(n)]
    per_row = box.evaluate(program, "potential", rows)                        # potential() on each state
    assert per_row.ok and np.allclose(phi, per_row.values)
    for i in np.linspace(0, n - 1, 5).astype(int):                            # one sandbox call per state
        alone = box.evaluate(program, "potential", [rows[i]])
        assert alone.values[0] == pytest.approx(phi[i])
    # a program without potential_batch runs potential() row by row, still in one call
    plain = bk.CodePotential(program.replace("def potential_batch(", "def unused_batch("), box)
    assert np.allclose(plain(obs, infos, np.zeros(n, np.int64)), phi) and plain.batched_calls == 0


def test_a_batch_function_that_disagrees_is_refused_when_labelling(craftax_rollout):
    obs, caps = craftax_rollout
    states = [({k: v[i] for k, v in obs.items()}, caps[i]) for i in range(0, len(caps), 12)]
    program = oracle_program("place table", CrafterOracle())
    box = sandbox()
    good = box.evaluate(program, "potential", states)
    assert bk.check_batch_function(program, states, good.values, box) is None
    wrong = program + "\n\ndef potential_batch(obs, captions):\n    return np.ones(len(captions))\n"
    assert "disagrees" in bk.check_batch_function(wrong, states, good.values, box)
    broken = program + "\n\ndef potential_batch(obs, captions):\n    raise KeyError('x')\n"
    assert "failed" in bk.check_batch_function(broken, states, good.values, box)
    res = box.evaluate_batch(broken, "potential", bk.stack_states(states))        # training falls back per row
    assert res.ok and not res.batched and "KeyError" in res.batch_error and np.allclose(res.values, good.values)


def test_oracle_lm_answers_the_bk_prompts_for_a_crafter_task():
    lm = OracleLM("craftax", answerers=[BKOracleAnswers(CraftaxOracle(), "place table")])
    write = load_template("bk_code_write").render(obs_description="-", caption_examples="-",
                                                  env_notes=bk.env_notes("craftax"))
    code = bk.extract_code(lm.generate([write])[0].text)
    assert "TASK = 'place table'" in code and "def potential_batch(" in code
    none = "You see grass. You face grass."
    wood = ["You see tree, grass. You face tree.", "You see tree, grass. You face tree. You have 1 wood."]
    a = bk.window_text(wood, [5], CrafterText.action_strings)
    b = bk.window_text([none, none], [0], None)
    pref = load_template("bk_pref").render(a=a, b=b)
    assert lm.generate([pref])[0].text.endswith("[Rank] A > B")
    assert lm.generate([load_template("bk_pref").render(a=b, b=a)])[0].text.endswith("[Rank] B > A")
    goal = load_template("bk_goal").render(window=a, goals="(empty)")
    assert lm.generate([goal])[0].text.splitlines() == ["- collect wood", "- place table"]
    assert window_progress(wood, "place table", CraftaxOracle()) > 0


def test_oracle_goals_put_prerequisites_first():
    goals = oracle_goals("make stone pickaxe", CrafterOracle())
    assert goals[-1] == "make stone pickaxe"
    assert goals.index("collect wood") < goals.index("place table") < goals.index("make wood pickaxe") \
        < goals.index("collect stone")
    assert oracle_goals("", CrafterOracle()) == []


# --- the whole pipeline through the run directories -----------------------------------------------
@pytest.fixture(scope="module")
def craftax_data(tmp_path_factory):
    from llmguide.methods.bk import recipe as pipeline
    from llmguide.pipelines import load_config

    root = tmp_path_factory.mktemp("bk_craftax")
    pipeline.collect(load_config(["env=craftax", "method=bk_code", "num_envs=8", "env.max_steps=48",
                                  "agent.num_steps=32", "agent.image_encoder=flat", "total_steps=768",
                                  "progress=false", f"run.dir={root}", "run.name=data"]))
    return root


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["bk_code", "bk_pref", "bk_goal"])
def test_each_variant_collects_labels_and_trains_on_craftax(craftax_data, variant):
    from llmguide.core.rundir import read_metrics
    from llmguide.methods.bk import recipe as pipeline
    from llmguide.pipelines import load_config, run

    root = craftax_data
    base = ["env=craftax", "env.task=place_table", "env.max_steps=48", "num_envs=8", "agent.num_steps=32",
            "agent.image_encoder=flat", "progress=false", f"run.dir={root}", f"method={variant}",
            "eval.episodes=1"]
    extra = {"bk_code": ["method.code.iterations=1"], "bk_goal": ["method.goal.iterations=2"],
             "bk_pref": ["method.pref.num_pairs=80", "method.pref.min_usable=10"]}[variant]
    pipeline.label(load_config([*base, "llm=oracle", f"method.data={root / 'data'}",
                                f"run.name=labels-{variant}", *extra]))
    manifest = json.loads((root / f"labels-{variant}" / "bk" / "manifest.json").read_text())
    assert manifest["failed"] is None and manifest["oracle_mission"] == "place table"
    assert manifest["action_names"][8] == "place table"          # Craftax's 17 actions have Crafter's names
    run("train", load_config([*base, f"method.labels={root / f'labels-{variant}'}", f"run.name=train-{variant}",
                              "total_steps=512"]))
    assert (root / f"train-{variant}" / "eval.json").exists()
    recs = read_metrics(root / f"train-{variant}")
    assert any(f"reward/{variant}/phi_factor" in r for r in recs)
    if variant == "bk_code":    # one sandbox call per rollout (512 steps / (8 envs × 32) = 2), vectorised
        calls = [r[f"reward/{variant}/sandbox_calls"] for r in recs if f"reward/{variant}/sandbox_calls" in r]
        batched = [r[f"reward/{variant}/sandbox_batched_calls"] for r in recs
                   if f"reward/{variant}/sandbox_batched_calls" in r]
        assert calls[-1] == 2 and batched[-1] == 2


@pytest.mark.slow
def test_bk_code_oracle_on_crafter(tmp_path):
    from llmguide.methods.bk import recipe as pipeline
    from llmguide.pipelines import load_config, run

    base = ["env=crafter", "env.max_steps=40", "num_envs=2", "agent.num_steps=32", "agent.image_encoder=flat",
            "progress=false", f"run.dir={tmp_path}", "method=bk_code", "eval.episodes=1"]
    pipeline.collect(load_config([*base, "total_steps=256", "run.name=data"]))
    pipeline.label(load_config([*base, "env.task=collect_wood", "llm=oracle", f"method.data={tmp_path / 'data'}",
                                "run.name=labels", "method.code.iterations=1"]))
    manifest = json.loads((tmp_path / "labels" / "bk" / "manifest.json").read_text())
    assert manifest["failed"] is None and manifest["oracle_mission"] == "collect wood"
    run("train", load_config([*base, "env.task=collect_wood", f"method.labels={tmp_path / 'labels'}",
                              "run.name=train", "total_steps=128"]))
    assert (tmp_path / "train" / "eval.json").exists()
