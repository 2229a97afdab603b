"""No machine paths in benchmarks/results/ (issue 67): the committed files hold none, benchmarks/tools/relpaths.py
names them relative without changing a number, and the harness writes none into a new study's results."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


@pytest.fixture(scope="module")
def relpaths(load_benchmark):
    load_benchmark("harness")   # relpaths names paths with the harness's rules
    spec = importlib.util.spec_from_file_location("relpaths", ROOT / "benchmarks" / "tools" / "relpaths.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["relpaths"] = module
    spec.loader.exec_module(module)
    return module


def test_machine_paths_are_found_and_system_paths_are_not(load_benchmark):
    h = load_benchmark("harness")
    text = ("llm.table=/work/runs/t.sqlite, see /tmp/x. `/home/ann/a` PATH=/tmp/site:$PWD /root ok "
            "https://github.com/work/x a/tmp/b /usr/bin/env <runs>/tmp/c ~/work/d")
    assert h.machine_paths(text) == ["/work/runs/t.sqlite", "/tmp/x", "/home/ann/a", "/tmp/site", "/root"]
    folders = {"/work/runs": h.named("<runs-root>"), "/work/main": (".", "")}
    assert h.relativize(text, folders) == (
        "llm.table=<runs-root>/t.sqlite, see <tmp>/x. `~/a` PATH=<tmp>/site:$PWD ~ ok "
        "https://github.com/work/x a/tmp/b /usr/bin/env <runs>/tmp/c ~/work/d")
    assert h.relativize("/work/main/benchmarks/results/a /work/main", folders) == "benchmarks/results/a ."


def test_a_study_trained_from_another_worktree_names_the_repositorys_files_by_their_path(load_benchmark, tmp_path):
    """A study pinned at its commit trains from a worktree (``git worktree add --detach``): its runs name tables by
    that tree's absolute path, and the report names them by the path in the repository, as from the checkout."""
    import subprocess

    h = load_benchmark("harness")
    repo, pinned = tmp_path / "repo", tmp_path / "pinned"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    repo.mkdir()
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.txt").write_text("a\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    subprocess.run([*git, "worktree", "add", "-q", "--detach", str(pinned)], check=True)
    trees = h.worktrees(repo.resolve())
    assert trees == [repo.resolve(), pinned.resolve()]
    folders = {str(t): (".", "") for t in trees}
    text = f"llm.table={pinned.resolve()}/benchmarks/results/t/q.sqlite"
    assert h.relativize(text, folders) == "llm.table=benchmarks/results/t/q.sqlite"
    assert h.worktrees(tmp_path / "not-a-repo") == [tmp_path / "not-a-repo"]   # no git: the checkout alone


def test_no_machine_path_anywhere_under_results(relpaths):
    """Every text file (json, md, jsonl, txt, yaml, csv, py) and every answer table's meta under results/."""
    assert len(relpaths.text_files(RESULTS)) > 100 and list(RESULTS.rglob("*.sqlite"))   # the scan sees the files
    left = relpaths.leftover(RESULTS)
    assert left == {}, "machine paths in results (run python benchmarks/tools/relpaths.py): " + "; ".join(
        f"{name}: {paths[:3]}" for name, paths in list(left.items())[:10])


def _sample(root: Path) -> Path:
    """A results folder written on a machine: a study whose runs, preparation, tables and notes are absolute."""
    study = root / "bk" / "S20-150k"
    study.mkdir(parents=True)
    runs = "/work/main/runs/studies/bk_s20"
    result = {"study": "bk", "control": "ppo", "budget_steps": 150000,
              "arms": {"ppo": {"seeds": [0, 1], "values": [0.351, 0.25], "overrides": []},
                       "bk_code": {"seeds": [0, 1], "values": [0.389, 1e-05],
                                   "overrides": [f"method.labels={runs}/prep/labels-bk_code-oracle",
                                                 "llm.table=/work/runs/ellm-tables/qwen-gen3.sqlite"]}},
              "paired": {"bk_code - ppo": {"mean": 0.0375, "p": 0.4, "n": 2}},
              "prepare": {"data": {"run": f"{runs}/prep/data", "command": f"llmguide collect run.dir={runs}/prep"}},
              "command": f"benchmarks/bk.py --runs {runs} --tables /work/runs/ellm-tables --notes /tmp/notes/bk.md"}
    (study / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    (study / "lm_stats.json").write_text(json.dumps(
        {"bk_code": {"runs": {f"{runs}/bk_code/seed-{s}": {"lm/table_coverage": 0.5 + s} for s in (0, 1)}}}))
    (study / "report.md").write_text(f"| {runs}/ppo/seed-0 | ppo |\nPreparation (`{runs}/prep`): data.\n"
                                     f"Notes from /tmp/notes/bk.md. Tables in /work/runs/ellm-tables.\n")
    (study / "episodes.jsonl").write_text(json.dumps({"run": f"{runs}/ppo/seed-0", "return": 2.5}) + "\n")
    tables = root / "ellm_craftax" / "open-lm-120k" / "tables"
    tables.mkdir(parents=True)
    db = sqlite3.connect(tables / "qwen-gen3.sqlite")
    db.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                     "CREATE TABLE answers (key TEXT PRIMARY KEY, answer TEXT NOT NULL);")
    db.executemany("INSERT INTO meta VALUES (?, ?)", [
        ("data", json.dumps("/work/runs/craftax-collect")), ("data_steps", "93579"),
        ("build_summary", json.dumps({"answered": 300, "path": "/work/runs/ellm-tables/qwen-gen3.sqlite"}))])
    db.execute("INSERT INTO answers VALUES ('k', '\"/work/runs/not-meta\"')")
    db.commit()
    db.close()
    return study


