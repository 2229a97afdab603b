"""ONI and Motif on Crafter and Craftax-Classic: they read the message line (``info["message"]``), the oracle labels it
from the requirement tree through ONI's Crafter prompts, the knowledge controls answer those prompts, ONI-Ranking's
reward is never negative, and oni_retrieval with llm=oracle trains end to end on both envs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from llmguide.envs.crafter.rules import CrafterOracle
from llmguide.llm.backends.oracle import OracleLM
from llmguide.llm.service.core import LLMService
from llmguide.methods.oni.annotator import MessageAnnotator, PairAnnotator
from llmguide.methods.oni.oracle import ONIOracleAnswers, helpful
from llmguide.methods.oni.ranking import ONIRanking
from llmguide.methods.oni.reward import ONIRetrieval
from llmguide.pipelines import load_config
from llmguide.rewards.base import TransitionBatch

WOOD = "You collect wood. You get 1 wood."
TABLE = "You place a table. You lose 1 wood. You see a table."
SAPLING = "You collect a sapling. You get 1 sapling."
NOTHING, COW, HURT = "Nothing happens.", "You see a cow.", "You are hit by a zombie. You feel hurt."


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def service():
    lm = OracleLM("crafter", answerers=[ONIOracleAnswers(CrafterOracle())])
    with LLMService(lm, max_batch=8) as svc:
        yield svc


def batch_of(rows: list[list[dict]]) -> TransitionBatch:
    t, n = len(rows), len(rows[0])
    return TransitionBatch(obs={}, actions=np.zeros((t, n), np.int64), next_obs={}, rewards=np.zeros((t, n)),
                           terminated=np.zeros((t, n), bool), infos=rows)


def test_oni_and_motif_accept_crafter_and_craftax_and_read_their_message_line(tmp_path):
    from llmguide.methods.oni.recipe import family_templates, message_key

    for env in ("crafter", "craftax"):
        for method in ("oni_retrieval", "oni_classification", "oni_ranking", "motif"):
            cfg = load_config([f"env={env}", f"method={method}", "llm=oracle", f"run.dir={tmp_path}"])
            assert message_key(cfg) == "message"
        assert family_templates(env) == ("crafter_label_short", "crafter_label", "crafter_pref")
    assert message_key(load_config(["env=minihack", "method=oni_retrieval", f"run.dir={tmp_path}"])) == "caption"
    assert family_templates("nethack") == (None, None, None)


def test_retrieval_reads_the_message_line_not_the_caption(service):
    module = ONIRetrieval(MessageAnnotator(service, template="crafter_label_short", cache=None), 2,
                          message_key="message", beta=1.0)
    rows = [[{"caption": "You see tree. You face grass.", "message": WOOD},
             {"caption": "You see tree. You face grass.", "message": NOTHING}]]
    module.compute(batch_of(rows))
    assert module.annotator.wait(30)
    assert set(module.annotator.labels) == {WOOD, NOTHING}
    assert module.compute(batch_of(rows)).tolist() == [[0.5, 0.0]]   # labelled 1 / 0, seen twice: 1 / 2^β


@pytest.mark.parametrize("mode", ["score", "generate"])
def test_oracle_labels_crafter_messages_through_the_crafter_prompts(service, mode):
    template = "crafter_label_short" if mode == "score" else "crafter_label"
    annot = MessageAnnotator(service, template=template, mode=mode, cache=None)
    assert "Crafter" in annot.prompt(WOOD) and "NetHack" not in annot.prompt(WOOD)
    annot.submit([WOOD, TABLE, SAPLING, NOTHING, COW, HURT])
    assert annot.wait(30) and annot.counts["unparseable"] == 0
    assert [annot.get(m) for m in (WOOD, TABLE, SAPLING, NOTHING, COW, HURT)] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    goal = MessageAnnotator(service, template=template, mode=mode, cache=None, goal="make stone pickaxe")
    assert "Goal: make stone pickaxe" in goal.prompt(WOOD)
    goal.submit([WOOD, SAPLING])
    assert goal.wait(30) and (goal.get(WOOD), goal.get(SAPLING)) == (1.0, 0.0)   # a sapling is off that path
    pairs = PairAnnotator(service, template="crafter_pref", mode=mode, cache=None)
    pairs.submit([PairAnnotator.make_pair(WOOD, NOTHING), PairAnnotator.make_pair(COW, HURT)])
    assert pairs.wait(30)
    assert pairs.get(PairAnnotator.make_pair(WOOD, NOTHING)) == (1.0 if WOOD < NOTHING else 0.0)
    assert pairs.get(PairAnnotator.make_pair(COW, HURT)) == 0.5


def test_knowledge_controls_answer_the_crafter_prompts():
    from llmguide.envs.crafter.messages import ACHIEVEMENT_NAMES, SIGHTS, Change, render
    from llmguide.llm.backends.counterfactual import CounterfactualLM
    from llmguide.methods.oni.prompts import template

    oracle_lm = OracleLM("crafter", answerers=[ONIOracleAnswers(CrafterOracle())])
    messages = [render(Change(achievements=(a,))) for a in ACHIEVEMENT_NAMES]   # 22 helpful
    messages += [render(Change(failed=True, seen=(k,))) for k in SIGHTS] + [render(Change(seen=(k,))) for k in SIGHTS]
    messages = [messages[i] for i in np.random.default_rng(0).permutation(len(messages))]   # a run's mixed order
    prompts = [template("crafter_label_short").render(message=m) for m in messages]
    truth = np.array([helpful(CrafterOracle(), m) for m in messages])

    def yes(kind: str) -> np.ndarray:
        lm = oracle_lm if kind == "oracle" else CounterfactualLM(kind, oracle_lm, seed=0)
        return np.array([row[0] > row[1] for row in lm.score(prompts, [[" yes", " no"]] * len(prompts))])

    assert (yes("oracle") == truth).all() and truth.mean() == pytest.approx(22 / len(messages))
    assert yes("constant").all()   # every message helpful: a pure message-count bonus
    shuffled = yes("shuffled")     # the oracle's rate, unrelated to the message
    assert abs(shuffled.mean() - truth.mean()) < 0.2 and (shuffled != truth).mean() > 0.2


def test_ranking_reward_is_never_negative_so_ending_the_episode_never_pays(service):
    msgs = [WOOD, TABLE, NOTHING, COW]

    def rewards(clip_min):
        module = ONIRanking(PairAnnotator(service, template="crafter_pref", cache=None), 1, beta=0.0,
                            background=False, clip_min=clip_min, message_key="message")
        module.raw_rewards = lambda m: np.array([{NOTHING: 0.0, COW: 0.6, TABLE: 1.0, WOOD: 1.4}[x] for x in m])
        return module.compute(batch_of([[{"message": m}] for m in msgs]))[:, 0]

    unclipped = rewards(None)   # the default threshold (-0.5) keeps z in (-0.5, 0): "You see a cow." pays < 0
    assert unclipped[msgs.index(COW)] < 0
    clipped = rewards(0.0)
    assert np.all(clipped >= 0) and clipped[msgs.index(COW)] == 0.0 and clipped[msgs.index(WOOD)] > 0
    cfg = load_config(["env=craftax", "method=oni_ranking"])
    assert cfg.method.clip_min == 0.0   # the default, on every env


@pytest.mark.parametrize("env,num_envs", [("craftax", 4), ("crafter", 2)])
def test_oni_retrieval_with_oracle_labels_trains_on_the_message_line(tmp_path, monkeypatch, env, num_envs):
    from llmguide.pipelines import run

    monkeypatch.setenv("LLMGUIDE_CACHE_DIR", str(tmp_path / "cache"))
    cfg = load_config([f"env={env}", "method=oni_retrieval", "llm=oracle", f"num_envs={num_envs}",
                       "agent.num_steps=32", "agent.hidden=32", "agent.update_epochs=1", "total_steps=256",
                       "env.max_steps=100", "eval.episodes=0", "progress=false", f"run.dir={tmp_path}", "run.name=oni"])
    assert run("train", cfg) == 0
    state = torch.load(tmp_path / "oni" / "checkpoints" / "latest.pt", weights_only=False)["agent"]
    labels = state["reward_modules"][0]["state"]["annotator"]["labels"]
    assert NOTHING in labels and "" not in labels   # the message line, not the caption ("You see ... You face ...")
    assert not any(m.startswith("You see") and "You face" in m for m in labels)
    oracle = CrafterOracle()
    assert all(v == float(helpful(oracle, m)) for m, v in labels.items())
    records = [json.loads(x) for x in (tmp_path / "oni" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["lm/annot_duplicate_requests"] == 0
