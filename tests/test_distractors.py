"""env.distractors: a noisy TV on the message line of Crafter and Craftax-Classic (issue 53)."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from llmguide.core.errors import ConfigError
from llmguide.envs import get_oracle, make_vector_env
from llmguide.envs.crafter import distractors as tv
from llmguide.envs.crafter.messages import message_achievements
from llmguide.learners.common import episode_info_metrics
from llmguide.methods.oni.oracle import helpful


def _cfg(name: str, rate: float, **env) -> OmegaConf:
    base = OmegaConf.load(f"src/llmguide/conf/env/{name}.yaml")
    return OmegaConf.merge(base, {"distractors": {"rate": rate}, **env})


def _play(name: str, rate: float, actions: np.ndarray, **env):
    """Messages, observations, rewards and captions of a seeded vector env driven by ``actions`` (T, N)."""
    envs = make_vector_env(_cfg(name, rate, **env), actions.shape[1], seed=3)
    try:
        obs, infos = envs.reset(seed=3)
        out = {"obs": [], "reward": [], "caption": [], "message": [], "share": [], "final": []}
        for a in actions:
            obs, reward, term, trunc, infos = envs.step(a)
            out["obs"].append(np.concatenate([np.ravel(v) for v in obs.values()]))
            out["reward"].append(np.asarray(reward))
            out["caption"].append(list(infos["caption"]))
            out["message"].append([str(m) for m in infos["message"]])
            out["share"].append(np.asarray(infos.get("distractor_share", np.zeros(len(a)))))
            if "final_info" in infos:
                done = np.flatnonzero(infos["_final_info"])
                out["final"] += [(str(infos["final_info"]["message"][i]),
                                  episode_info_metrics({"distractor_share": infos["final_info"]["distractor_share"][i]}))
                                 for i in done] if rate else []
        return out
    finally:
        envs.close()


@pytest.mark.parametrize("name", ["crafter", "craftax"])
def test_the_do_nothing_action_shows_a_new_sight_and_nothing_else_changes(name):
    rng = np.random.default_rng(0)
    noop = tv.distractor_action("primitive")
    actions = rng.integers(0, 17, size=(120, 2))
    actions[rng.random(actions.shape) < 0.4] = noop
    plain, noisy = _play(name, 0.0, actions, max_steps=50), _play(name, 1.0, actions, max_steps=50)
    for key in ("obs", "reward", "caption"):   # the game is the same game
        for a, b in zip(plain[key], noisy[key], strict=True):
            assert np.array_equal(np.asarray(a), np.asarray(b))
    sentences = set(tv.sentence_set(4000, seed=3))
    shown = 0
    for t, (acts, before, after) in enumerate(zip(actions, plain["message"], noisy["message"], strict=True)):
        for i in range(2):
            if t % 50 == 49:   # the episode ended: its last step's message is in final_info
                continue
            if acts[i] == noop:
                assert after[i].startswith(before[i]) and after[i][len(before[i]):].strip() in sentences
                shown += 1
            else:
                assert after[i] == before[i]
    assert shown > 50
    # the share of steps on the distractor action, per episode, reaches the learners' episode records
    assert len(noisy["final"]) == 4 and all(0 < m["charts/distractor_share"] < 1 for _, m in noisy["final"])
    assert len(set(m for t in noisy["message"] for m in t)) > 40   # new sights: a count bonus keeps paying


def test_the_text_action_set_uses_do_nothing_and_rate_is_a_probability():
    from llmguide.envs.crafter.actions import ACTION_STRINGS

    assert ACTION_STRINGS[tv.distractor_action("text")] == "do nothing"
    actions = np.full((200, 4), tv.distractor_action("primitive"))
    half = _play("crafter", 0.5, actions)
    shown = sum(bool(m) and m.split(". ")[-1].rstrip(".") + "." in set(tv.all_sentences())
                for t in half["message"] for m in t)
    assert 300 < shown < 500   # about half of 800 do-nothing steps
    assert np.allclose(half["share"][-1], 1.0)


def test_ground_truth_calls_every_sight_unhelpful_and_the_grammar_is_large():
    sentences = tv.all_sentences()
    assert len(set(sentences)) == len(sentences) == tv.MAX_SIZE >= 4000
    oracle = get_oracle("crafter")
    for sentence in sentences:
        assert message_achievements(sentence) == [] and not helpful(oracle, sentence)
        assert not helpful(oracle, f"You see a cow. {sentence}", "make_wood_pickaxe")
    assert helpful(oracle, "You collect wood.")   # the labeller itself still says yes to progress
    assert tv.sentence_set(10, seed=1) == tv.sentence_set(10, seed=1) != tv.sentence_set(10, seed=2)


@pytest.mark.parametrize(("key", "value"), [("rate", 1.5), ("rate", -0.1), ("size", 0), ("size", 10**6)])
def test_bad_settings_name_their_key(key, value):
    cfg = OmegaConf.merge(_cfg("crafter", 0.5), {"distractors": {key: value}})
    with pytest.raises(ConfigError, match=f"env.distractors.{key}"):
        make_vector_env(cfg, 1, seed=0)


def test_off_by_default_leaves_the_env_unwrapped():
    envs = make_vector_env(OmegaConf.load("src/llmguide/conf/env/crafter.yaml"), 1, seed=0)
    try:
        assert not isinstance(envs, tv.DistractorVector)
    finally:
        envs.close()
