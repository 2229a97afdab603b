"""benchmarks/analyses/glam_prior.py: the prior probe's metrics on a fake LM whose distribution we set; the CUDA refusal."""

from __future__ import annotations

import numpy as np
import pytest

from llmguide.envs.babyai.env import ACTION_STRINGS
from llmguide.llm.base import LanguageModel
from llmguide.methods.glam.policy import HEADER


@pytest.fixture(scope="module")
def prior(load_benchmark):
    return load_benchmark("glam_prior")


class FakeLM(LanguageModel):
    """Scores ``log probs[j]`` for candidate j (plus a constant, which the softmax must ignore)."""

    backend = "fake"

    def __init__(self, probs):
        self.probs = np.asarray(probs, dtype=float)
        self.contexts: list[str] = []

    def generate(self, prompts, **kw):
        raise NotImplementedError

    def score(self, contexts, candidates, *, normalize=False):
        self.contexts += list(contexts)
        assert all(list(c) == [" " + a for a in ACTION_STRINGS] for c in candidates)
        return [list(np.log(self.probs) - 3.0) for _ in contexts]


def test_metrics_on_a_known_distribution(prior):
    probs = np.array([0.1, 0.1, 0.5, 0.1, 0.1, 0.1])
    targets = [0, 2, 2, 5]
    m = prior.prior_metrics(np.log(np.tile(probs, (4, 1))) + 7.0, targets)
    assert m["n"] == 4 and m["chance"] == pytest.approx(1 / 6)
    assert m["top1_agreement"] == pytest.approx(0.5)           # argmax is "go forward" on every row
    assert m["majority_baseline"] == pytest.approx(0.5)        # the bot's most frequent action: 2 of 4
    assert m["mean_p_bot"] == pytest.approx((0.1 + 0.5 + 0.5 + 0.1) / 4)
    assert m["mean_p_bot_se"] == pytest.approx(np.std([0.1, 0.5, 0.5, 0.1], ddof=1) / 2)
    assert m["mean_entropy"] == pytest.approx(-(probs * np.log(probs)).sum())
    fwd, left, drop = (m["per_action"][a] for a in ("go forward", "turn left", "drop"))
    assert fwd == {"bot_count": 2, "recall": 1.0, "mean_p_when_bot": pytest.approx(0.5),
                   "mean_p": pytest.approx(0.5), "lm_argmax_freq": 1.0}
    assert left["recall"] == 0.0 and left["mean_p_when_bot"] == pytest.approx(0.1)
    assert drop["bot_count"] == 0 and drop["recall"] is None and drop["lm_argmax_freq"] == 0.0


