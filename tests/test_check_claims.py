"""benchmarks/analyses/check_claims.py knows which arms (issue 67): a quoted paired difference must name (or sit in a row
whose table names) the two arms it compares, and a bare p-value must belong to a comparison the claim names."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPARSE = ROOT / "benchmarks" / "results" / "oni_craftax_sparse"
NOISY_TV = SPARSE / "make_wood_pickaxe-300k-distractors-vs-constant" / "report.md"   # control: constant
NOISY_TV_RANDOM = SPARSE / "make_wood_pickaxe-300k-distractors-vs-random-matched" / "report.md"


@pytest.fixture(scope="module")
def claims(load_benchmark):
    return load_benchmark("check_claims")


def _check(claims, tmp_path: Path, text: str) -> tuple[int, list[str]]:
    doc = tmp_path / "claims.md"
    doc.write_text(text.replace("NOISY_TV_RANDOM", str(NOISY_TV_RANDOM)).replace("NOISY_TV", str(NOISY_TV)) + "\n")
    return claims.check([doc])


def test_the_noisy_tv_sentence_naming_the_wrong_control_is_rejected(claims, tmp_path):
    """+0.141 (p 0.007) is oracle − constant; random labels at the oracle's rate are another arm (+0.107)."""
    checked, problems = _check(claims, tmp_path,
                               "With a noisy TV the oracle beats random labels at its rate by +0.141 (p 0.007) "
                               "([report](NOISY_TV)).")
    assert checked == 2 and len(problems) == 1
    assert "no comparison between arms this claim names" in problems[0]
    assert "oni_retrieval-oracle − oni_retrieval-constant" in problems[0]   # says whose numbers they are
    # the same numbers with the arms they belong to pass, in words or by name
    for right in ("the oracle beats every message helpful by +0.141 (p 0.007)",
                  "oracle − every-message-helpful +0.141 (range [+0.073, +0.227], p 0.007)",
                  "`oni_retrieval-oracle` is +0.141 above `oni_retrieval-constant` (p 0.007)"):
        assert _check(claims, tmp_path, f"With a noisy TV {right} ([report](NOISY_TV)).")[1] == [], right
    # and the comparison the sentence names has its own numbers
    assert _check(claims, tmp_path, "The oracle beats random labels at its rate by +0.107 (range [−0.113, "
                                    "+0.238], p 0.145; [report](NOISY_TV_RANDOM)).") == (4, [])


def test_a_bare_p_must_belong_to_a_comparison_the_claim_names(claims, tmp_path):
    # some comparison of the study has p < 0.001, but not oracle − random labels at its rate (p 0.145)
    checked, problems = _check(claims, tmp_path, "The oracle beats random labels at its rate (p < 0.001; "
                                                 "[report](NOISY_TV)).")
    assert checked == 1 and len(problems) == 1 and "follows no difference" in problems[0]
    # a bare p that names no arm is rejected even when it is one comparison's
    _, problems = _check(claims, tmp_path, "With a noisy TV, labels pay (p 0.007; [report](NOISY_TV)).")
    assert len(problems) == 1 and "quote the difference it belongs to" in problems[0]
    # named, it is that comparison's; after its difference it is checked with the difference
    assert _check(claims, tmp_path, "The oracle beats every message helpful (p 0.007; [report](NOISY_TV)).") == (1, [])
    assert _check(claims, tmp_path, "The oracle is 0.158, every message helpful 0.016 (p 0.007; "
                                    "[report](NOISY_TV)).") == (3, [])


def test_a_table_row_is_named_by_its_row_and_its_header(claims, tmp_path):
    table = "Noisy TV ([report](NOISY_TV)).\n\n| arm | Δ vs HEADER |\n|---|---|\n| oracle | +0.141 (p 0.007) |"
    assert _check(claims, tmp_path, table.replace("HEADER", "every message helpful")) == (2, [])
    _, problems = _check(claims, tmp_path, table.replace("HEADER", "random labels at its rate"))
    assert len(problems) == 1 and "oni_retrieval-oracle − oni_retrieval-constant" in problems[0]


def test_one_side_may_be_the_studys_control_left_unnamed(claims, tmp_path):
    """"Constant +0.075" against the control; "it" names the arm of the sentence before it; a third arm named
    takes the control's place."""
    assert _check(claims, tmp_path, "With a noisy TV the oracle is +0.141 (p 0.007; [report](NOISY_TV)).") == (2, [])
    assert _check(claims, tmp_path, "ONI's oracle labels resist the TV. It is +0.141 over every message helpful "
                                    "(p 0.007; [report](NOISY_TV)).")[1] == []
    _, problems = _check(claims, tmp_path, "The oracle is +0.141 over PPO's (p 0.007; [report](NOISY_TV)).")
    assert len(problems) == 1   # PPO is named, so the unnamed control is not implied


def test_key_words_drop_the_method_and_settings(claims):
    arms = ("ppo", "oni_retrieval-oracle", "oni_retrieval-constant", "oni_retrieval-random-matched", "oni_retrieval-qwen",
            "motif-oracle", "bk_random_phi-coef10")   # oni and retrieval: in 4 of the 7 arms
    assert claims.key_words(arms) == {
        "ppo": ["ppo"], "oni_retrieval-oracle": ["oracle"], "oni_retrieval-constant": ["constant"],
        "oni_retrieval-random-matched": ["random", "matched"], "oni_retrieval-qwen": ["qwen"], "motif-oracle": ["motif", "oracle"],
        "bk_random_phi-coef10": ["bk", "random", "phi"]}
    naming = claims.Naming.of(claims.Arms(arms, "ppo"), "Qwen's program vs a random potential, reshuffled")
    assert naming.words == {"qwen", "random", "phi"}   # "potential" is Φ; "reshuffled" starts with no key word


def test_a_missing_file_is_one_line_and_exit_2(claims, tmp_path, capsys):
    assert claims.main([str(tmp_path / "nope.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("check_claims: no such Markdown file") and len(err.strip().splitlines()) == 1


def test_an_arm_is_named_by_its_whole_name_not_inside_a_word(claims):
    naming = claims.Naming.of(claims.Arms(("ppo", "rnd", "oni_retrieval-oracle"), "ppo"), "we support `rnd`")
    assert naming._by("rnd", ()) and not naming._by("ppo", ())