def _numbers(relpaths, folder: Path) -> dict[str, list]:
    return {p.name: relpaths.text_numbers(p, p.read_text()) for p in sorted(folder.iterdir()) if p.suffix
            in (".json", ".jsonl")}


def test_the_migration_names_paths_relative_and_keeps_every_number(relpaths, tmp_path):
    study = _sample(tmp_path)
    before = _numbers(relpaths, study)
    assert relpaths.leftover(tmp_path)   # the sample holds machine paths
    done = relpaths.migrate(tmp_path)
    assert set(done) == {"bk/S20-150k/result.json", "bk/S20-150k/lm_stats.json", "bk/S20-150k/report.md",
                         "bk/S20-150k/episodes.jsonl", "ellm_craftax/open-lm-120k/tables/qwen-gen3.sqlite"}
    assert relpaths.leftover(tmp_path) == {}
    assert _numbers(relpaths, study) == before and all(before.values())   # same numbers, same order

    result = json.loads((study / "result.json").read_text())
    table = "benchmarks/results/ellm_craftax/open-lm-120k/tables/qwen-gen3.sqlite"   # committed: named by its path
    assert result["arms"]["bk_code"]["overrides"] == ["method.labels=<prep>/labels-bk_code-oracle", f"llm.table={table}"]
    assert result["command"] == "benchmarks/bk.py --runs <runs> --tables <tables> --notes <notes>"
    assert result["prepare"]["data"] == {"run": "<prep>/data", "command": "llmguide collect run.dir=<prep>"}
    assert list(json.loads((study / "lm_stats.json").read_text())["bk_code"]["runs"]) == ["bk_code/seed-0",
                                                                                          "bk_code/seed-1"]
    assert (study / "report.md").read_text() == ("| ppo/seed-0 | ppo |\nPreparation (`<prep>`): data.\n"
                                                 "Notes from <notes>. Tables in <tables>.\n")
    db = sqlite3.connect(tmp_path / "ellm_craftax" / "open-lm-120k" / "tables" / "qwen-gen3.sqlite")
    meta = dict(db.execute("SELECT key, value FROM meta"))
    answers = db.execute("SELECT * FROM answers").fetchall()
    db.close()
    assert json.loads(meta["data"]) == "<runs-root>/craftax-collect" and meta["data_steps"] == "93579"
    assert json.loads(meta["build_summary"]) == {"answered": 300, "path": table}
    assert answers == [("k", '"/work/runs/not-meta"')]   # an answer is data, never rewritten

    # idempotent: a second pass finds nothing and changes no byte
    snapshot = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert relpaths.migrate(tmp_path) == {}
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == snapshot


def test_a_rewrite_that_would_change_a_number_writes_nothing(relpaths, tmp_path, capsys):
    """Two keys that the rewrite would make one (a value lost): refused, every file left as it was."""
    study = _sample(tmp_path)
    (study / "clash.json").write_text(json.dumps({"/tmp/a": 1, "<tmp>/a": 2}))
    snapshot = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match="clash.json: the rewrite would change its numbers"):
        relpaths.migrate(tmp_path)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == snapshot
    assert relpaths.main(["--results", str(tmp_path)]) == 1
    assert "would change its numbers" in capsys.readouterr().err
    assert relpaths.main(["--results", str(tmp_path / "missing")]) == 2


def test_the_harness_names_runs_prep_flags_and_the_repository_relative(load_benchmark, tmp_path):
    h = load_benchmark("harness")
    study = h.Study(name="s", arms={"a": ["method=none"]}, control="a", metric="m",
                    flags=lambda p: p.add_argument("--tables", type=Path, default=None))
    runs, tables, results = tmp_path / "runs", tmp_path / "tables", tmp_path / "results"
    args = ["--runs", str(runs), "--tables", str(tables), "--results", str(results)]
    plan = h.make_plan(study, h.build_parser(study).parse_args(args))
    text = (f"{runs}/a/seed-0 {runs}/prep/labels {tables}/q.sqlite {h.ROOT}/benchmarks/results/x "
            f"--runs {runs} --tables {tables} --results {results}")
    assert h.relative_paths(plan, text) == ("a/seed-0 <prep>/labels <tables>/q.sqlite benchmarks/results/x "
                                            "--runs <runs> --tables <tables> --results <results>")
    assert not h.machine_paths(h.relative_paths(plan, text))
