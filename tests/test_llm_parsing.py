"""Parsing helpers: well-formed answers parse, malformed ones are counted and logged, nothing raises."""

from __future__ import annotations

import logging

import pytest

from llmguide.llm.parsing import ParseStats, parse_bullets, parse_preference, parse_tag


def test_bullets_styles_cleaning_and_dedup():
    stats = ParseStats()
    text = "Sure! Here are goals:\n- Collect Wood.\n* eat cow;\n• Place   table!\n1. collect wood\n2) drink water"
    assert parse_bullets(text, stats) == ["collect wood", "eat cow", "place table", "drink water"]
    assert stats.ok["bullets"] == 1 and stats.malformed["bullets"] == 0


def test_bullets_stop_at_invented_next_example():
    text = "- collect wood\n- place table\n\nCaption: You see cow.\n- eat cow"
    assert parse_bullets(text) == ["collect wood", "place table"]


def test_bullets_code_fence_and_blank_lines_inside_block():
    assert parse_bullets("```\n- chop tree\n\n- drink water\n```") == ["chop tree", "drink water"]


@pytest.mark.parametrize("bad", ["", "   ", None, "I think you should collect wood.", "-nospace", "1.5 apples"])
def test_bullets_malformed_counted_and_logged(bad, caplog):
    stats = ParseStats()
    with caplog.at_level(logging.WARNING, logger="llmguide.llm.parsing"):
        assert parse_bullets(bad, stats) == []
    assert stats.malformed["bullets"] == 1 and stats.ok["bullets"] == 0
    assert "malformed LM output" in caplog.text
    assert stats.examples[-1]["parser"] == "bullets"


def test_tag_parsed_from_tag_not_from_text():
    stats = ParseStats()
    # "yes" appears in the analysis, but the tag says no: the tag wins
    text = "<analysis>yes, gold is nice, but yes this is just a door</analysis>\n<answer> No. </answer>"
    assert parse_tag(text, "answer", ["yes", "no"], stats) == "no"
    # answer word elsewhere in text, no tag -> malformed, not "yes"
    assert parse_tag("yes yes yes, definitely helpful", "answer", ["yes", "no"], stats) is None
    assert stats.ok["tag:answer"] == 1 and stats.malformed["tag:answer"] == 1


@pytest.mark.parametrize("text,expected", [
    ("<answer>yes</answer>", "yes"),
    ("<ANSWER>Yes, clearly</ANSWER>", "yes"),
    ("Reasoning...\nAnswer: no", "no"),
    ("**Answer:** YES", "yes"),
    ("yes</answer>\nMessage: next", "yes"),          # the prompt ended with the opening tag
    ("<answer>no</answer> later <answer>yes</answer>", "yes"),  # last tag wins
    ("<answer>yes", "yes"),                          # unclosed (cut by max_tokens)
])
def test_tag_styles(text, expected):
    assert parse_tag(text, "answer", ["yes", "no"]) == expected


def test_tag_value_outside_choices_is_malformed():
    stats = ParseStats()
    assert parse_tag("<answer>maybe</answer>", "answer", ["yes", "no"], stats) is None
    assert stats.malformed["tag:answer"] == 1
    assert "maybe" in stats.examples[-1]["reason"]


@pytest.mark.parametrize("text,expected", [
    ("A > B", "A"), ("B > A", "B"), ("A < B", "B"), ("B<A", "A"), ("A = B", "="), ("B == A", "="),
    ("Both are fine but overall B > A.", "B"),
    ("First I thought A > B. On reflection, B > A", "B"),
    ("<answer>A</answer>", "A"), ("<answer>A = B</answer>", "="), ("Answer: b", "B"),
    ("Preference: tie", "="), ("answer: 2", "B"), ("[Rank] B > A", "B"),
])
def test_preference_styles(text, expected):
    assert parse_preference(text) == expected


@pytest.mark.parametrize("bad", ["", None, "I like a > b style", "A > A", "Description 1 is better", "<answer>C</answer>"])
def test_preference_malformed(bad):
    stats = ParseStats()
    assert parse_preference(bad, stats) is None
    assert stats.malformed["preference"] == 1


def test_stats_dict_and_rate_and_log_flood_control(caplog):
    stats = ParseStats(log_first=2)
    with caplog.at_level(logging.WARNING, logger="llmguide.llm.parsing"):
        for _ in range(5):
            parse_bullets("nothing here", stats)
    assert len([r for r in caplog.records if "malformed" in r.getMessage()]) == 2
    parse_bullets("- ok", stats)
    d = stats.as_dict()
    assert d["parse/bullets/malformed"] == 5 and d["parse/bullets/ok"] == 1
    assert d["parse/malformed_rate"] == pytest.approx(5 / 6)


# ---------------------------------------------------------------- versioned prompt templates

