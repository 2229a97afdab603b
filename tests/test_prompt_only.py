"""The prompt-only control (``llm=prompt_only``): answers from the prompt's worked examples and nothing else;
off-domain prompts whose examples teach the format and no answer of the env."""

from __future__ import annotations

import re

import numpy as np
import pytest

from llmguide.core.errors import LLMUnavailableError
from llmguide.llm.backends.prompt_only import PromptOnlyLM
from llmguide.llm.examples import describe, worked_examples

EXAMPLE_ACTIONS = ["chop tree", "chop grass", "drink water", "mine stone", "make wood sword", "eat cow", "place plant"]
CAPTION = "You see grass, stone, table, tree, water. You face tree. You have 4 wood. You feel thirsty."


def _ellm_prompt(name: str, caption: str = CAPTION) -> str:
    from llmguide.envs.crafter.actions import ACTION_STRINGS
    from llmguide.methods.ellm.prompts import template

    return template(name).render(vocabulary=", ".join(ACTION_STRINGS), caption=caption)


def _oracle():
    from llmguide.llm.factory import make_backend

    return make_backend({"backend": "oracle"}, "crafter", actions="text")


def _own_prompt(items: list[list[str]], caption: str = CAPTION) -> str:
    """A user's own few-shot prompt, in no shipped file: its examples name ``items``."""
    shots = "\n\n".join(f"State: example {i}\n" + "\n".join(f"* {x}" for x in xs) for i, xs in enumerate(items))
    return f"Say what to do.\n\n{shots}\n\nState: {caption}\n"


def _items(text: str) -> list[str]:
    return [line[2:] for line in text.splitlines() if line.startswith("- ")]


# --- finding the examples in a prompt ---------------------------------------------------------------
def test_the_shipped_few_shot_prompt_names_its_seven_example_actions():
    found = worked_examples(_ellm_prompt("ellm_actions_listed"))
    assert found.label == "Caption:" and len(found.examples) == 3
    assert found.items == EXAMPLE_ACTIONS
    assert "3 worked example(s) after 'Caption:' naming 7" in describe(_ellm_prompt("ellm_actions_listed"))


def test_zero_shot_and_scoring_prompts_have_no_examples():
    for name in ("ellm_actions_zeroshot", "ellm_actions_score_listed"):
        assert not worked_examples(_ellm_prompt(name))
        assert describe(_ellm_prompt(name)) == "no worked examples (zero-shot)"


def test_a_skeleton_is_not_an_example_program_but_an_example_is():
    from llmguide.methods.bk.code import BABYAI_EXAMPLE, env_notes

    assert worked_examples(env_notes("babyai", "none")).programs == ()
    (program,) = worked_examples(env_notes("babyai", "env")).programs
    assert program.strip() == BABYAI_EXAMPLE.split("```python\n")[1].split("```")[0].strip()


# --- answering from them ---------------------------------------------------------------------------------
def test_a_list_answer_names_only_example_items_as_many_as_the_oracle_gives():
    oracle = _oracle()
    lm = PromptOnlyLM(seed=0, oracle=oracle)
    captions = [CAPTION, "You see cow, grass. You face cow. You have nothing. You feel hungry.",
                "You see diamond, iron, lava. You face iron. You have 1 stone pickaxe.",
                "You see zombie, grass. You face zombie. You have 1 wood sword."]
    for caption in captions:
        prompt = _ellm_prompt("ellm_actions_listed", caption)
        picks = _items(lm.generate([prompt])[0].text)
        truth = _items(oracle.generate([prompt])[0].text)
        assert set(picks) <= set(EXAMPLE_ACTIONS) and len(set(picks)) == len(picks)
        assert len(picks) == min(len(truth), len(EXAMPLE_ACTIONS))
    assert lm.io_stats()["answers"] == len(captions)


def test_it_reads_the_prompt_it_is_given_not_a_list_of_its_own():
    """A user's own prompt gets its own control: the answers change with the examples, whatever the state."""
    lm = PromptOnlyLM(seed=3)
    ours = [["juggle torches", "whistle a tune"], ["paint the fence"], ["juggle torches", "feed the cat"]]
    picks = set()
    for i in range(30):
        picks |= set(_items(lm.generate([_own_prompt(ours, caption=f"state {i}")])[0].text))
    assert picks == {"juggle torches", "whistle a tune", "paint the fence", "feed the cat"}
    other = set(_items(lm.generate([_own_prompt([["sing"], ["dance", "sing"]], caption="state 0")])[0].text))
    assert other <= {"sing", "dance"} and other


