"""ONI / Motif with ground truth: the oracle labeller (``llm=oracle``) on the LM code path, the message
observation and reference-style policy, the extrinsic reward transform, Motif's collection, a NetHack run."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

pytest.importorskip("nle")
pytest.importorskip("minihack")

from llmguide.envs.nethack.env import NetHackText  # noqa: E402
from llmguide.envs.nethack.oracle import SCORE_GOAL, NetHackOracle, goal_events, task_goal  # noqa: E402
from llmguide.llm.backends.oracle import OracleLM  # noqa: E402
from llmguide.llm.service.core import LLMService  # noqa: E402
from llmguide.methods.oni.annotator import MessageAnnotator, PairAnnotator  # noqa: E402
from llmguide.methods.oni.oracle import ONIOracleAnswers, helpful, prefer  # noqa: E402
from llmguide.pipelines import load_config  # noqa: E402

KEY = "g - a key named The Master Key of Thievery."
HELPFUL = [KEY, "You kill the newt!", "The door opens.", "There is a staircase down here.",
           "You succeed in unlocking the door.", "Welcome to experience level 2."]
UNHELPFUL = ["It's a wall.", "Never mind.", "This door is locked.", "There is nothing here to pick up.",
             "You see here a key named The Master Key of Thievery.", "You hear the footsteps of a guard on patrol."]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def oracle_service():
    lm = OracleLM("minihack", answerers=[ONIOracleAnswers(NetHackOracle())])
    with LLMService(lm, max_batch=8) as service:
        yield lm, service


def test_ground_truth_helpful_means_the_message_reports_progress():
    oracle = NetHackOracle()
    assert all(helpful(oracle, m) for m in HELPFUL)
    assert not any(helpful(oracle, m) for m in UNHELPFUL + [""])
    assert prefer(oracle, KEY, "It's a wall.") == "A" and prefer(oracle, "Never mind.", KEY) == "B"
    assert prefer(oracle, "It's a wall.", "Never mind.") == "="


# the reference's prompt (facebookresearch/oni rlaif/prompts.py, "defaultgoal") calls kills, level gains and gold
# (picked up, or heard: "You hear someone counting money.") extremely helpful, and neutral messages unhelpful
SCORE_YES = ["You kill the newt!", "Welcome to experience level 2.", "$ - 5 gold pieces.",
             "You hear someone counting money.", "There is a staircase down here."]
SCORE_NO = ["The door opens.", KEY, "f - an uncursed food ration.", "You finish eating the orange.", "It's a wall."]


def test_oracle_helpfulness_is_conditioned_on_the_task_goal():
    oracle = NetHackOracle()
    assert task_goal("NetHackScore-v0") == SCORE_GOAL and task_goal("MiniHack-KeyRoom-Fixed-S5-v0") is None
    assert all(helpful(oracle, m, SCORE_GOAL) for m in SCORE_YES)
    assert not any(helpful(oracle, m, SCORE_GOAL) for m in SCORE_NO)
    assert helpful(oracle, "The door opens.") and helpful(oracle, KEY)  # no goal: any progress (MiniHack)
    for new_ability in ("You start to float in the air!", "You push the boulder into the water.  Now you can cross it!",
                        "The lava cools and solidifies."):  # progress without a goal, not towards the Score goal
        assert helpful(oracle, new_ability) and not helpful(oracle, new_ability, SCORE_GOAL)
    assert not helpful(oracle, "a - a +1 club (weapon in hand).")  # equipping an owned item is no item gained
    assert prefer(oracle, "The door opens.", "$ - 5 gold pieces.", SCORE_GOAL) == "B"
    assert prefer(oracle, "The door opens.", "$ - 5 gold pieces.") == "="
    # the reference's other goal strings: only their positive clause counts ("But never prefer ...")
    gold = ("Prefer agents that maximize their gold. But never prefer agents that maximize the score in other ways "
            "(e.g., by engaging in combat or killing monsters) or that go down the dungeon.")
    assert goal_events(gold) == {"collect gold", "hear gold"}
    assert not helpful(oracle, "You kill the newt!", gold) and helpful(oracle, "$ - 5 gold pieces.", gold)
    stairs = task_goal("NetHackStaircase-v0")
    assert helpful(oracle, "There is a staircase down here.", stairs) and not helpful(oracle, "$ - 5 gold pieces.", stairs)
    assert goal_events("win the game somehow") == goal_events(None)  # unknown words: any progress


@pytest.mark.parametrize("mode", ["score", "generate"])
def test_the_goal_reaches_the_oracle_through_the_labelling_prompt(oracle_service, mode):
    _, service = oracle_service
    annot = MessageAnnotator(service, mode=mode, cache=None, goal=SCORE_GOAL)
    assert annot.template.name == ("oni_label_short_goal" if mode == "score" else "oni_label_goal")
    assert f"Goal: {SCORE_GOAL}" in annot.prompt("x") and annot.payload("x")["goal"] == SCORE_GOAL
    annot.submit(SCORE_YES + SCORE_NO)
    assert annot.wait(30)
    assert [annot.get(m) for m in SCORE_YES + SCORE_NO] == [1.0] * len(SCORE_YES) + [0.0] * len(SCORE_NO)
    plain = MessageAnnotator(service, mode=mode, cache=None)  # no goal: the task-agnostic prompt and answer
    assert "goal" not in plain.payload("x") and "\nGoal:" not in plain.prompt("x")
    plain.submit(["The door opens."])
    assert plain.wait(30) and plain.get("The door opens.") == 1.0
    pairs = PairAnnotator(service, mode=mode, cache=None, goal=SCORE_GOAL)
    assert pairs.template.name == "motif_pref_goal"
    pair = PairAnnotator.make_pair("The door opens.", "$ - 5 gold pieces.")
    pairs.submit([pair])
    assert pairs.wait(30) and pairs.get(pair) == (1.0 if pair[0].startswith("$") else 0.0)
    with pytest.raises(ValueError, match="needs a goal"):
        MessageAnnotator(service, template="oni_label_goal", cache=None)


def test_recipes_prompt_with_the_task_goal(tmp_path):
    from llmguide.methods.oni.recipe import method_goal

    score = load_config(["env=nethack", "env.id=NetHackScore-v0", "method=oni_retrieval", f"run.dir={tmp_path}"])
    assert method_goal(score) == SCORE_GOAL
    room = load_config(["env=minihack", "env.id=MiniHack-KeyRoom-Fixed-S5-v0", "method=motif", f"run.dir={tmp_path}"])
    assert method_goal(room) is None
    none = load_config(["env=nethack", "method=oni_ranking", "method.goal=", f"run.dir={tmp_path}"])
    assert method_goal(none) is None
    own = load_config(["env=nethack", "method=oni_classification", "method.goal=collect gold", f"run.dir={tmp_path}"])
    assert method_goal(own) == "collect gold"


@pytest.mark.parametrize("mode", ["score", "generate"])
def test_oracle_labels_go_through_the_lm_annotator_path(oracle_service, mode):
    lm, service = oracle_service
    annot = MessageAnnotator(service, mode=mode, cache=None)
    assert annot.submit(HELPFUL + UNHELPFUL) == len(HELPFUL + UNHELPFUL)
    assert annot.wait(30)
    assert {m: annot.get(m) for m in HELPFUL} == dict.fromkeys(HELPFUL, 1.0)
    assert {m: annot.get(m) for m in UNHELPFUL} == dict.fromkeys(UNHELPFUL, 0.0)
    assert annot.counts["unparseable"] == 0 and annot.counts["duplicate_requests"] == 0
    assert lm.stats["oni_answers"] == len(HELPFUL + UNHELPFUL) and lm.stats["no_caption"] == 0


@pytest.mark.parametrize("mode", ["score", "generate", "score-both-orders"])
def test_oracle_pair_preferences_from_the_same_ground_truth(oracle_service, mode):
    lm, service = oracle_service
    both = mode == "score-both-orders"
    annot = PairAnnotator(service, mode="score" if both else mode, cache=None, both_orders=both)
    asked = lm.stats["oni_answers"]
    pairs = [PairAnnotator.make_pair(KEY, "It's a wall."), PairAnnotator.make_pair("Never mind.", "It's a wall."),
             PairAnnotator.make_pair("You kill the newt!", "This door is locked.")]
    annot.submit(pairs)
    assert annot.wait(30)
    for a, b in pairs:  # label = P(first of the sorted pair preferred)
        expected = {"A": 1.0, "B": 0.0, "=": 0.5}[prefer(NetHackOracle(), a, b)]
        assert annot.get((a, b)) == expected
    assert annot.get(pairs[0]) in (0.0, 1.0) and annot.get(pairs[1]) == 0.5
    assert lm.stats["oni_answers"] - asked == len(pairs) * (2 if both else 1)   # both orders: two questions
    if both:   # the same labels from the pair asked both ways round, and the order is part of the cache key
        assert annot.payload(pairs[0]) != PairAnnotator(service, cache=None).payload(pairs[0])


def test_oni_recipe_builds_the_oracle_retrieval_reward_and_reference_policy(tmp_path):
    from llmguide.methods.oni.recipe import ONIRecipe

    cfg = load_config(["env=minihack", "method=oni_retrieval", "llm=oracle", f"run.dir={tmp_path}"])
    assert cfg.agent.recurrent is None
    ONIRecipe(cfg).check()
    assert cfg.agent.recurrent == "gru" and cfg.env.message_obs is True
    cfg = load_config(["env=minihack", "method=oni_retrieval", "method.recurrent=null", f"run.dir={tmp_path}"])
    ONIRecipe(cfg).check()
    assert cfg.agent.recurrent is None  # opting out keeps a feed-forward policy


def test_message_bytes_in_the_observation_reach_the_policy_through_a_message_encoder():
    from llmguide.learners.networks import ActorCritic, DictEncoder

    env = NetHackText("MiniHack-KeyRoom-Fixed-S5-v0", "minihack", message_obs=True)
    obs, info = env.reset(seed=0)
    assert obs["message"].dtype == np.uint8 and obs["message"].shape == (256,)
    assert env.observation_space.contains(obs)
    net = ActorCritic(env.observation_space, env.action_space.n, hidden=32, recurrent="gru")
    assert net.encoder.message_keys == ["message"] and "message" not in net.encoder.vector_keys
    batch = {k: torch.as_tensor(np.stack([v, v])) for k, v in obs.items()}
    batch["message"][1, :12] = torch.tensor(list(b"It's a wall."), dtype=torch.uint8)
    state = net.initial_state(2)
    _, _, _, values, new_state = net.get_action_and_value(batch, state, torch.zeros(2))
    assert new_state[0].shape == (1, 2, 32)
    assert not torch.allclose(values[0], values[1])  # only the message differs
    plain = NetHackText("MiniHack-KeyRoom-Fixed-S5-v0", "minihack")
    assert "message" not in plain.observation_space.spaces
    assert DictEncoder(plain.observation_space, 32).message_keys == []  # other envs: unchanged encoder
    env.close()
    plain.close()


def test_extrinsic_reward_is_scaled_and_clipped_and_the_raw_reward_kept(monkeypatch):
    env = NetHackText("NetHackScore-v0", "nethack", reward_scale=0.5, reward_clip=10.0)
    env.reset(seed=0)
    inner_step = env._env.step

    def big_reward(action):
        obs, _, term, trunc, info = inner_step(action)
        return obs, 50.0, term, trunc, info

    monkeypatch.setattr(env._env, "step", big_reward)
    _, reward, _, _, info = env.step(0)
    assert reward == 10.0 and info["raw_reward"] == 50.0
    env.close()


def test_motif_pairs_are_sampled_over_observations():
    from llmguide.methods.oni.motif import sample_pairs

    counts = Counter({"": 1000, "It's a wall.": 500, **{f"rare {i}": 1 for i in range(30)}})
    over_obs = sample_pairs(counts, 20, seed=0, over="observations")
    uniform = sample_pairs(counts, 20, seed=0, over="unique")
    assert len(over_obs) == len(set(over_obs)) == 20 and all(a != b for a, b in over_obs)
    frequent = lambda pairs: sum(("" in p) or ("It's a wall." in p) for p in pairs)  # noqa: E731
    assert frequent(over_obs) > frequent(uniform)


def _small(tmp_path, *extra: str):
    return load_config(["num_envs=2", "agent.num_steps=32", "agent.hidden=32", "agent.update_epochs=1",
                        "total_steps=128", "eval.episodes=1", "progress=false", "llm=oracle", f"run.dir={tmp_path}",
                        *extra])


def test_motif_collects_with_an_rnd_agent_and_trains_with_oracle_preferences(tmp_path):
    from llmguide.methods.oni.motif_recipe import collect, label
    from llmguide.pipelines import run

    cfg = _small(tmp_path, "env=minihack", "env.id=MiniHack-KeyRoom-Fixed-S5-v0", "method=motif",
                 f"method.data_dir={tmp_path / 'data'}", "method.collect_steps=128", "method.num_pairs=10",
                 "run.name=motif")
    assert cfg.method.collect_policy == "rnd"
    assert collect(cfg) == 0 and label(cfg) == 0
    stats = json.loads((tmp_path / "data" / "label_stats.json").read_text())
    assert stats["done"] >= 1 and stats["unparseable"] == 0 and stats["todo"] == 0
    assert run("train", cfg) == 0
    assert (tmp_path / "motif" / "eval.json").exists()


def test_motif_control_labels_a_copy_of_the_treatments_pairs_and_leaves_them_untouched(tmp_path):
    """``method.pairs_from``: the shuffled labeller gets exactly the oracle's pairs (same order, none labelled yet)
    in its own data_dir, labels every one of them, and the oracle's labels stay as they were."""
    from llmguide.methods.oni.motif import PairsDB
    from llmguide.methods.oni.motif_recipe import collect, label

    base = ["env=minihack", "env.id=MiniHack-KeyRoom-Fixed-S5-v0", "method=motif", "method.collect_steps=128",
            "method.num_pairs=10", "run.name=motif"]
    oracle = _small(tmp_path, *base, f"method.data_dir={tmp_path / 'data'}")
    assert collect(oracle) == 0 and label(oracle) == 0
    before = PairsDB(tmp_path / "data" / "pairs.sqlite").conn.execute("SELECT a, b, label FROM pairs").fetchall()
    shuffled = _small(tmp_path, *base, "llm=shuffled", f"method.data_dir={tmp_path / 'shuffled'}",
                      f"method.pairs_from={tmp_path / 'data'}")
    assert label(shuffled) == 0
    copy = PairsDB(tmp_path / "shuffled" / "pairs.sqlite")
    assert copy.pairs() == [(a, b) for a, b, _ in before] and len(before) >= 2
    assert copy.count("todo") == 0 and copy.count("done") == len(before)
    assert PairsDB(tmp_path / "data" / "pairs.sqlite").conn.execute("SELECT a, b, label FROM pairs").fetchall() == before
    with pytest.raises(FileExistsError):   # a copy never lands on pairs already there
        PairsDB(tmp_path / "data" / "pairs.sqlite").copy_unlabelled(tmp_path / "shuffled" / "pairs.sqlite")
    typo = _small(tmp_path, *base, "llm=shuffled", f"method.data_dir={tmp_path / 'other'}",
                  f"method.pairs_from={tmp_path / 'dta'}")
    with pytest.raises(FileNotFoundError, match="method.pairs_from"):
        label(typo)
    assert not (tmp_path / "dta").exists()   # a mistyped source is reported, never created