SHIPPED = {"ellm_goals": ["caption"], "ellm_goal_score": ["caption"], "ellm_actions_listed": ["vocabulary", "caption"],
           "ellm_actions_zeroshot": ["vocabulary", "caption"], "ellm_actions_offdomain": ["vocabulary", "caption"],
           "ellm_actions_score_listed": ["vocabulary", "caption"], "oni_label": ["message"], "motif_pref": ["a", "b"],
           "bk_code_write": ["obs_description", "caption_examples", "env_notes"],
           "bk_code_write_task": ["mission", "obs_description", "caption_examples", "env_notes"]}


def _shipped(name):
    """A method's prompt from its own package (the kernel ships none)."""
    from llmguide.llm.prompts import list_templates
    from llmguide.methods.bk import prompts as bk_prompts
    from llmguide.methods.ellm import prompts as ellm_prompts
    from llmguide.methods.oni import prompts as oni_prompts

    package = {"ellm": ellm_prompts, "bk": bk_prompts}.get(name.split("_")[0], oni_prompts)
    assert name in list_templates(package.PROMPTS)
    return package.template(name)


def test_the_kernel_ships_no_method_prompt():
    from pathlib import Path

    import llmguide.llm as kernel

    assert not list(Path(kernel.__file__).parent.rglob("*.txt"))


@pytest.mark.parametrize("name,fields", SHIPPED.items())
def test_shipped_templates_load_render_and_are_versioned(name, fields):
    tpl = _shipped(name)
    assert tpl.version == f"{name}@{tpl.number}" and tpl.number >= 1
    assert tpl.fields == fields
    text = tpl.render(**{f: f"<{f} value>" for f in fields})
    assert all(f"<{f} value>" in text for f in fields) and "${" not in text and "# version" not in text


def test_caption_convention_for_the_oracle():
    """The caption is the rest of the last line starting with "Caption:" (OracleLM reads it there)."""
    caption = "You see tree, cow. You face tree. You have nothing."
    for name in ("ellm_goals", "ellm_goal_score", "ellm_actions_listed", "ellm_actions_score_listed"):
        tpl = _shipped(name)
        text = tpl.render(**{"caption": caption, "vocabulary": "chop tree, sleep"}) if "vocabulary" in tpl.fields \
            else tpl.render(caption=caption)
        last = [line for line in text.splitlines() if line.startswith("Caption:")][-1]
        assert last[len("Caption:"):].strip() == caption


def test_prompt_endings_fit_generation_and_scoring():
    ellm_template = _shipped

    assert ellm_template("ellm_goals").render(caption="c").endswith("Caption: c\n")  # the model writes "- ..."
    assert ellm_template("ellm_goal_score").render(caption="c").endswith("A good next goal is:")  # + " goal"


def test_ellm_prompt_few_shot_answers_parse_as_bullets():
    body = _shipped("ellm_goals").body
    example = body.split("Caption:")[1]  # first few-shot example: caption line then its bullets
    assert parse_bullets(example.split("\n", 1)[1]) == ["collect wood", "collect sapling"]


def test_listed_prompt_examples_use_only_valid_actions():
    """The instruct prompt's worked examples answer in the vocabulary's own wording (else they teach invalid picks)."""
    from llmguide.envs.crafter.actions import ACTION_STRINGS

    body = _shipped("ellm_actions_listed").body
    examples = body.split("Caption:")[1:-1]
    picks = [g for ex in examples for g in parse_bullets(ex.split("\n", 1)[1])]
    assert len(examples) == 3 and len(picks) == 8 and set(picks) <= set(ACTION_STRINGS)


def test_oni_label_prompt_ends_with_open_tag_and_completion_parses():
    assert _shipped("oni_label").render(message="You find a gold piece.").rstrip().endswith("<answer>")
    assert parse_tag("yes</answer>\n\nMessage: ...", "answer", ["yes", "no"]) == "yes"


def test_template_errors_are_clear(tmp_path):
    from llmguide.llm.prompts import PromptTemplateError, load_template, parse_template

    tpl = _shipped("motif_pref")
    with pytest.raises(PromptTemplateError, match=r"missing field\(s\) \['b'\]"):
        tpl.render(a="x")
    with pytest.raises(PromptTemplateError, match=r"unknown field\(s\) \['c'\]"):
        tpl.render(a="x", b="y", c="z")
    from llmguide.methods.oni.prompts import template as oni_template

    with pytest.raises(PromptTemplateError, match="no prompt template 'nope'; available: .*oni_label"):
        oni_template("nope")
    with pytest.raises(PromptTemplateError, match="give a .txt file's path"):
        load_template("nope")
    with pytest.raises(PromptTemplateError, match="version: N"):
        parse_template("bad", "no header\n${x}")
    with pytest.raises(PromptTemplateError, match="not an integer"):
        parse_template("bad", "# version: one\n\n${x}")
    custom = tmp_path / "mine.txt"
    custom.write_text("# version: 3\n# description: test\n\nCost: $$5 for ${item}\n")
    mine = load_template(custom)
    assert mine.version == "mine@3" and mine.render(item="wood") == "Cost: $5 for wood\n"
    custom.write_text("# version: 4\n\nnew ${item}\n")  # edited file is reloaded
    assert load_template(custom).version == "mine@4"
