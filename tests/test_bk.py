"""BK: shaping over transition potentials, the BK-Code loop, BK-Pref labels + Bradley-Terry, BK-Goal."""

from __future__ import annotations

import json
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import pytest

from llmguide.core.errors import ConfigError
from llmguide.data import Episode, EpisodeDataset, EpisodeRecorder, EpisodeWriter
from llmguide.envs.babyai.env import ACTION_STRINGS, BabyAIText
from llmguide.llm.base import Completion, LanguageModel
from llmguide.methods import bk
from llmguide.pipelines import load_config
from llmguide.rewards.base import TransitionBatch
from llmguide.sandbox import Sandbox, SandboxLimits


class ReplayLM(LanguageModel):
    """Answers from a list of hand-written texts (or a function of the prompt), recording prompts."""

    backend = model_id = "replay"

    def __init__(self, answers):
        self.answers, self.prompts = answers, []

    def generate(self, prompts: Sequence[str], **_) -> list[Completion]:
        out = []
        for p in prompts:
            self.prompts.append(p)
            text = self.answers(p) if callable(self.answers) else self.answers[min(len(self.prompts) - 1,
                                                                                  len(self.answers) - 1)]
            out.append(Completion(text=text))
        return out

    def score(self, contexts, candidates, *, normalize=False):
        raise NotImplementedError


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    envs = gym.vector.SyncVectorEnv([lambda: BabyAIText("GoToLocal", max_steps=12) for _ in range(2)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    rec = EpisodeRecorder(envs, EpisodeWriter(root))
    rec.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(60):
        rec.step(rng.integers(0, 6, 2))
    rec.close()
    return EpisodeDataset(root).episodes()


# --- shaping ------------------------------------------------------------------------------------
def test_transition_shaping_is_exact_across_rollouts_and_episode_ends():
    phi = {"a": 1.0, "b": 2.0, "c": 4.0, "d": 8.0}
    module = bk.TransitionPotentialShaping(lambda obs, infos, acts: np.array([phi[i["caption"]] for i in infos]),
                                           gamma=0.9)
    # one env: states reached a b | c(done) | d ; rollout 1 = [a, b], rollout 2 = [c (episode ends), d]
    def batch(caps, dones):
        n = len(caps)
        return TransitionBatch(obs={"x": np.zeros((n, 1, 1))}, actions=np.zeros((n, 1), int),
                               next_obs={"x": np.zeros((n, 1, 1))}, rewards=np.zeros((n, 1)),
                               terminated=np.array(dones)[:, None], infos=[[{"caption": c}] for c in caps])
    f1 = module.compute(batch(["a", "b"], [False, False]))[:, 0]
    f2 = module.compute(batch(["c", "d"], [True, False]))[:, 0]
    # Φ(s0) = 0 (no incoming transition), terminal Φ masked, next episode starts from Φ = 0 again
    np.testing.assert_allclose(f1, [0.9 * 1 - 0, 0.9 * 2 - 1], rtol=1e-6)
    np.testing.assert_allclose(f2, [0.0 - 2, 0.9 * 8 - 0], rtol=1e-6)
    # telescoping: the discounted shaping return of the finished episode is -Φ(s0) = 0
    ep = np.concatenate([f1, f2[:1]])
    assert abs(sum(0.9 ** t * f for t, f in enumerate(ep))) < 1e-5
    assert module.state_dict()["carry"] == [8.0]


def test_normalised_shaping_divides_by_running_std_of_discounted_phi_and_telescopes():
    rng = np.random.default_rng(0)
    values = rng.normal(3.0, 2.0, size=(64, 2))
    calls = iter([values[:32].reshape(-1), values[32:].reshape(-1)])
    module = bk.TransitionPotentialShaping(lambda obs, infos, acts: next(calls), gamma=0.99, normalize=True,
                                           scale=2.0)

    def batch(n):
        return TransitionBatch(obs={"x": np.zeros((n, 2, 1))}, actions=np.zeros((n, 2), int),
                               next_obs={"x": np.zeros((n, 2, 1))}, rewards=np.zeros((n, 2)),
                               terminated=np.zeros((n, 2), bool), infos=[[{}, {}] for _ in range(n)])
    module.compute(batch(32))
    f = module.compute(batch(32))
    # the reference's RewardForwardFilter: R_t = gamma R_{t-1} + Phi_t per env, never reset
    sums, acc = [], np.zeros(2)
    for row in values:
        acc = acc * 0.99 + row
        sums.append(acc.copy())
    std = np.std(np.array(sums))                          # running std over all 128 sums (up to the 1e-4 prior)
    factor = module.last_stats["phi_factor"]
    assert abs(factor - 2.0 / std) / factor < 1e-3
    # within a rollout Phi(s) and Phi(s') share one factor: F sums (discounted) to the endpoint potentials
    expected = 0.99 * values[32:] - np.vstack([values[31:32], values[32:-1]])
    np.testing.assert_allclose(f, expected * factor, rtol=1e-4)
    state = module.state_dict()
    clone = bk.TransitionPotentialShaping(lambda *a: None, 0.99, normalize=True)
    clone.load_state_dict(state)
    assert clone.state_dict() == state


# --- BK-Code ------------------------------------------------------------------------------------
GOOD = ("```python\nimport re\ndef potential(obs, caption):\n"
        "    return (1.0 if re.search('ball', caption) else 0.0) + len(caption) / 1000.0\n```")
CONSTANT = "```python\ndef potential(obs, caption):\n    return 0.25\n```"
BETTER = ("Improved:\n```python\nimport numpy as np\ndef potential(obs, caption):\n"
          "    return 0.5 * caption.count('ball') + 0.01 * float(np.sum(obs['vector'][:4]))\n```")
BROKEN = "```python\ndef potential(obs, caption):\n    return obs['missing']\n```"
HOSTILE = "```python\nimport os\ndef potential(obs, caption):\n    os.system('rm -rf /')\n```"
LOOP = "```python\ndef potential(obs, caption):\n    while True:\n        pass\n```"


def test_code_loop_fixes_then_improves_and_keeps_the_last_good_program(tmp_path, episodes):
    lm = ReplayLM(["I cannot write code.", BROKEN, GOOD, BETTER])
    states = bk.sample_states(episodes, 6, np.random.default_rng(0))
    res = bk.write_potential_code(lm, states, Sandbox(SandboxLimits(timeout=10)), tmp_path, iterations=2,
                                  fix_retries=2)
    assert res.ok and res.lm_calls == 4 and "0.5 * caption.count" in res.code
    steps = [json.loads(ln) for ln in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [s["ok"] for s in steps] == [False, False, True, True]
    assert "no ```python block" in steps[0]["error"] and "KeyError" in steps[1]["error"]
    assert "KeyError" in lm.prompts[2] and "caption" in lm.prompts[3]       # fix prompt, then improve prompt
    assert (tmp_path / "final.py").read_text() == res.code
    assert json.loads((tmp_path / "summary.json").read_text())["failed_steps"] == 2


def test_code_loop_rejects_a_constant_program_with_feedback(tmp_path, episodes):
    lm = ReplayLM([CONSTANT, GOOD])
    states = bk.sample_states(episodes, 6, np.random.default_rng(0))
    res = bk.write_potential_code(lm, states, Sandbox(SandboxLimits(timeout=10)), tmp_path, iterations=1,
                                  fix_retries=1)
    assert res.ok and [s["ok"] for s in res.steps] == [False, True]
    assert "same value" in res.steps[0]["error"] and "same value" in lm.prompts[1]


def test_code_loop_with_only_hostile_programs_falls_back_to_zero(tmp_path, episodes):
    lm = ReplayLM([HOSTILE, LOOP, BROKEN])
    states = bk.sample_states(episodes, 4, np.random.default_rng(1))
    res = bk.write_potential_code(lm, states, Sandbox(SandboxLimits(timeout=2, timeout_per_item=0)), tmp_path,
                                  iterations=1, fix_retries=2)
    assert not res.ok and res.code == bk.ZERO_PROGRAM and res.lm_calls == 3
    assert not (tmp_path / "final.py").exists()                                 # nothing to train on
    assert json.loads((tmp_path / "summary.json").read_text())["iterations_valid"] == 0
    errors = [s["error"] for s in res.steps]
    assert "forbidden import 'os'" in errors[0] and "timed out" in errors[1] and "KeyError" in errors[2]


def test_code_loop_under_a_counterfactual_lm_names_bk_s_own_control(tmp_path, episodes, program_oracle):
    """The kernel's counterfactual LMs have no program; BK's code loop adds its own control to the refusal."""
    from llmguide.core.errors import LLMUnavailableError
    from llmguide.llm.backends.counterfactual import CounterfactualLM

    lm = CounterfactualLM("random", program_oracle)
    states = bk.sample_states(episodes, 2, np.random.default_rng(0))
    with pytest.raises(LLMUnavailableError, match="no counterfactual program.*method=bk_random_phi"):
        bk.write_potential_code(lm, states, Sandbox(SandboxLimits(timeout=2)), tmp_path, iterations=1, fix_retries=0)


def test_code_loop_with_the_real_embedded_lm_terminates(tmp_path, episodes):
    from llmguide.llm.backends.embedded import EmbeddedLM

    lm = EmbeddedLM()
    try:
        states = bk.sample_states(episodes, 4, np.random.default_rng(2))
        res = bk.write_potential_code(lm, states, Sandbox(SandboxLimits(timeout=10)), tmp_path, iterations=1,
                                      fix_retries=0, max_tokens=32)
    finally:
        lm.close()
    assert res.lm_calls == 1 and len(res.steps) == 1 and res.steps[0]["answer"] is not None
    assert res.ok == res.steps[0]["ok"]
    assert (tmp_path / "final.py").exists() == res.ok and (tmp_path / "steps.jsonl").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["iterations"] == 1 and summary["iterations_valid"] == int(res.ok)


def test_code_potential_shaping_on_real_transitions(tmp_path, episodes):
    ep = episodes[0]
    rows = {k: v[1:] for k, v in ep.obs.items()}
    infos = [{"caption": c} for c in ep.captions[1:]]
    good = bk.CodePotential(bk.extract_code(GOOD), Sandbox(SandboxLimits(timeout=10)))
    phi = good(rows, infos, ep.actions)
    np.testing.assert_allclose(phi, [(1.0 if "ball" in c else 0.0) + len(c) / 1000 for c in ep.captions[1:]])
    log = tmp_path / "errors.jsonl"
    bad = bk.CodePotential(bk.extract_code(HOSTILE), Sandbox(SandboxLimits(timeout=10)), error_log=log)
    assert not bad(rows, infos, ep.actions).any()
    assert bad.metrics()["sandbox_failed_calls"] == 1 and "forbidden import" in log.read_text()


def test_extract_code_variants():
    assert bk.extract_code(GOOD).startswith("import re\ndef potential")
    assert bk.extract_code("import math\ndef potential(obs, caption):\n    return 1.0") is not None
    assert bk.extract_code("no code here") is None


# --- BK-Pref ------------------------------------------------------------------------------------
def _judge(prompt: str) -> str:
    """A rule-following judge: prefer the segment whose last observation shows more balls."""
    a, b = prompt.split("Segment B:")
    a_last = a.split("Current observation:")[-1]
    b_last = b.split("Current observation:")[-1].split("Answer with")[0]
    na, nb = a_last.count("ball"), b_last.count("ball")
    if "key" in a_last and "key" in b_last and na == nb:
        return "hmm, not sure"
    return "[Thoughts] ok\n[Rank] " + ("A = B" if na == nb else "A > B" if na > nb else "B > A")


def test_preference_labels_are_saved_with_raw_answers(tmp_path, episodes):
    summary = bk.label_preferences(ReplayLM(_judge), episodes, 40, tmp_path, action_names=ACTION_STRINGS,
                                   batch_size=7)
    labels = bk.read_labels(tmp_path / "labels.jsonl")
    assert len(labels) == 40 and summary["usable"] == 40 - summary["unparsed"]
    for r in labels:
        assert r["answer"] and r["label"] == {"A": 0.0, "B": 1.0, "=": 0.5, None: -1.0}[r["choice"]]
    assert summary["A"] + summary["B"] + summary["="] + summary["unparsed"] == 40


def test_bradley_terry_fit_learns_the_judges_ranking(tmp_path, episodes):
    bk.label_preferences(ReplayLM(_judge), episodes, 160, tmp_path, batch_size=16, seed=3)
    labels = bk.read_labels(tmp_path / "labels.jsonl")
    info = bk.fit_preference_model(episodes, labels, tmp_path / "m.pt", epochs=15, seed=0)
    assert info["usable"] == sum(r["label"] >= 0 for r in labels)
    assert info["train_accuracy"] > 0.8
    pot = bk.PreferencePotential(tmp_path / "m.pt")
    obs = {k: np.stack([v[:3], v[:3]], axis=1) for k, v in episodes[0].obs.items()}   # (T=3, N=2, ...)
    assert pot(obs).shape == (3, 2)
    # no usable label -> Φ = 0, stated in the model file
    info0 = bk.fit_preference_model(episodes, [dict(labels[0], label=-1.0)], tmp_path / "z.pt")
    assert info0["usable"] == 0 and not bk.PreferencePotential(tmp_path / "z.pt")(obs).any()


# --- BK-Goal ------------------------------------------------------------------------------------
def test_goal_library_and_calibrated_potential(tmp_path, episodes):
    from llmguide.llm.embeddings import SentenceEmbedder

    answers = ["- go to the red ball\n- pick up a key", "garbage without bullets",
               "- Go to the red ball.\n- open the door\n- go to a box"]
    lib = bk.build_goal_library(ReplayLM(answers), episodes, tmp_path, iterations=3, action_names=ACTION_STRINGS)
    assert lib["goals"] == ["go to the red ball", "pick up a key", "open the door", "go to a box"]
    assert lib["failed_answers"] == 1 and len(lib["keys"]) == 2
    assert len((tmp_path / "answers.jsonl").read_text().splitlines()) == 3
    pot = bk.GoalPotential(lib, SentenceEmbedder(), ACTION_STRINGS, threshold=0.6)
    infos = [{"caption": "You see a red ball 1 step forward", "events": ["go to the red ball"]},
             {"caption": "You see a wall 2 steps forward", "events": []}]
    misses = pot.metrics()["embed_misses"]
    phi = pot({}, infos, np.array([2, 0]))
    assert phi[0] > 0.6 and phi[1] == 0.0
    assert pot.metrics()["embed_misses"] == misses + 4      # 2 captions + 2 transition texts, all new
    assert np.array_equal(pot({}, infos, np.array([2, 0])), phi)
    assert pot.metrics()["embed_misses"] == misses + 4 and pot.metrics()["embed_hit_rate"] > 0
    caps, texts = bk.dataset_transition_texts(episodes, ACTION_STRINGS, 200, np.random.default_rng(0))
    calib = bk.calibrate_threshold(pot, caps, texts, fire_rate=0.1, floor=0.0)
    assert 0.05 <= calib["fire_rate"] <= 0.2 + 1e-9
    empty = bk.GoalPotential({"goals": []}, SentenceEmbedder())
    assert not empty({}, infos, np.array([0, 0])).any()


def test_goal_template_example_names_no_babyai_target_and_echoes_are_dropped(tmp_path, episodes):
    """BK-Goal's worked example must come from outside the benchmark (the v1 template's example,
    "go to the red ball", was GoToLocal-RedBall-S20's own target: the LM copied it into the library)."""
    import re

    from minigrid.core.constants import COLOR_NAMES

    from llmguide.envs import make_env
    from llmguide.envs.babyai.tasks import BIG_ROOM_TASKS
    from llmguide.methods.bk.babyai import mission_target
    from llmguide.methods.bk.goal import example_goals
    from llmguide.methods.bk.prompts import template as load_template

    template = load_template("bk_goal")
    assert template.number >= 3
    static = template.render(window="", goals="").lower()
    targets = []
    for task in (t for t in BIG_ROOM_TASKS if t.startswith("GoToLocal")):
        env = make_env({"name": "babyai", "task": task}, 0)
        try:
            targets.append(mission_target(env.reset(seed=0)[1]["mission"]))
        finally:
            env.close()
    assert targets == ["red ball", "purple ball", "red key", "purple key"]
    words = set(re.findall(r"[a-z]+", static))
    assert not any(t in static for t in targets)
    assert not words & {*COLOR_NAMES, "ball", "key", "box", "door"}          # no BabyAI object at all
    from llmguide.envs.crafter.rules import ACHIEVEMENTS

    assert not words & {w for a in ACHIEVEMENTS for w in a.split("_")[1:]}   # nor a Crafter target
    examples = example_goals(template.body)
    assert examples == {"reach the sink", "reach the fridge", "open the cupboard"}
    answers = ["- reach the fridge\n- Reach the sink.\n- go to the green box", "- open the cupboard"]
    lib = bk.build_goal_library(ReplayLM(answers), episodes, tmp_path, iterations=2, action_names=ACTION_STRINGS)
    assert lib["goals"] == ["go to the green box"]
    assert lib["echoed_example"] == 3 and lib["failed_answers"] == 1 and lib["prompt_version"] == template.version


# --- pipeline config errors -------------------------------------------------------------------------
def test_pipeline_steps_name_missing_inputs(tmp_path):
    from llmguide.methods.bk import recipe as pipe

    cfg = load_config(["env=babyai", "method=bk_code", f"run.dir={tmp_path}"])
    with pytest.raises(ConfigError, match="method.data"):
        pipe.label(cfg)
    with pytest.raises(ConfigError, match="method.labels"):
        pipe.BKRecipe(cfg).check()
    with pytest.raises(ConfigError, match="no BK labels"):
        pipe.build_module(cfg, tmp_path, 0.99)


# --- oracle knowledge and failed labelling ------------------------------------------------------------
def test_oracle_lm_answers_bk_prompts_from_ground_truth(tmp_path, episodes):
    from llmguide.envs import get_oracle
    from llmguide.llm.backends.oracle import OracleLM
    from llmguide.methods.bk.babyai import caption_potential
    from llmguide.methods.bk.oracle import BKOracleAnswers

    lm = OracleLM("babyai", answerers=[BKOracleAnswers(get_oracle("babyai"), "go to the red ball")])
    states = bk.sample_states(episodes, 8, np.random.default_rng(0))
    (answer,) = lm.generate(["... define exactly `def potential(obs, caption):` ..."])
    code = bk.extract_code(answer.text)
    run = Sandbox(SandboxLimits(timeout=20)).evaluate(code, "potential", states)   # the LM arms' sandbox path
    assert run.ok and not run.item_errors and all(-1.0 <= v <= 0.5 for v in run.values)
    near = "Step 1: You see a red ball 4 steps forward. You choose the action: go forward.\n" \
           "Current observation: You see a red ball 1 step forward."
    far = "Step 1: You see a red ball 1 step forward. You choose the action: turn left.\n" \
          "Current observation: You see a wall 2 steps forward."
    (a,) = lm.generate([f"Segment A:\n{far}\n\nSegment B:\n{near}\n\nAnswer with ..."])
    assert a.text.endswith("[Rank] B > A")
    assert caption_potential("You see a red ball 1 step forward", "red ball") > caption_potential("", "red ball")
    (g,) = lm.generate(["What the agent just experienced:\n...\n\nCurrent goal list:\n(empty)\n"])
    assert "- go to the red ball" in g.text.splitlines()


def test_failed_labelling_stops_label_and_train_refuses_it(tmp_path):
    from llmguide.methods.bk import recipe as pipe

    envs = gym.vector.SyncVectorEnv([lambda: BabyAIText("GoToLocal", max_steps=8)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    rec = EpisodeRecorder(envs, EpisodeWriter(tmp_path / "data" / "dataset"))
    rec.reset(seed=0)
    for a in np.random.default_rng(0).integers(0, 3, 40):
        rec.step(np.array([a]))
    rec.close()
    base = ["env=babyai", "env.task=GoToLocal-RedBall-S20", "llm=oracle", f"run.dir={tmp_path}",
            f"method.data={tmp_path / 'data'}", "run.name=pref"]
    with pytest.raises(bk.LabelingFailed, match="fewer than method.pref.min_usable=1000"):
        pipe.label(load_config([*base, "method=bk_pref", "method.pref.num_pairs=10", "method.pref.min_usable=1000"]))
    assert (tmp_path / "pref" / "bk" / "labels.jsonl").exists()              # the transcript is kept
    assert json.loads((tmp_path / "pref" / "bk" / "failed.json").read_text())["method"] == "bk_pref"
    cfg = load_config(["env=babyai", "method=bk_pref", f"run.dir={tmp_path}", f"method.labels={tmp_path / 'pref'}"])
    with pytest.raises(ConfigError, match="labelling failed"):
        pipe.BKRecipe(cfg).check()
    out = tmp_path / "labels" / "bk"
    out.mkdir(parents=True)
    (out / "manifest.json").write_text(json.dumps({"method": "bk_goal", "failed": "empty goal library"}))
    cfg = load_config(["env=babyai", "method=bk_goal", f"run.dir={tmp_path}", f"method.labels={tmp_path / 'labels'}"])
    with pytest.raises(ConfigError, match="labelling failed"):
        pipe.BKRecipe(cfg).check()
    with pytest.raises(ConfigError, match="labelling failed"):
        pipe.build_module(cfg, tmp_path / "labels", 0.99)
    err = bk.LabelingFailed("bk_pref", "3 usable labels", out)
    assert "bk_pref labelling failed: 3 usable labels" in str(err) and str(out) in str(err)


def test_programs_without_imports_get_the_reference_import_header(tmp_path, episodes):
    from llmguide.methods.bk.code import with_import_header

    code = "def potential(obs, caption):\n    return float(np.sum(obs['image'][6])) + len(caption) / 100\n"
    assert with_import_header(code).startswith("import math") and with_import_header(BETTER) == BETTER
    res = bk.write_potential_code(ReplayLM([f"```python\n{code}```"]), bk.sample_states(
        episodes, 6, np.random.default_rng(0)), Sandbox(SandboxLimits(timeout=10)), tmp_path, iterations=1)
    assert res.ok and "import numpy as np" in res.code


def test_default_sample_is_large_enough_for_a_sparse_potential():
    """A correct Φ that differs from its constant only where the target is in view (1.8 % of GoToLocal-S30's
    states) must not be refused as constant: over 20 labelling seeds, the default sample always sees it
    (64 states, the old default, miss it ~31 % of the time)."""
    n = int(load_config(["method=bk_code"]).method.code.sample_states)
    rng = np.random.default_rng(7)
    seen = rng.random(5000) < 0.018
    episodes = [Episode(obs={"seen": seen[i:i + 100].astype(np.int8).reshape(-1, 1)}, actions=np.zeros(99, int),
                           rewards=np.zeros(99), captions=[""] * 100, events=[[]] * 99)
                for i in range(0, 5000, 100)]
    refused = sum(len({int(o["seen"][0]) for o, _ in bk.sample_states(episodes, n, np.random.default_rng(s))}) == 1
                  for s in range(20))
    assert refused == 0, f"sample_states={n}: a sparse potential looked constant for {refused} of 20 seeds"