def test_nethack_score_runs_through_the_oni_recipe_with_oracle_labels(tmp_path):
    from llmguide.pipelines import run

    cfg = _small(tmp_path, "env=nethack", "env.id=NetHackScore-v0", "method=oni_retrieval",
                 "method.extrinsic_coef=0.1", "total_steps=256", "run.name=nh")
    assert run("train", cfg) == 0
    out = tmp_path / "nh"
    assert json.loads((out / "eval.json").read_text())["step"] == 256
    state = torch.load(out / "checkpoints" / "latest.pt", weights_only=False)["agent"]
    assert any(k.startswith("encoder.messages.message") for k in state["net"]) and "core.weight_hh_l0" in state["net"]
    labels = state["reward_modules"][0]["state"]["annotator"]["labels"]
    assert labels and all(v in (0.0, 1.0) for v in labels.values())  # the game's messages were labelled
    oracle = NetHackOracle()
    assert all(v == float(helpful(oracle, m, SCORE_GOAL)) for m, v in labels.items())  # the task's goal
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["lm/annot_duplicate_requests"] == 0


def test_extended_action_set_adds_the_reference_actions_on_nethack_only():
    task = NetHackText("NetHackScore-v0", "nethack")
    ext = NetHackText("NetHackScore-v0", "nethack", actions="extended")
    assert task.action_space.n == 23 and ext.action_space.n == 28  # the reference's *ExtendedActions-v1
    assert ext.action_strings[:23] == task.action_strings
    assert {"cast", "quaff", "pray", "pickup", "pay"} == set(ext.action_strings[23:])
    room = NetHackText("MiniHack-KeyRoom-Fixed-S5-v0", "minihack", actions="extended")
    assert "pickup" in room.action_strings and room.action_space.n == 10  # MiniHack keeps its own actions
    with pytest.raises(ValueError, match="action_set"):
        NetHackText("NetHackScore-v0", "nethack", actions="all")
    for env in (task, ext, room):
        env.close()