def test_metrics_per_row_and_bad_shapes(prior):
    scores = np.log(np.array([[0.7, 0.3], [0.2, 0.8], [0.6, 0.4]]))
    m = prior.prior_metrics(scores, [0, 0, 1], names=["a", "b"])
    assert m["top1_agreement"] == pytest.approx(1 / 3)
    assert m["mean_p_bot"] == pytest.approx((0.7 + 0.2 + 0.4) / 3)
    assert m["mean_logp_bot"] == pytest.approx(np.mean(np.log([0.7, 0.2, 0.4])))
    assert m["per_action"]["a"]["recall"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        prior.prior_metrics(scores, [0, 1])


def test_prompt_variants(prior):
    captions, actions = ["c0", "c1", "c2", "c3"], [2, 0, 1]
    full = prior.prompt_at("go to the red ball", captions, actions, 3, 3, True)
    assert full.startswith(HEADER) and "c0" not in full and "c1" in full and "c3" in full
    assert "Action 0: turn left" in full and "Action 1: turn right" in full and full.endswith("Action 2:")
    one = prior.prompt_at("go to the red ball", captions, actions, 3, 1, False)
    assert HEADER not in one and one.startswith("Goal of the agent: go to the red ball")
    assert "c3" in one and "c2" not in one and one.endswith("Action 0:")
    first = prior.prompt_at("x", captions, actions, 0, 3, True)   # the first step: one observation, no action
    assert "Observation 1" not in first and first.endswith("Action 0:")


def test_probe_on_fake_lm_and_bot_states(prior):
    lm = FakeLM([0.05, 0.05, 0.6, 0.1, 0.1, 0.1])
    states = prior.bot_states("GoToLocal", 12, prior.HELD_OUT_SEED)
    assert len(states) == 12
    prompts = [prior.prompt_at(s["mission"], s["captions"], s["actions"], s["t"], 3, True) for s in states]
    targets = [s["actions"][s["t"]] for s in states]
    m = prior.prior_metrics(prior.score_prompts(lm, prompts, chunk=5), targets)
    assert len(lm.contexts) == 12 and lm.contexts == prompts
    forward = sum(t == 2 for t in targets) / 12
    assert m["top1_agreement"] == pytest.approx(forward)
    assert m["mean_p_bot"] == pytest.approx(np.mean([lm.probs[t] for t in targets]))


def test_episodes_greedy_follow_the_argmax(prior):
    lm = FakeLM([0.9, 0.02, 0.02, 0.02, 0.02, 0.02])   # always "turn left": never succeeds, runs to the limit
    r = prior.run_episodes("GoToLocal", [1, 2], "greedy", lm, k=1, action_list=True)
    assert r["success_rate"] == 0.0 and r["mean_length"] == 64 and r["contexts_scored"] == 128
    rnd = prior.run_episodes("GoToLocal", [1, 2], "random")
    assert rnd["contexts_scored"] == 0 and 1 <= rnd["mean_length"] <= 64


def test_verdict_counts_cells(prior):
    good = {"mean_p_bot": 0.4, "mean_p_bot_se": 0.02, "chance": 1 / 6, "top1_agreement": 0.5, "majority_baseline": 0.4}
    bad = {**good, "mean_p_bot": 0.1, "top1_agreement": 0.1}
    text = prior.verdict({"GoToLocal": {"k3+list": good, "k1+list": bad}})
    assert "better than chance and than the majority" in text and "1/2 (level" in text and "1/2 also beat" in text
    weak = {**good, "top1_agreement": 0.3}   # above chance, below always taking the commonest action
    text = prior.verdict({"GoToLocal": {"a": weak, "b": bad, "c": bad}})
    assert "never better than always taking" in text and "1/3 (level" in text and "0/3 also beat" in text
    assert "is not better than chance" in prior.verdict({"GoToLocal": {"b": bad}})
    # a cell whose p(bot) is no better than the LM's own state-blind average is a constant bias, not knowledge
    per = {"go": {"bot_count": 8, "mean_p": 0.5}, "turn": {"bot_count": 2, "mean_p": 0.5}}
    biased = {**weak, "n": 10, "mean_p_bot": 0.45, "mean_p_bot_se": 0.01, "per_action": per}
    assert prior.blind_p_bot(per, 10) == pytest.approx(0.5)
    assert "not better than a constant bias" in prior.verdict({"GoToLocal": {"a": biased}})
    assert "0/1 beat the LM's own state-blind" in prior.verdict({"GoToLocal": {"a": biased}})


def test_cuda_refused_in_one_line(prior, monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    from llmguide.methods.glam.device import default_dtype, require_device

    assert require_device("cpu") is None and default_dtype("cpu") == "float32"
    assert "CUDA is not available" in require_device("cuda")
    assert prior.main(["--device", "cuda", "--prompts", "1"]) == 2
    out = capsys.readouterr().out.strip()
    assert "\n" not in out and "CUDA" in out


def test_glam_bench_refuses_cuda(load_benchmark, monkeypatch, capsys, tmp_path):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    load_benchmark("harness")   # glam.py is a harness study: it imports the harness beside it
    bench = load_benchmark("glam")
    argv = ["--device", "cuda", "--task", "GoToLocal", "--steps", "100000", "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as stop:
        bench.main(bench.STUDY, argv)
    assert stop.value.code == 2
    captured = capsys.readouterr()
    out = (captured.out + captured.err).strip()
    assert out.count("\n") == 0 and "CUDA is not available" in out


@pytest.mark.slow   # loads Gemma 270M (hf): ~10 s on a quiet box, 80 s on the busy shared one
def test_batched_scoring_matches_sequential():
    """Several prompts of different lengths per forward (methods/glam/batched.py) = one at a time, to 1e-4."""
    torch = pytest.importorskip("torch")
    from llmguide.llm.backends.hf import HFLM
    from llmguide.methods.glam.batched import score_with_hidden
    from llmguide.methods.glam.policy import glam_prompt

    lm = HFLM()
    prompts = [glam_prompt("go to the red ball", ["You see a wall 2 steps forward"], [], ACTION_STRINGS),
               glam_prompt("pick up the key", ["You see a key", "You see a wall 1 step left"], ["turn left"],
                           ACTION_STRINGS, action_list=False),
               "Goal: open the door. Action:"]
    cands = [[" " + a for a in ACTION_STRINGS]] * 3
    with torch.no_grad():
        ref, ref_h = lm.score_with_hidden(prompts, cands)
        got, got_h = score_with_hidden(lm, prompts, cands, batch=2)
        norm, _ = score_with_hidden(lm, prompts, cands, batch=3, normalize=True)
    assert torch.allclose(torch.stack(got), torch.stack(ref), atol=1e-4)
    assert torch.allclose(got_h, ref_h, atol=1e-3)
    lengths = torch.tensor([len(lm._candidate_ids(c)) for c in cands[0]], dtype=torch.float32)
    assert torch.allclose(torch.stack(norm), torch.stack(ref) / lengths, atol=1e-4)
