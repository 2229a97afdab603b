"""The README and docs/: short, their links resolve, and every number they quote beside a study link is one of
that study's numbers (``benchmarks/analyses/check_claims.py``); code cites only docs that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
STUDY = ROOT / "benchmarks" / "results" / "oni_craftax_sparse" / "make_wood_pickaxe-300k-vs-random-matched"


@pytest.fixture(scope="module")
def claims(load_benchmark):
    return load_benchmark("check_claims")


def test_readme_is_a_short_guide():
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    for page in ("design", "ellm", "bk", "glam", "ptgm", "oni_motif"):
        assert f"(docs/{page}.md)" in text, page


def test_links_resolve():
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            path = target.split("#")[0]
            if not path or re.match(r"[a-z]+:", path):
                continue
            assert (doc.parent / path).exists(), f"{doc.relative_to(ROOT)}: {target}"


def test_docs_quote_only_their_studies_numbers(claims):
    checked, problems = claims.check(DOCS)
    assert not problems, "\n".join(problems)
    assert checked >= 200  # the check is not vacuous: the docs cite their studies beside the numbers


def _doc(tmp_path: Path, text: str) -> Path:
    doc = tmp_path / "claims.md"
    doc.write_text(text.replace("REPORT", str(STUDY / "report.md")))
    return doc


RIGHT = (
    "ONI with oracle labels scores 0.042 against random labels at its rate, 0.035 "
    "(+0.007, range [−0.050, +0.038], p 0.68; [report](REPORT)).\n"
)


def test_the_docs_numbers_pass_and_a_changed_one_fails(claims, tmp_path):
    assert claims.check([_doc(tmp_path, RIGHT)]) == (6, [])
    for right, wrong in [
        ("0.042 against", "0.043 against"),
        ("(+0.007,", "(+0.008,"),
        ("(+0.007,", "(−0.007,"),
        ("[−0.050,", "[−0.051,"),
        ("+0.038]", "+0.039]"),
        ("p 0.68;", "p 0.58;"),
        ("p 0.68;", "p < 0.05;"),
    ]:
        checked, problems = claims.check([_doc(tmp_path, RIGHT.replace(right, wrong))])
        assert checked >= 5 and len(problems) == 1, (wrong, problems)


def test_a_difference_its_interval_and_p_are_one_comparison(claims, tmp_path):
    # each number is some comparison's, but not the same one's: oracle − random-matched is +0.007, p 0.68, and
    # constant − random-matched +0.075, p 0.012
    _, problems = claims.check([_doc(tmp_path, "Oracle +0.007 (p 0.012; [report](REPORT)).\n")])
    assert len(problems) == 1 and "no comparison" in problems[0]
    assert claims.check([_doc(tmp_path, "Constant +0.075 (p 0.012; [report](REPORT)).\n")]) == (2, [])


def test_a_stored_per_measure_difference_is_a_comparison(claims, tmp_path, monkeypatch):
    """A paired difference a study keeps in its details (e.g. per achievement) may be quoted with its interval
    and p; its numbers do not mix with another comparison's."""
    import json

    monkeypatch.setattr(claims, "RESULTS", tmp_path)
    study = tmp_path / "study"
    study.mkdir()
    arms = {"a": {"seeds": [0, 1, 2], "values": [1.0, 2.0, 3.0]}, "b": {"seeds": [0, 1, 2], "values": [1.5, 2.0, 2.0]}}
    detail = {"mean": 0.26, "t_low": 0.019, "t_high": 0.501, "p": 0.0372, "n": 10}
    (study / "result.json").write_text(json.dumps({"arms": arms, "details": {"without wake_up": {"a - b": detail}}}))
    doc = tmp_path / "d.md"
    doc.write_text(f"Without wake_up: +0.260 (t 95% CI [+0.019, +0.501], p 0.037; [r]({study / 'result.json'})).\n")
    assert claims.check([doc]) == (4, [])
    doc.write_text(f"Without wake_up: +0.260 (p 0.13; [r]({study / 'result.json'})).\n")   # p of another one
    assert len(claims.check([doc])[1]) == 1


def test_which_claims_cite_a_study(claims, tmp_path):
    # another sentence of the paragraph cites the paragraph's link, a table row the paragraph above its table;
    # without a study link nothing is checked
    table = "Arms ([report](REPORT)). PPO scores 0.023.\n\n| arm | AUC |\n|---|---|\n| oracle | 0.042 |\n| x | 0.066 |\n"
    checked, problems = claims.check([_doc(tmp_path, table)])
    assert checked == 3 and len(problems) == 1 and problems[0].split(": ", 1)[1].startswith("0.066 ")
    assert claims.check([_doc(tmp_path, "No link: 0.077, p 0.5.\n")]) == (0, [])
    assert claims.check([_doc(tmp_path, "Constant vs PPO: p < 0.001 ([report](REPORT)).\n")]) == (1, [])
    missing = "See [gone](" + str(STUDY.parent / "no-such-variant" / "report.md") + "): 0.5.\n"
    _, problems = claims.check([_doc(tmp_path, missing)])
    assert problems and "missing" in problems[0]


def test_code_cites_docs_that_exist():
    cited = set()
    for path in [
        *(ROOT / "src").rglob("*.py"),
        *(p for p in (ROOT / "benchmarks").rglob("*.py") if "results" not in p.parts),
        *(ROOT / "tests").glob("*.py"),
    ]:
        text = path.read_text()
        if path.name != "test_docs.py":
            assert not re.search(r"(?<![\w/])(DESIGN\.md|research/\w+\.md)", text), path
        cited |= set(re.findall(r"\bdocs/[\w.-]+\.md", text))
    assert "docs/design.md" in cited
    for doc in cited:
        assert (ROOT / doc).is_file(), doc