def test_the_count_matches_the_lm_table_it_controls(tmp_path):
    from llmguide.llm.table import AnswerTable, Query

    prompts = [_ellm_prompt("ellm_actions_listed", f"You see tree. You have {n} wood.") for n in range(3)]
    table = AnswerTable(tmp_path / "lm.sqlite", readonly=False)
    said = ["- chop tree\n- dance a jig", "- mine stone", "- a\n- b\n- c\n- d\n- e"]
    for prompt, text in zip(prompts, said, strict=True):
        payload = {"prompt": prompt, "max_tokens": 48, "temperature": 0.0, "stop": None}
        table.put(Query("generate", payload, 1.0, "c"), {"text": text}, 0.1)
    table.set_meta(format="llmguide-answer-table/1", lm="embedded:qwen")
    table.close()
    lm = PromptOnlyLM(seed=1, oracle=_oracle(), match_table=tmp_path / "lm.sqlite")
    counts = [len(_items(lm.generate([p])[0].text)) for p in prompts]
    assert counts == [2, 1, 5] and lm.io_stats()["matched_k"] == 3


def test_same_prompt_same_answer_and_the_seed_draws_another():
    prompts = [_own_prompt([["a", "b", "c", "d"], ["e", "f", "g", "h"]], caption=f"s{i}") for i in range(20)]
    one, again, other = PromptOnlyLM(seed=0), PromptOnlyLM(seed=0), PromptOnlyLM(seed=1)
    first = [c.text for c in one.generate(prompts)]
    assert first == [c.text for c in again.generate(list(reversed(prompts)))][::-1]
    assert first != [c.text for c in other.generate(prompts)]


def test_labels_come_at_the_examples_rate_in_their_format():
    from llmguide.methods.oni.prompts import template

    lm = PromptOnlyLM(seed=0)
    oni = [lm.generate([template("oni_label").render(message=f"You see {i} newts.")])[0].text for i in range(600)]
    assert set(oni) == {"<answer>yes</answer>", "<answer>no</answer>"}
    assert np.mean([t == "<answer>yes</answer>" for t in oni]) == pytest.approx(2 / 3, abs=0.06)   # 2 of 3 say yes
    own = ("Is it good?\n\nMessage: a\n<answer>no</answer>\n\nMessage: b\n<answer>no</answer>\n\n"
           "Message: c\n<answer>no</answer>\n\nMessage: d\n<answer>yes</answer>\n\nMessage: {}\n<answer>")
    rate = np.mean(["yes" in lm.generate([own.format(i)])[0].text for i in range(600)])
    assert rate == pytest.approx(0.25, abs=0.06)
    yes_no = lm.score([own.format("x")], [["yes", "no"]])[0]
    assert sorted(yes_no) == [-1e9, 0.0]


def test_a_program_answer_is_the_prompts_example_program():
    from llmguide.methods.bk.code import env_notes, extract_code

    lm = PromptOnlyLM(seed=0)
    for example in ("env", "offdomain"):
        text = lm.generate([f"Write potential.\n{env_notes('babyai', example)}\nWrite it in one block."])[0].text
        assert extract_code(text) == worked_examples(env_notes("babyai", example)).programs[0]


def test_a_prompt_without_examples_says_so():
    lm = PromptOnlyLM(seed=0)
    with pytest.raises(LLMUnavailableError, match="no worked examples"):
        lm.generate([_ellm_prompt("ellm_actions_zeroshot")])
    with pytest.raises(LLMUnavailableError, match="no worked examples"):
        lm.score([_ellm_prompt("ellm_actions_score_listed")], [["chop tree", "sleep"]])


def test_scored_candidates_named_by_the_examples_rank_first():
    lm = PromptOnlyLM(seed=0)
    cands = ["sleep", "chop tree", "drink water", "mine diamond"]
    row = lm.score([_ellm_prompt("ellm_actions_listed")], [cands])[0]
    assert [r > -1e8 for r in row] == [False, True, True, False]


def test_the_config_builds_it_and_a_bad_match_table_is_one_line(tmp_path):
    from llmguide.cli import main
    from llmguide.llm.factory import make_llm
    from llmguide.pipelines import load_config

    cfg = load_config(["env=crafter", "env.actions=text", "method=ellm", "llm=prompt_only", "seed=7"])
    lm = make_llm(cfg.llm, "crafter", actions="text")
    assert isinstance(lm, PromptOnlyLM) and lm.seed == 7 and lm.oracle is not None
    args = ["train", "env=crafter", "env.actions=text", "method=ellm", "method.vocabulary=actions",
            "method.suggester=generate", "method.prompt=ellm_actions_listed", "llm=prompt_only",
            f"llm.match_table={tmp_path / 'none.sqlite'}", "total_steps=64", f"run.dir={tmp_path}"]
    assert main(args) == 2


# --- off-domain prompts ---------------------------------------------------------------------------
def test_no_example_answer_of_an_off_domain_prompt_is_valid_in_the_env():
    from llmguide.envs.crafter.actions import ACTION_STRINGS

    found = worked_examples(_ellm_prompt("ellm_actions_offdomain"))
    assert len(found.examples) == 3 and len(found.items) == 8
    words = {w for action in ACTION_STRINGS for w in action.split()}
    for item in found.items:
        assert item not in ACTION_STRINGS and not set(item.split()) & words, item   # no verb, no object of the env
    fmt = {"you", "have", "see", "feel", "nothing"}   # the caption format ("You have nothing.")
    for example in found.examples:   # nor do the example states name the env's objects
        assert not set(re.findall(r"[a-z]+", example.query.lower())) & (words - fmt), example


