"""``python benchmarks/harness --reproduce <results>/<study>/<variant>`` (benchmarks/harness/reproduce.py, issue 67
item 5): reruns the stored command's arms for a seed on this checkout and compares every value with the stored one;
a command recorded before the scripts were sorted into folders by kind (issue 68) reruns the script where it is now.

The slow test is the CI check of ``reproduce`` (``make test-slow`` in ``.ci/run``): no committed study reruns in the
2 minutes CI has for it on 2 cores, so a tiny study is stored and reproduced end to end instead."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from test_harness import _git, clean_checkout  # noqa: F401 - autouse: the studies here train from a clean checkout

TINY = '''import sys

from harness import Study, main

STUDY = Study(name="tiny", env="babyai", steps=300, seeds=1, retries=0, control="none",
              arms={"none": ["method=none"], "rnd": ["method=rnd"]}, common=["num_envs=2", "eval.episodes=0"],
              metric="charts/episodic_length", higher_is_better=False)

if __name__ == "__main__":
    sys.exit(main(STUDY))
'''


@pytest.fixture(scope="module")
def harness(load_benchmark):
    return load_benchmark("harness")


@pytest.fixture(scope="module")
def reproduce(harness):
    return harness.reproduce


def _rows(printed: str) -> dict[tuple[str, int], list[str]]:
    """The comparison table's rows: (arm, seed) -> [stored, new, difference]."""
    rows = {}
    for line in printed.splitlines():
        words = line.split()
        if len(words) >= 4 and words[1].isdigit():
            rows[(words[0], int(words[1]))] = words[2:]
    return rows


