"""benchmarks/harness/ records the sha256 of every artifact a study's arms train on (answer tables, label runs) and
refuses to train when one has changed since (issue 67 item 3)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from test_harness import clean_checkout  # noqa: F401 - autouse: the studies here train from a clean checkout


@pytest.fixture(scope="module")
def harness(load_benchmark):
    return load_benchmark("harness")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _table(path: Path, note: str) -> None:
    """An answer table (no answers: the tiny study's arms ask no LM), ``note`` in its meta."""
    from llmguide.llm.table import FORMAT, AnswerTable

    path.parent.mkdir(parents=True, exist_ok=True)
    table = AnswerTable(path, readonly=False)
    table.set_meta(format=FORMAT, note=note)
    table.close()


def _study(harness, table: Path, control: str = "tabled"):
    return harness.Study(name="art", env="babyai", steps=300, seeds=1, retries=0, control=control,
                         arms={"none": ["method=none"], "tabled": ["method=none", f"llm.table={table}"]},
                         common=["num_envs=2", "eval.episodes=0"], default_arms=("tabled",),
                         metric="charts/episodic_length")


@pytest.mark.slow   # one real run and three harness calls: about 70 s on the shared 2-core box
def test_a_study_records_its_artifacts_and_refuses_a_changed_one(harness, tmp_path, capsys, monkeypatch):
    table = tmp_path / "tables" / "t.sqlite"
    _table(table, "v1")
    study = _study(harness, table)
    runs, results = tmp_path / "runs", tmp_path / "results"
    args = ["--runs", str(runs), "--results", str(results), "--seeds", "1"]
    assert harness.main(study, args) == 0

    recorded = json.loads((runs / harness.ARTIFACTS).read_text())
    assert list(recorded) == [str(table.resolve())]
    entry = recorded[str(table.resolve())]
    assert (entry["sha256"], entry["bytes"], entry["key"], entry["arms"]) == (_sha(table), table.stat().st_size,
                                                                              "llm.table", ["tabled"])
    out = results / "art" / "300"
    result = json.loads((out / "result.json").read_text())
    (listed,) = result["artifacts"]
    assert listed["sha256"] == _sha(table) and listed["arms"] == ["tabled"] and result["artifacts_recorded"] is True
    assert listed["path"].endswith("tables/t.sqlite") and not harness.machine_paths(listed["path"])
    report = (out / "report.md").read_text()
    assert "## Artifacts" in report and f"`{_sha(table)}`" in report and "| tabled |" in report

    # the table changes: training from this runs folder is refused, one line naming it and both hashes
    old = _sha(table)
    _table(table, "v2 of the answers")
    before = (out / "result.json").read_text()
    capsys.readouterr()
    assert harness.main(study, [*args, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("harness: ") and "tables/t.sqlite changed" in err
    assert old in err and _sha(table) in err and "Traceback" not in err
    assert (out / "result.json").read_text() == before                       # nothing reported
    assert json.loads((runs / harness.ARTIFACTS).read_text())[str(table.resolve())]["sha256"] == old   # record kept
    # a report of the runs trains nothing: not refused, and it lists what the runs trained on (the record)
    assert harness.main(study, [*args, "--report-only"]) == 0
    assert json.loads((out / "result.json").read_text())["artifacts"][0]["sha256"] == old


def test_an_artifact_changed_between_two_sweeps_stops_the_study(harness, tmp_path, capsys, monkeypatch):
    """The check runs before every sweep: a table rewritten while the first arm trains stops the second."""
    table = tmp_path / "t.sqlite"
    table.write_bytes(b"v1")
    calls = []

    def sweep(cmd, **_):   # the first arm's sweep "trains" and, meanwhile, someone rewrites the table
        calls.append(cmd)
        table.write_bytes(b"v2")
        return 0

    monkeypatch.setattr(harness.run.subprocess, "call", sweep)   # the sweeps' module
    study = _study(harness, table, control="none")   # none trains first, then tabled
    assert harness.main(study, ["--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "res"),
                                "--seeds", "1"]) == 2
    assert len(calls) == 1 and "run.name=none" in calls[0]   # the tabled arm never started
    err = capsys.readouterr().err
    assert "t.sqlite changed since this study's runs trained on it" in err and hashlib.sha256(b"v1").hexdigest() in err


def test_a_rebuilt_artifact_is_recorded_anew_and_label_runs_and_seeded_tables_are_found(harness, tmp_path):
    prep = tmp_path / "runs" / "prep"
    label = prep / "labels-bk_code-oracle" / "bk"
    label.mkdir(parents=True)
    (label / "final.py").write_text("def potential(obs): return 0.0\n")
    (label / "manifest.json").write_text('{"method": "bk_code"}')
    for s in (0, 1):
        (tmp_path / f"random-s{s}.sqlite").write_bytes(b"seed %d" % s)
    study = harness.Study(name="lab", env="babyai", control="ppo", metric="m", arms={
        "ppo": ["method=none"], "bk_code-oracle": ["method=bk_code", "method.labels={prep}/labels-bk_code-oracle"],
        "random": ["method=ellm", f"llm.table={tmp_path}/random-s${{seed}}.sqlite"]})
    plan = harness.make_plan(study, harness.build_parser(study).parse_args(
        ["--runs", str(tmp_path / "runs"), "--seeds", "0,1"]))
    assert harness.arm_artifacts(plan, "bk_code-oracle") == {(label / "final.py").resolve(): "method.labels",
                                                             (label / "manifest.json").resolve(): "method.labels"}
    assert sorted(p.name for p in harness.arm_artifacts(plan, "random")) == ["random-s0.sqlite", "random-s1.sqlite"]
    assert harness.arm_artifacts(plan, "ppo") == {}
    first = harness.check_artifacts(plan)
    assert first[str((label / "final.py").resolve())]["path"] == "<prep>/labels-bk_code-oracle/bk/final.py"

    (label / "final.py").write_text("def potential(obs): return 1.0\n")   # a new program
    try:
        harness.check_artifacts(plan)
        raise AssertionError("a changed program was not refused")
    except harness.ArtifactChanged as changed:
        assert "<prep>/labels-bk_code-oracle/bk/final.py changed" in str(changed)
    # ... unless this call's preparation wrote it (Plan.step: a finished step's folder and its marker)
    again = harness.check_artifacts(plan, rebuilt=[label.parent])
    assert again[str((label / "final.py").resolve())]["sha256"] == _sha(label / "final.py")
    assert harness.check_artifacts(plan) == again   # the new hash is the record now
    # an arm whose preparation failed trains on nothing
    plan.fail("random", "no table")
    assert not any("random-s" in f for f in harness.plan_artifacts(plan))


def test_the_program_a_label_run_wrote_is_kept_beside_the_result_only_while_it_is_the_recorded_one(harness, tmp_path):
    """A reviewer reads the LM's program beside the numbers (issue 67): the report copies a label run's final.py into
    <out>/labels/ when its sha256 is still the one recorded before training, and never a changed one."""
    label = tmp_path / "runs" / "prep" / "labels-bk_code-qwen" / "bk"
    label.mkdir(parents=True)
    program = "def potential(image):\n    return float(image[5] + image[6])  # the LM's own\n"
    (label / "final.py").write_text(program)
    (label / "manifest.json").write_text('{"method": "bk_code"}')
    study = harness.Study(name="keep", env="babyai", control="ppo", metric="m", arms={
        "ppo": ["method=none"], "qwen": ["method=bk_code", "method.labels={prep}/labels-bk_code-qwen"]})
    out = tmp_path / "results"
    plan = harness.make_plan(study, harness.build_parser(study).parse_args(
        ["--runs", str(tmp_path / "runs"), "--results", str(out), "--seeds", "0,"]))
    harness.check_artifacts(plan)
    plan.out.mkdir(parents=True)
    listed, recorded = harness.result_artifacts(plan, ["ppo", "qwen"])
    assert recorded is True
    by_name = {Path(e["path"]).name: e for e in listed}
    assert by_name["final.py"]["kept"] == "labels/labels-bk_code-qwen/bk/final.py"
    assert "kept" not in by_name["manifest.json"]                         # only the program (and a goal list)
    kept = plan.out / by_name["final.py"]["kept"]
    assert kept.read_text() == program and _sha(kept) == by_name["final.py"]["sha256"]
    section = "\n".join(harness.artifacts_section(listed, recorded))
    assert "[kept](labels/labels-bk_code-qwen/bk/final.py)" in section and "kept beside this report" in section

    # the program changed after training: the record's hash is not this file's, so nothing is copied or named
    kept.unlink()
    (label / "final.py").write_text("def potential(image):\n    return 0.0\n")
    listed, _ = harness.result_artifacts(plan, ["qwen"])
    assert not any(e.get("kept") for e in listed) and not kept.exists()
    assert "kept beside" not in "\n".join(harness.artifacts_section(listed, True))
