"""Counterfactual LMs (llm=random|shuffled|constant) and the wrong-target oracle: valid answers in the
oracle's format with the knowledge taken out, seeded, matched marginal rates."""

from __future__ import annotations

import numpy as np
import pytest

from llmguide.core.errors import LLMUnavailableError
from llmguide.llm.backends.counterfactual import CounterfactualLM
from llmguide.llm.backends.oracle import MISS_SCORE, OracleLM
from llmguide.llm.factory import make_llm
from llmguide.pipelines import load_config


class GoodWord:
    """A toy answerer: "yes" exactly when the message contains "good" (the ground truth)."""

    name = "toy"

    def answer(self, prompt: str) -> str | None:
        if "Message:" not in prompt:
            return None
        return "yes" if "good" in prompt.split("Message:")[-1] else "no"

    def generate(self, prompt: str) -> str | None:
        answer = self.answer(prompt)
        return None if answer is None else f"<answer>{answer}</answer>"

    def score(self, prompt: str, candidates):
        answer = self.answer(prompt)
        return None if answer is None else [0.0 if c.strip() == answer else MISS_SCORE for c in candidates]


def _messages(n: int, rate: float = 0.3, seed: int = 12345) -> tuple[list[str], np.ndarray]:
    truth = np.random.default_rng(seed).random(n) < rate
    return [f"Message: event {i} {'good' if t else 'bad'}" for i, t in enumerate(truth)], truth


def _lm(kind: str, seed: int = 0, **kw) -> CounterfactualLM:
    return CounterfactualLM(kind, OracleLM("minihack", answerers=[GoodWord()]), seed=seed, **kw)


def _yes(lm, prompts, mode: str) -> np.ndarray:
    if mode == "score":
        rows = lm.score(prompts, [[" yes", " no"]] * len(prompts))
        return np.array([r[0] > r[1] for r in rows])
    return np.array(["yes" in c.text for c in lm.generate(prompts)])


def test_the_oracle_knows_the_toy_truth() -> None:
    prompts, truth = _messages(200)
    oracle = OracleLM("minihack", answerers=[GoodWord()])
    assert (_yes(oracle, prompts, "generate") == truth).all()


@pytest.mark.parametrize("mode", ["score", "generate"])
def test_random_says_yes_at_its_rate_whatever_the_message(mode) -> None:
    prompts, truth = _messages(4000)
    lm = _lm("random", positive_rate=0.3)
    yes = _yes(lm, prompts, mode)
    assert abs(yes.mean() - 0.3) < 0.03
    assert lm.io_stats()["oracle_yes_rate"] == pytest.approx(truth.mean())
    assert abs(yes[truth].mean() - yes[~truth].mean()) < 0.06   # no relation to the truth


@pytest.mark.parametrize("mode", ["score", "generate"])
def test_shuffled_keeps_the_oracle_rate_and_drops_the_relation(mode) -> None:
    prompts, truth = _messages(4000, rate=0.3)
    lm = _lm("shuffled", seed=1)
    yes = _yes(lm, prompts, mode)
    assert abs(yes.mean() - truth.mean()) < 0.03
    assert abs(yes[truth].mean() - yes[~truth].mean()) < 0.06
    assert lm.io_stats()["answer_yes_rate"] == pytest.approx(yes.mean())
    assert lm.io_stats()["oracle_yes_rate"] == pytest.approx(truth.mean())   # the oracle on the same queries


def test_shuffled_follows_an_oracle_rate_that_changes_over_the_run() -> None:
    """An agent that makes progress gets more helpful messages later: the oracle says yes to 10% of the first
    half and 50% of the second.  Drawn among the recent queries the control's rate is the oracle's, and its
    answers agree with the oracle's no more than two independent draws at these rates; drawn from the whole
    past (window 0), early answers weigh more and the rate falls short."""
    first, truth1 = _messages(2000, rate=0.1, seed=1)
    second, truth2 = _messages(2000, rate=0.5, seed=2)
    prompts = first + [p.replace("event", "later") for p in second]
    truth = np.concatenate([truth1, truth2])
    rates = {}
    for window in (128, 0):
        lm = _lm("shuffled", seed=3, window=window)
        yes = _yes(lm, prompts, "score")
        rates[window] = yes.mean()
        if window:
            chance = np.mean([(a == b) for a, b in zip(yes[:2000], np.random.default_rng(0).permutation(truth[:2000]),
                                                       strict=True)])
            assert lm.io_stats()["answer_agreement"] == pytest.approx((yes == truth).mean())
            assert abs((yes[:2000] == truth[:2000]).mean() - chance) < 0.05
    assert abs(rates[128] - truth.mean()) < 0.03
    assert rates[0] < truth.mean() - 0.05