def test_the_off_domain_example_program_is_no_potential_in_the_env():
    """It teaches the format (imports, signature, a float) and reads keys no env here has: on BabyAI's
    observation it raises, so it cannot shape anything there."""
    from llmguide.methods.bk.code import env_notes

    (program,) = worked_examples(env_notes("babyai", "offdomain")).programs
    assert "def potential(obs, caption):" in program
    scope: dict = {}
    exec(compile(program, "offdomain", "exec"), scope)   # our own example program, not an LM's
    with pytest.raises(KeyError):
        scope["potential"]({"image": np.zeros((20, 7, 7)), "vector": np.zeros(4)}, "You see a red ball")


def test_answers_requests_of_rebuilds_a_tables_states_with_the_same_keys(tmp_path, capfd):
    """A control's table over exactly the states (and, with the same prompt, the requests) of the LM's table."""
    from llmguide.cli import main
    from llmguide.llm.table import AnswerTable
    from llmguide.pipelines import load_config
    from llmguide.pipelines.collect import Collection, explore

    crafter = ["env=crafter", "env.actions=text", "env.max_steps=40", "num_envs=2", "progress=false"]
    explore(load_config([*crafter, "method=bk_code", f"run.dir={tmp_path}", "run.name=data"]),
            Collection(steps=120, policy="random"))
    ellm = [*crafter, "method=ellm", "method.vocabulary=actions", "method.suggester=generate",
            "method.prompt=ellm_actions_listed"]
    lm_table, control = tmp_path / "oracle.sqlite", tmp_path / "prompt_only.sqlite"
    assert main(["answers", *ellm, "llm=oracle", f"answers.data={tmp_path / 'data'}", f"answers.out={lm_table}"]) == 0
    assert main(["answers", *ellm, "llm=prompt_only", f"llm.match_table={lm_table}", f"answers.requests_of={lm_table}",
                 f"answers.out={control}"]) == 0
    source, built = AnswerTable(lm_table), AnswerTable(control)
    assert built.keys() == source.keys()
    weights = {q: w for _, q, _, w in source.rows()}
    assert {q: w for _, q, _, w in built.rows()} == weights
    for (_, q, answer, _), (_, q2, truth, _) in zip(sorted(built.rows()), sorted(source.rows()), strict=True):
        assert q == q2 and set(_items(answer["text"])) <= set(EXAMPLE_ACTIONS)
        assert len(_items(answer["text"])) == min(len(_items(truth["text"])), 7)   # k matched to the LM's
    assert f"{len(source.keys())} of its {len(source.keys())} requests asked as they were" in capfd.readouterr().out


def test_bk_code_prompt_only_trains_the_prompts_example_program(tmp_path):
    """`label method=bk_code llm=prompt_only`: the write prompt is answered with the example program it shows, which
    becomes Φ (its improve prompt tells nothing, so the valid program is kept); the off-domain example is no Φ in
    BabyAI (it fails on every state), and a prompt without an example has no prompt-only control."""
    import gymnasium as gym

    from llmguide.data import EpisodeRecorder, EpisodeWriter
    from llmguide.envs.babyai.env import BabyAIText
    from llmguide.methods import bk
    from llmguide.methods.bk import recipe as pipe
    from llmguide.methods.bk.code import env_notes
    from llmguide.pipelines import load_config

    envs = gym.vector.SyncVectorEnv([lambda: BabyAIText("GoToLocal", max_steps=8)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    rec = EpisodeRecorder(envs, EpisodeWriter(tmp_path / "data" / "dataset"))
    rec.reset(seed=0)
    for a in np.random.default_rng(0).integers(0, 3, 64):
        rec.step(np.array([a]))
    rec.close()
    base = ["env=babyai", "env.task=GoToLocal-RedBall-S20", "method=bk_code", "llm=prompt_only", f"run.dir={tmp_path}",
            f"method.data={tmp_path / 'data'}", "method.code.sample_states=64"]
    pipe.label(load_config([*base, "run.name=own"]))
    (example,) = worked_examples(env_notes("babyai", "env")).programs
    assert (tmp_path / "own" / "bk" / "final.py").read_text() == example
    steps = (tmp_path / "own" / "bk" / "steps.jsonl").read_text().splitlines()
    assert len(steps) == 1   # one write, no improve: the improve prompt shows no example
    with pytest.raises(bk.LabelingFailed, match="no valid program"):
        pipe.label(load_config([*base, "method.code.example=offdomain", "run.name=off"]))
    with pytest.raises(LLMUnavailableError, match="no worked examples"):
        pipe.label(load_config([*base, "method.code.example=none", "run.name=none"]))