def test_labelled_fraction_counts_message_occurrences_whose_label_had_arrived(oracle_service):
    from llmguide.methods.oni.reward import ONIRetrieval
    from llmguide.rewards.base import TransitionBatch

    _, service = oracle_service
    module = ONIRetrieval(MessageAnnotator(service, cache=None), num_envs=2)
    infos = [[{"caption": KEY}, {"caption": "It's a wall."}], [{"caption": "It's a wall."}, {"caption": ""}]]
    batch = TransitionBatch(obs=None, actions=None, next_obs=None, rewards=np.zeros((2, 2), np.float32),
                            terminated=np.zeros((2, 2), bool), truncated=np.zeros((2, 2), bool), infos=infos)
    first = module.compute(batch)
    assert module.last["labelled_fraction"] == 0.0 and not first.any()  # asked, not answered yet: pending = 0
    assert module.annotator.wait(30)
    module.compute(batch)
    assert module.last["labelled_fraction"] == 1.0 == module.last["labelled_fraction_unique"]
    module.close()


def test_step_penalty_option_and_the_sparse_task_rule():
    """``env.penalty_step`` replaces NLE/MiniHack's -0.01 for a "frozen" step; benchmarks/studies/oni.py's auto rule keeps
    it on *Score* (the reference's Score task) and sets 0 on sparse tasks (the reference's rewards success only)."""
    import argparse
    import importlib.util
    import sys
    from pathlib import Path

    from llmguide.envs import make_env

    rewards = {}
    for penalty in (None, 0.0):
        env = make_env({"name": "minihack", "id": "MiniHack-LavaCross-Levitate-Potion-Pickup-Restricted-v0",
                        "penalty_step": penalty}, seed=0)
        env.reset(seed=0)
        pickup = next(i for i, a in enumerate(env.unwrapped.action_strings) if "pickup" in a)
        rewards[penalty] = env.step(pickup)[1]  # nothing to pick up: no game time passes
        env.close()
    assert rewards[None] == pytest.approx(-0.01) and rewards[0.0] == 0.0
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "studies" / "oni.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("oni_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    auto = argparse.Namespace(step_penalty="auto")
    assert bench.step_penalty(auto, "NetHackScore-v0") is None
    assert bench.step_penalty(auto, "MiniHack-KeyRoom-S5-v0") == 0.0
    assert bench.step_penalty(argparse.Namespace(step_penalty="task"), "MiniHack-KeyRoom-S5-v0") is None
    assert bench.step_penalty(argparse.Namespace(step_penalty="-0.005"), "NetHackScore-v0") == -0.005