def test_same_prompt_same_answer_and_the_seed_matters() -> None:
    prompts, _ = _messages(300)
    a = _yes(_lm("random", seed=0), prompts, "score")
    lm = _lm("random", seed=0)
    first = _yes(lm, prompts, "score")
    assert (first == _yes(lm, prompts, "score")).all() and (first == a).all()
    assert (a != _yes(_lm("random", seed=5), prompts, "score")).any()


def test_constant_says_yes_ties_and_ranks_every_goal_alike() -> None:
    prompts, _ = _messages(50)
    lm = _lm("constant")
    assert _yes(lm, prompts, "generate").all()
    pref = lm.score(["A: x\nB: y"], [["A > B", "B > A", "A = B"]])[0]
    assert pref[2] == 0.0 and pref[0] == pref[1] == MISS_SCORE
    assert lm.score(["Caption: You see tree."], [["a", "b", "c"]]) == [[0.0, 0.0, 0.0]]


def test_random_preferences_tie_at_the_tie_rate() -> None:
    lm = _lm("random", tie_rate=0.25)
    rows = lm.score([f"A: a{i}\nB: b{i}" for i in range(4000)], [["A > B", "B > A", "A = B"]] * 4000)
    picks = np.array([int(np.argmax(r)) for r in rows])
    assert abs((picks == 2).mean() - 0.25) < 0.03
    assert abs((picks == 0).mean() - (picks == 1).mean()) < 0.05


def test_random_ranks_goals_at_random_but_the_oracle_ranks_the_feasible_first() -> None:
    caption = "Caption: You see tree, grass. You face tree."
    oracle = OracleLM("crafter")
    goals = oracle.oracle.goals
    truth = oracle.score([caption], [goals])[0]
    assert truth[goals.index("collect wood")] == 0.0 and truth[goals.index("make iron sword")] == MISS_SCORE
    lm = CounterfactualLM("random", oracle, seed=0)
    tops = [int(np.argmax(lm.score([f"{caption} {i}"], [goals])[0])) for i in range(300)]
    assert len(set(tops)) > 15   # every goal comes first sometimes


def test_a_program_has_no_counterfactual(program_oracle) -> None:
    lm = CounterfactualLM("random", program_oracle)
    with pytest.raises(LLMUnavailableError, match="no counterfactual program"):
        lm.generate(["def potential(obs, caption) ..."])


@pytest.mark.parametrize("kind", ["random", "shuffled", "constant"])
def test_every_counterfactual_is_a_config_choice(kind) -> None:
    cfg = load_config(["env=crafter", "method=ellm", f"llm={kind}", "llm.seed=3", "llm.positive_rate=0.2"])
    lm = make_llm(cfg.llm, "crafter", actions="text")
    assert isinstance(lm, CounterfactualLM) and lm.kind == kind and lm.positive_rate == 0.2
    assert lm.model_id.endswith("seed3") and "text" in lm.model_id
    assert "chop tree" in lm.oracle.oracle.goals   # the text-action oracle underneath


@pytest.mark.parametrize("kind", ["random", "shuffled"])
def test_a_controls_draws_follow_the_run_seed(kind) -> None:
    """Each seed of a study draws its own control (a fixed llm.seed gave all five seeds one labeller: the
    random labeller at positive_rate 0.30 said yes to 0.26-0.27 of messages on every seed)."""
    prompts, _ = _messages(400)
    answers = []
    for seed in (1, 2):
        cfg = load_config(["env=minihack", "method=oni_retrieval", f"llm={kind}", f"seed={seed}"])
        assert cfg.llm.seed == seed
        answers.append(_yes(_lm(kind, seed=int(cfg.llm.seed)), prompts, "score"))
    assert (answers[0] != answers[1]).any()


def test_positive_rate_out_of_range_is_a_config_error() -> None:
    from llmguide.core.errors import ConfigError

    with pytest.raises(ConfigError, match="llm.positive_rate"):
        load_config(["llm=random", "llm.positive_rate=1.5"])


def test_wrong_target_oracle_answers_for_the_other_task() -> None:
    from llmguide.envs import get_oracle
    from llmguide.methods.bk.oracle import BKOracleAnswers

    far, red, blue = "You see a wall 2 steps forward", "You see a red ball 1 step forward", \
        "You see a blue box 1 step forward"
    near_red = f"Segment A:\nStep 1: {far}. You choose the action: go forward.\nCurrent observation: {red}.\n\n" \
               f"Segment B:\nStep 1: {far}. You choose the action: go forward.\nCurrent observation: {blue}."
    right = BKOracleAnswers(get_oracle("babyai"), "go to the red ball").generate(near_red)
    wrong = BKOracleAnswers(get_oracle("babyai"), "go to the blue box").generate(near_red)
    assert right.endswith("[Rank] A > B") and wrong.endswith("[Rank] B > A")