@pytest.mark.slow   # 4 real runs (store 2 arms, rerun them): about 2 minutes on the shared 2-core box
def test_a_stored_study_reproduces_bit_for_bit_and_a_tampered_value_is_named(harness, reproduce, tmp_path,
                                                                            monkeypatch, capsys):
    repo = harness.REPO   # the clean checkout: the study script is committed there, as benchmarks/studies/bk.py is here
    script = repo / "benchmarks" / "studies" / "tiny.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(TINY)
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "tiny study")
    monkeypatch.setattr(harness, "ROOT", repo)
    monkeypatch.setattr(sys, "argv", [str(script)])   # as `python benchmarks/studies/tiny.py ...` would
    study = reproduce._load("reproduce_tiny", script).STUDY
    out = tmp_path / "results" / "tiny" / "300"
    assert harness.main(study, ["--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "results")]) == 0
    stored = json.loads((out / "result.json").read_text())
    assert stored["argv"][0] == "benchmarks/studies/tiny.py" and "<runs>" in stored["argv"]   # repository-relative

    capsys.readouterr()
    rerun = tmp_path / "rerun"
    assert reproduce.main(["--reproduce", str(out), "--runs", str(rerun)]) == 0
    printed = capsys.readouterr().out
    rows = _rows(printed)
    assert set(rows) == {("none", 0), ("rnd", 0)}
    for arm in ("none", "rnd"):
        value = stored["arms"][arm]["values"][0]
        assert float(rows[(arm, 0)][0]) == pytest.approx(value, rel=1e-5) and rows[(arm, 0)][2] == "+0.000e+00"
    assert "every value within 1e-06" in printed
    assert (rerun / "runs" / "rnd" / "seed-0" / "eval.json").exists()   # the rerun trained, into the given folder
    again = json.loads((rerun / "results" / "tiny" / "300" / "result.json").read_text())
    assert again["arms"]["rnd"]["values"] == stored["arms"]["rnd"]["values"]

    # a stored value tampered with: exit 1, the arm named with its difference (compared with the rerun just made)
    stored["arms"]["rnd"]["values"][0] += 0.25
    (out / "result.json").write_text(json.dumps(stored))
    monkeypatch.setattr(reproduce, "rerun", lambda *_: (0, rerun / "results" / "tiny" / "300" / "result.json"))
    assert reproduce.main(["--reproduce", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith("rnd seed 0 (-0.25)") and "none seed" not in err and len(err.splitlines()) == 1


def _store(folder: Path, argv: list[str] | None, command: str | None = None) -> Path:
    folder.mkdir(parents=True)
    result = {"study": "s", "variant": "v", "control": "a", "produced_by": "benchmarks/harness.py",
              "arms": {"a": {"seeds": [0, 1], "values": [1.0, 2.0]}, "b": {"seeds": [0, 1], "values": [3.0, 4.0]},
                       "c": {"seeds": [], "values": [], "failed": "labelling failed"}}}
    result |= {"argv": argv} if argv else {"command": command}
    (folder / "result.json").write_text(json.dumps(result))
    return folder


def test_reproduce_reruns_the_recorded_command_and_compares(reproduce, tmp_path, monkeypatch, capsys):
    """The rerun's command: the recorded flags without the folders and the switches that stop training, a flag given
    again replacing its recorded value, then the rerun's seeds, arms and folders; values beyond --tolerance exit 1."""
    out = _store(tmp_path / "s" / "v", ["benchmarks/bk.py", "--steps", "300", "--tables", "<tables>", "--extra",
                                        "x=1", "y=2", "--report-only", "--runs", "<runs>", "--seeds", "5"])
    calls = []
    new = {"a": [1.0, 2.0], "b": [3.0, 4.0]}

    def rerun(result, argv, runs):
        calls.append(argv)
        path = tmp_path / "new.json"
        path.write_text(json.dumps({"arms": {arm: {"seeds": [0, 1], "values": v} for arm, v in new.items()}}))
        return 0, path

    monkeypatch.setattr(reproduce, "rerun", rerun)
    # a recorded folder of another machine must be given again: one line naming its flag, exit 2, nothing run
    assert reproduce.main(["--reproduce", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--tables is <tables>" in err and "--tables PATH" in err and not calls

    assert reproduce.main(["--reproduce", str(out), "--tables", "/data/t", "--extra", "z=3"]) == 0
    argv = calls[-1]
    runs = Path(argv[argv.index("--runs") + 1]).parent
    assert argv == ["--steps", "300", "--tables", "/data/t", "--extra", "z=3", "--runs", str(runs / "runs"),
                    "--results", str(runs / "results"), "--seeds", "0,", "--arms", "a,b", "--study", "s",
                    "--variant", "v", "--allow-mixed"]
    assert not runs.exists()   # the temporary folder is removed
    rows = _rows(capsys.readouterr().out)
    assert set(rows) == {("a", 0), ("b", 0)} and rows[("b", 0)][2] == "+0.000e+00"   # the failed arm c: no row

    new["b"] = [3.0, 4.2]   # seed 1 of b moved by 0.2
    assert reproduce.main(["--reproduce", str(out), "--tables", "/t", "--seeds", "0,1", "--tolerance", "0.5"]) == 0
    assert calls[-1][calls[-1].index("--seeds") + 1] == "0,1,"
    assert reproduce.main(["--reproduce", str(out), "--tables", "/t", "--seeds", "0-1", "--tolerance", "0.1"]) == 1
    assert capsys.readouterr().err.strip().endswith("differ from the stored ones by more than 0.1 or are missing: "
                                                   "b seed 1 (+0.2)")
    del new["b"]   # the arm's rerun failed: no value is a difference too
    assert reproduce.main(["--reproduce", str(out), "--tables", "/t"]) == 1
    assert "b seed 0 (no value: the rerun failed)" in capsys.readouterr().err
    # seeds or arms the result does not hold: one line, exit 2
    assert reproduce.main(["--reproduce", str(out), "--tables", "/t", "--seeds", "7"]) == 2
    assert reproduce.main(["--reproduce", str(out), "--tables", "/t", "--arms", "b,zz"]) == 2
    refused = capsys.readouterr().err.strip().splitlines()
    assert len(refused) == 2 and "seed 7 not stored" in refused[0] and "zz not stored" in refused[1]
    assert len(calls) == 4   # both refused before any rerun


def test_an_older_results_command_is_read_back_exactly(reproduce, tmp_path, capsys):
    """A result from before ``argv``: its ``command`` split at single spaces keeps an empty argument
    (``--post-tests ''`` was written as two spaces); a result no study script made is refused."""
    result = {"command": "benchmarks/glam.py --task GoToRedBall --post-tests  --eval-episodes 10 --report-only"}
    assert reproduce.recorded_argv(result) == ["benchmarks/glam.py", "--task", "GoToRedBall", "--post-tests", "",
                                               "--eval-episodes", "10", "--report-only"]
    glam = reproduce.HERE / "studies" / "glam.py"
    assert reproduce.study_script("benchmarks/glam.py") == glam   # the flat layout's path, before issue 68
    assert reproduce.study_script("benchmarks/studies/glam.py") == glam
    assert reproduce.study_script("glam.py") == glam   # a command run from benchmarks/ (or benchmarks/studies/)
    assert reproduce.study_script("benchmarks/craftax.py") == reproduce.HERE / "costs" / "craftax_speed.py"   # renamed
    with pytest.raises(reproduce.ReproduceError, match="not in this checkout"):
        reproduce.study_script("benchmarks/no_such_study.py")
    out = _store(tmp_path / "s" / "v", None, command="old code: benchmarks/ellm_crafter.py before the harness")
    assert reproduce.main(["--reproduce", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("harness --reproduce: result.json records no study command") and len(err.splitlines()) == 1


def test_every_committed_results_command_names_a_script_of_this_checkout(reproduce):
    """Old command lines stay valid (issue 68): the script every committed result.json's ``argv`` / ``command``
    names (``benchmarks/bk.py``, from before the folders by kind) is found where it is now, and a harness study's
    is a study script; every old path of :data:`MOVED` names a file that exists."""
    root = reproduce.HERE.parent
    for old, new in reproduce.MOVED.items():
        assert (root / new).is_file() and not (root / old).exists(), (old, new)
    studies = 0
    for path in sorted((reproduce.HERE / "results").rglob("result.json")):
        result = json.loads(path.read_text())
        if not isinstance(result, dict) or not (result.get("argv") or result.get("command")):
            continue
        token = reproduce.recorded_argv(result)[0] if str(result.get("produced_by")).startswith(
            "benchmarks/harness") else str(result.get("command") or result["argv"][0]).split(" ")[0]
        script = reproduce.study_script(token)
        assert script.is_file() and script.suffix == ".py", (path, token)
        if str(result.get("produced_by")).startswith("benchmarks/harness"):
            assert "STUDY = Study(" in script.read_text(), (path, script)
            studies += 1
    assert studies > 50   # the scan sees the committed studies