@pytest.mark.parametrize("llm", ["oracle", "random"])
def test_ellm_runs_unchanged_on_a_counterfactual_lm_over_the_open_vocabulary(tmp_path, llm) -> None:
    import json

    from llmguide.pipelines import run

    cfg = load_config(["env=crafter", "env.actions=text", "method=ellm", f"llm={llm}", "method.vocabulary=actions",
                       "total_steps=256", "num_envs=2", "agent.num_steps=64", "eval.episodes=0", "progress=false",
                       "log_every=64", f"run.dir={tmp_path}", "run.name=r"])
    assert run("train", cfg) == 0
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "ellm/answered" in r][-1]
    assert last["ellm/answered"] > 0
    if llm == "oracle":   # the oracle suggests only feasible achievement actions, never "move left"
        assert last["ellm/good"] == 1.0 and last["ellm/impossible"] == 0.0
    else:                 # a random 5 of the 139 action strings are mostly not achievements
        assert last["ellm/impossible"] > 0.5


def test_the_bk_code_oracle_program_reads_only_the_image_and_the_wrong_target_values_the_other_object() -> None:
    """As the reference's programs, the oracle's never sees the mission: the target is fixed when it is written
    (the run's task, or ``llm.target``'s for the wrong-knowledge control), so obs['vector'] changes nothing."""
    from minigrid.core.constants import COLOR_TO_IDX

    from llmguide.core.errors import ConfigError
    from llmguide.envs import get_oracle
    from llmguide.envs.babyai.env import mission_bow
    from llmguide.methods.bk.oracle import BKOracleAnswers

    def phi(mission: str, image: np.ndarray, vector: np.ndarray) -> float:
        code = BKOracleAnswers(get_oracle("babyai"), mission).generate("def potential(obs, caption) ...")
        assert "vector" not in code.partition("def potential")[2]
        namespace: dict = {}
        exec(code.strip("`").removeprefix("python\n"), namespace)  # noqa: S102 - our own ground-truth program
        return namespace["potential"]({"image": image, "vector": vector}, "")

    red_task, blue_task = (np.concatenate([np.zeros(4), mission_bow(m)]) for m in ("go to the red ball", "go to the blue box"))
    image = np.zeros((20, 7, 7))
    image[6, 3, 3] = image[11 + COLOR_TO_IDX["red"], 3, 3] = 1.0     # a red ball 3 steps ahead
    for vector in (red_task, blue_task, np.zeros_like(red_task)):
        assert phi("go to the red ball", image, vector) == 0.25 and phi("go to the blue box", image, vector) == -1.0
    image[7, 3, 4] = image[11 + COLOR_TO_IDX["blue"], 3, 4] = 1.0    # and a blue box
    assert phi("go to the red ball", image, red_task) == 0.25
    assert phi("go to the blue box", image, red_task) == 0.5 - 4 / 12   # 3 ahead, 1 right
    image[4, 2, 3] = image[11 + COLOR_TO_IDX["grey"], 2, 3] = 1.0    # a grey door 4 steps ahead (type 4)
    assert phi("go to the grey door", image, red_task) == 0.5 - 4 / 12
    for mission in ("pick up the red ball", "go to the red thing"):   # go-to missions over known objects only
        with pytest.raises(ConfigError, match="env.task"):
            BKOracleAnswers(get_oracle("babyai"), mission)


def test_the_ray_lm_actor_refuses_ground_truth_answerers_only_for_ground_truth_backends(monkeypatch) -> None:
    from llmguide.core.errors import ConfigError
    from llmguide.distributed import lm as actor_module
    from llmguide.pipelines.services import make_run_lm

    monkeypatch.setattr(actor_module, "actor_lm", lambda *args: "the actor's client")   # no Ray cluster here
    answerers = [GoodWord()]
    with pytest.raises(ConfigError, match="llm.actor"):
        make_run_lm(load_config(["env=crafter", "llm=oracle", "llm.actor=true"]), answerers)
    # a real LM ignores the method's answerers, so it may live in the shared actor (ONI passes them always)
    assert make_run_lm(load_config(["env=crafter", "llm=embedded", "llm.actor=true"]), answerers) == "the actor's client"


def test_a_controls_rates_reach_the_runs_lm_metrics() -> None:
    """The report shows a control's yes rate beside the oracle's own rate on the same queries (lm_stats.json):
    a shuffled control matches the latter by construction, so a gap to the oracle arm's rate is the queries'."""
    from llmguide.llm.service.core import LLMService

    prompts, truth = _messages(400, rate=0.3)
    with LLMService(_lm("shuffled", seed=2)) as service:
        futures = [service.submit_generate(p, max_tokens=8) for p in prompts]
        yes = np.array(["yes" in f.result(timeout=30).text for f in futures])
        m = service.lm_metrics()
    assert m["lm/answer_yes_rate"] == pytest.approx(yes.mean())
    assert m["lm/oracle_yes_rate"] == pytest.approx(truth.mean())
    assert 0.0 <= m["lm/answer_agreement"] <= 1.0
