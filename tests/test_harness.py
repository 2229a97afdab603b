"""benchmarks/harness/: an arm table x seeds -> sweep -> report -> result.json, report.md, curves.png, index."""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def harness(load_benchmark):
    return load_benchmark("harness")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def _repo(root: Path) -> Path:
    """A git checkout with a package file, a study script and a result, all committed."""
    for name, text in (("src/pkg.py", "x = 1\n"), ("benchmarks/study.py", "arms = {}\n"),
                       ("benchmarks/results/s/v/report.md", "# r\n"), ("README.md", "a\n")):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "init")
    return root


@pytest.fixture(autouse=True)
def clean_checkout(harness, tmp_path_factory, monkeypatch):
    """Studies here train from a clean checkout (the working tree the tests run in may have uncommitted changes:
    the harness would refuse to train from it); test_a_dirty_tree_* sets its own."""
    monkeypatch.setattr(harness, "REPO", _repo(tmp_path_factory.mktemp("clean")))


def test_tiny_study_end_to_end(harness, tmp_path, capsys):
    study = harness.Study(
        name="tiny", env="babyai", steps=300, seeds=2, jobs=2, retries=0,
        arms={"none": ["method=none"], "rnd": ["method=rnd"], "broken": ["method=none", "agent.gamma=2.0"]},
        common=["num_envs=2", "eval.episodes=0"], control="none",
        metric="charts/episodic_length", metric_name="episode length", higher_is_better=False)
    runs, results = tmp_path / "runs", tmp_path / "results"
    args = ["--runs", str(runs), "--results", str(results)]
    assert harness.main(study, [*args, "--arms", "none,rnd"]) == 0

    out = results / "tiny" / "300"
    result = json.loads((out / "result.json").read_text())
    assert {"task", "budget_steps", "metric", "higher_is_better", "arms", "paired"} <= set(result)
    assert (result["env"], result["task"], result["budget_steps"], result["control"]) == ("babyai", "GoToLocal", 300, "none")
    assert result["higher_is_better"] is False and result["produced_by"] == harness.PRODUCED_BY == "benchmarks/harness"
    assert set(result["arms"]) == {"none", "rnd"} and result["failed"] == []
    for arm in ("none", "rnd"):
        data = result["arms"][arm]
        assert data["seeds"] == [0, 1] and len(data["values"]) == 2 and data["overrides"] == study.arms[arm]
        assert {"steps", "mean", "low", "high"} <= set(data["curve"]) and data["curve"]["interval"] == "range"
        for s in (0, 1):
            assert (runs / arm / f"seed-{s}" / "eval.json").exists()   # the sweep's layout
    paired = result["paired"]["rnd - none"]
    assert paired["n"] == 2 and paired["interval"] == "range" and paired["seeds"] == [0, 1]
    diffs = [r - c for r, c in zip(result["arms"]["rnd"]["values"], result["arms"]["none"]["values"], strict=True)]
    assert paired["mean"] == pytest.approx(sum(diffs) / 2)
    assert (paired["interval_low"], paired["interval_high"]) == pytest.approx((min(diffs), max(diffs)))

    report = (out / "report.md").read_text()
    assert "### Paired differences against `none`" in report and "| rnd − none | 2 |" in report
    assert "## episode length" in report and "Failed runs: none." in report
    assert (out / "curves.png").read_bytes().startswith(PNG_MAGIC)
    # provenance: every arm lists the code its runs were trained with, by seed
    from llmguide.core.provenance import code_version, label

    code_version.cache_clear()   # the runs (subprocesses) read HEAD now
    here = label(code_version())
    assert result["commits"] == {"none": {here: [0, 1]}, "rnd": {here: [0, 1]}}
    assert f"- `rnd`: `{here}` (seeds 0, 1)" in report and "Warning" not in report
    assert str(runs) not in report and "| none/seed-0 |" in report     # runs named relative to --runs
    assert str(runs) not in (out / "result.json").read_text()
    for written in out.iterdir():   # no machine path in any text file the report wrote (lm_stats.json included)
        assert written.suffix not in harness.TEXT_SUFFIXES or not harness.machine_paths(written.read_text()), written
    index = (results / "README.md").read_text()
    assert "## babyai · GoToLocal" in index
    assert re.search(r"^\| \[tiny/300\]\(tiny/300/report\.md\) \| harness, one commit per comparison \| 300 \| 2 \| "
                     r"episode length \| "
                     r"\*\*none [\d.]+\*\* \(control\); rnd [\d.]+", index, re.M)

    # --resume keeps the finished runs; a failing arm is listed, never dropped, and the exit code says so
    capsys.readouterr()
    assert harness.main(study, [*args, "--resume"]) == 1
    printed = capsys.readouterr()
    for arm in ("none", "rnd"):
        for s in (0, 1):
            assert f"skip   {arm} seed {s}" in printed.out
    assert "2 run(s) failed or not run: broken seed 0, broken seed 1" in printed.err
    result = json.loads((out / "result.json").read_text())
    assert [(f["arm"], f["seed"]) for f in result["failed"]] == [("broken", 0), ("broken", 1)]
    assert set(result["arms"]) == {"none", "rnd"}
    assert "Failed runs: broken seed 0" in (out / "report.md").read_text()
    sessions = result["sessions"]   # every training session's code, from the runs folder's code.jsonl
    assert len(sessions) == 2 and all(s["dirty"] is False and s["diff_sha256"] is None for s in sessions)

    # a comparison whose arms come from different commits is refused, unless --allow-mixed: then said first
    for s in (0, 1):
        (runs / "rnd" / f"seed-{s}" / "provenance.jsonl").write_text(json.dumps({"commit": "2" * 40, "dirty": False}) + "\n")
    # and arms that read answer tables get their coverage, with a warning when it is low or unequal
    for arm, values in (("none", (0.95, 0.97)), ("rnd", (0.80, 0.84))):
        for s, value in enumerate(values):
            with open(runs / arm / f"seed-{s}" / "metrics.jsonl", "a") as f:
                f.write(json.dumps({"step": 300, "lm/table_coverage": value}) + "\n")
    capsys.readouterr()
    before = (out / "report.md").read_text()
    assert harness.main(study, [*args, "--arms", "none,rnd", "--report-only"]) == 2
    err = capsys.readouterr().err
    assert "1 comparison(s) take their arms from different commits (rnd - none: " in err and "--allow-mixed" in err
    assert len(err.strip().splitlines()) == 1 and (out / "report.md").read_text() == before   # nothing written
    assert harness.main(study, [*args, "--arms", "none,rnd", "--report-only", "--allow-mixed"]) == 0
    report = (out / "report.md").read_text()
    assert report.splitlines()[2].startswith("**Mixed code (`--allow-mixed`): 1 comparison(s) of this report take "
                                             "their arms from different commits**") and "`rnd - none`" in report
    result = json.loads((out / "result.json").read_text())
    assert result["mixed_code"] == {"rnd - none": sorted(["2222222222", here])}
    assert result["coverage"]["rnd"]["mean"] == pytest.approx(0.82) and result["coverage"]["none"]["seeds"] == 2
    assert result["coverage"]["rnd"]["per_seed"] == {"0": 0.80, "1": 0.84}
    warnings = ["`rnd` answers 0.820 of its training steps from its table (under 0.90)",
                "coverage differs by 14.0 points between arms (more than 5): `rnd` 0.820 to `none` 0.960"]
    assert result["coverage_warnings"] == warnings
    assert report.splitlines()[4] == ("**Warning: unequal or low answer-table coverage** (see *Answer-table "
                                      "coverage*): " + "; ".join(warnings) + ".")
    assert "| rnd | 0.820 | 0.800 | 0.840 | 2 |" in report
    err = capsys.readouterr().err
    assert all(f"warning: tiny/300: {w}" in err for w in warnings)
    assert re.search(r"^\| \[tiny/300\]\(tiny/300/report\.md\) \| harness, mixed commits \|",
                     (results / "README.md").read_text(), re.M)


def test_converted_script_is_an_arm_table(harness, load_benchmark):
    ellm = load_benchmark("ellm_crafter")
    study = ellm.STUDY
    assert {"ellm-oracle", "ellm-embedded", "ellm-random", "ellm-shuffled", "ellm-all-goals", "ellm-oracle-open",
            "ellm-random-open", "ellm-embedded-open", "novelty", "rnd", "apt", "no-reward", "ground-truth"} == set(study.arms)
    assert study.control == "no-reward" and study.upper_reference == ("ground-truth",)
    argv = ["--env-id", "craftax", "--steps", "120000", "--seeds", "100-102", "--num-envs", "64",
            "--extra", "agent.image_encoder=flat", "agent.num_steps=32"]
    plan = harness.make_plan(study, harness.build_parser(study).parse_args(argv))
    assert (plan.name, plan.variant, plan.seeds) == ("ellm_craftax", "120k", [100, 101, 102])
    cmd = harness.sweep_command(plan, "ellm-oracle", plan.seeds, "overwrite")
    assert cmd[3:5] == ["train", "-m"] and "seed=100,101,102" in cmd and "run.name=ellm-oracle" in cmd
    for override in ("method=ellm", "llm=oracle", "method.match=exact", "env.actions=text", "env=craftax", "total_steps=120000", "num_envs=64",
                     "agent.image_encoder=flat", "log_every=2400", "run.overwrite=true", "sweep.jobs=2"):
        assert override in cmd
    assert cmd.index("num_envs=4") < cmd.index("num_envs=64")     # the flag comes later and wins
    assert "env.lenient_rules=true" not in cmd                          # Crafter-only rules
    crafter = harness.make_plan(study, harness.build_parser(study).parse_args(["--seeds", "1"]))
    assert "env.lenient_rules=true" in crafter.overrides and crafter.name == "ellm_crafter"
    assert "seed=range(0,1)" in harness.sweep_command(crafter, "rnd", [0], "resume")


def test_seed_and_budget_parsing(harness, capsys):
    assert harness.parse_seeds("3") == [0, 1, 2]
    assert harness.parse_seeds("100,102") == [100, 102] and harness.parse_seeds("5-7") == [5, 6, 7]
    assert harness.parse_seeds("2,") == [2]
    for nothing in ("0", "", "x", "3-1"):   # "0" is a count of none, not seed 0: refused, never an empty study
        with pytest.raises(ValueError, match="names no seed"):
            harness.parse_seeds(nothing)
    study = harness.Study(name="x", arms={"a": []}, control="a", metric="m")
    with pytest.raises(SystemExit) as stop:
        harness.build_parser(study).parse_args(["--seeds", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and "--seeds" in err[-1] and "names no seed" in err[-1] and "Traceback" not in err[0]
    assert harness.build_parser(study).parse_args(["--seeds", "2,"]).seeds == "2,"
    assert [harness.budget_name(n) for n in (300, 8000, 120_000, 1_000_000, 1500)] == ["300", "8k", "120k", "1m", "1500"]
    with pytest.raises(ValueError, match="control arm"):
        harness.Study(name="x", arms={"a": []}, control="b", metric="m")


def test_results_index_lists_every_study_and_links_resolve(harness):
    root = harness.RESULTS
    index = (root / "README.md").read_text()
    for path in root.glob("*/*/result.json"):
        assert f"]({path.parent.relative_to(root).as_posix()}/" in index, path
    for link in re.findall(r"\]\(([^)]+)\)", index):
        assert (root / link).exists(), link


def test_a_seed_never_started_is_reported_as_not_run_not_as_failed(harness, load_benchmark, tmp_path):
    study = load_benchmark("craftax_sparse").STUDY
    plan = harness.make_plan(study, harness.build_parser(study).parse_args(
        ["--arms", "ppo", "--seeds", "0,1", "--runs", str(tmp_path), "--report-only"]))
    (tmp_path / "ppo").mkdir()
    (tmp_path / "ppo" / "seed-1.log").write_text("Traceback: it crashed\n")
    done, failed, _ = harness.collect(plan)
    assert done == [] and {f["seed"]: f["not_run"] for f in failed} == {0: True, 1: False}


def test_index_shows_a_reports_verdict_beside_its_title(harness, tmp_path):
    (tmp_path / "probe" / "v1").mkdir(parents=True)
    (tmp_path / "probe" / "v1" / "report.md").write_text("# A probe\n\ntext\n\n**Verdict:** not better than chance.\n")
    (tmp_path / "cost" / "v1").mkdir(parents=True)
    (tmp_path / "cost" / "v1" / "report.md").write_text("# A cost table\n")
    index = harness.write_index(tmp_path).read_text()
    assert "| [probe/v1](probe/v1/report.md) | A probe | not better than chance. |" in index
    assert "| [cost/v1](cost/v1/report.md) | A cost table |  |" in index


@pytest.mark.slow   # 5 llmguide processes: 90 s wall on the shared 2-core box (37 s CPU)
def test_prepare_hook_runs_offline_steps_once_and_fails_arms_not_the_study(harness, load_benchmark, tmp_path, capsys):
    """A tiny BK study: collect + one label run per arm (llm=oracle) before the arms; a labelling that fails
    makes its arm failed with the reason (the other arms train); a second invocation keeps every finished step."""
    bk = load_benchmark("bk")
    runs, results = tmp_path / "runs", tmp_path / "results"
    argv = ["--runs", str(runs), "--results", str(results), "--steps", "256", "--seeds", "1", "--num-envs", "2",
            "--collect-steps", "256", "--code-iters", "1", "--oracle-pairs", "4", "--jobs", "1",
            "--arms", "ppo,bk_code-oracle,bk_pref-oracle", "--extra", "env.room_size=6", "env.max_steps=32"]
    assert harness.main(bk.STUDY, argv) == 1                     # bk_pref-oracle: 4 pairs < method.pref.min_usable

    prep = runs / "prep"
    assert (prep / "data" / "collect_summary.json").exists()
    assert (prep / "labels-bk_code-oracle" / "bk" / "manifest.json").exists()
    assert (runs / "bk_code-oracle" / "seed-0" / "eval.json").exists() and not (runs / "bk_pref-oracle").exists()
    out = results / "bk" / "GoToLocal-RedBall-S20-256"
    result = json.loads((out / "result.json").read_text())
    assert result["value"] == {"kind": "auc", "bins": 20} and result["metric_key"] == "charts/success"
    assert {"ppo", "bk_code-oracle"} <= set(result["arms"]) and "bk_code-oracle - ppo" in result["paired"]
    assert result["arms"]["bk_code-oracle"]["overrides"] == ["method=bk_code",   # folders named relative
                                                             "method.labels=<prep>/labels-bk_code-oracle"]
    failed = result["arms"]["bk_pref-oracle"]
    assert failed["values"] == [] and failed["failed"].startswith("labelling failed:")
    assert [(f["arm"], f["seed"]) for f in result["failed"]] == [("bk_pref-oracle", "all")]
    assert {k: v["state"] for k, v in result["prepare"].items()} == {
        "data": "done", "labels-bk_code-oracle": "done", "labels-bk_pref-oracle": "failed"}
    assert "oracle_mission" in json.dumps(result["details"]["labels"]["bk_code-oracle"])
    report = (out / "report.md").read_text()
    assert "bk_pref-oracle, every seed (not trained: labelling failed" in report
    assert "the area under its curve: the mean over 20 equal env-step bins" in report
    assert "### Paired differences against `ppo`" in report and "## Labelling and shaping scale" in report
    assert re.search(r"bk_pref-oracle: failed", (results / "README.md").read_text())

    # resumable: the finished steps (and the failed labelling's manifest) are kept, nothing is run again
    capsys.readouterr()
    assert harness.main(bk.STUDY, [*argv, "--prepare-only"]) == 1
    printed = capsys.readouterr().out
    for name in ("data", "labels-bk_code-oracle", "labels-bk_pref-oracle"):
        assert f"keep   {name}" in printed
    assert "[prep" not in printed and "failed bk_pref-oracle: labelling failed" in printed


def test_placeholders_auc_and_study_scripts_resolve(harness, load_benchmark, tmp_path):
    load_benchmark("ellm_crafter")   # ellm_finetune.py and lm_guidance.py import its arm table
    def plan_of(module, argv):
        study = load_benchmark(module).STUDY
        return harness.make_plan(study, harness.build_parser(study).parse_args([*argv, "--runs", str(tmp_path)]))

    plan = plan_of("bk", ["--seeds", "100-101"])
    assert plan.fill(["a={prep}/x", "b=seed-${seed}", "c={unknown}", "d={code_iters}"]) == [
        f"a={tmp_path}/prep/x", "b=seed-${seed}", "c={unknown}", "d=5"]
    assert "method.random_phi.seed=${seed}" in harness.sweep_command(plan, "bk_random_phi", plan.seeds, "overwrite")
    assert {"ppo", "bk_code-oracle", "bk_code-embedded", "bk_pref-oracle", "bk_pref-embedded", "bk_goal-oracle",
            "bk_goal-embedded", "bk_pref-shuffled", "bk_code-wrong-target", "bk_random_phi",
            "bk_code-oracle-coef10", "bk_random_phi-coef10", "bk_code-wrong-target-coef10", "bk_pref-oracle-coef10",
            "bk_pref-shuffled-coef10", "bk_pref-embedded-coef10", "bk_code-qwen", "bk_code-qwen-agnostic",
            "bk_code-qwen-coef10", "bk_code-qwen-agnostic-coef10", "bk_pref-qwen", "bk_pref-qwen-coef10",
            "bk_code-prompt-only", "bk_code-prompt-only-coef10", "bk_code-qwen-offdomain",
            "bk_code-qwen-offdomain-coef10"} == set(plan.arms)
    # the prompt-only arm labels with no LM: the write prompt's own example program
    assert "llm=prompt_only" in plan.fill(load_benchmark("bk").LABELS["bk_code-prompt-only"])
    # the coefficient sweep trains on bk_code-oracle's labels: selecting it alone still prepares them
    assert "method.intrinsic_coef=10" in plan.arm_overrides("bk_code-oracle-coef10")
    assert f"method.labels={tmp_path}/prep/labels-bk_code-oracle" in plan.arm_overrides("bk_code-oracle-coef10")
    assert f"method.labels={tmp_path}/prep/labels-bk_code-qwen" in plan.arm_overrides("bk_code-qwen-coef10")
    assert f"method.labels={tmp_path}/prep/labels-bk_pref-qwen" in plan.arm_overrides("bk_pref-qwen-coef10")
    wrong = plan.arm_overrides("bk_code-wrong-target-coef10")
    assert "method.intrinsic_coef=10" in wrong and f"method.labels={tmp_path}/prep/labels-bk_code-wrong-target" in wrong
    shuffled = plan.arm_overrides("bk_pref-shuffled-coef10")   # BK-Pref's knowledge control, at its treatment's scale
    assert "method.intrinsic_coef=10" in shuffled and f"method.labels={tmp_path}/prep/labels-bk_pref-shuffled" in shuffled
    # the shared sparse Craftax task: BK's and ONI's ppo arms are one command
    crafter = plan_of("bk", ["--env", "craftax", "--steps", "500000"])
    assert (crafter.name, crafter.task, crafter.args.collect_task) == ("bk_craftax", harness.SPARSE_TASK, "null")
    assert set(harness.SPARSE_PPO) <= set(crafter.overrides) and crafter.args.wrong_target != crafter.task
    oni_sparse = plan_of("craftax_sparse", ["--steps", "500000"])
    assert oni_sparse.task == harness.SPARSE_TASK
    # the expert reference row names its own agent: none of the study's PPO settings reach it
    expert = oni_sparse.arm_overrides("expert")
    assert "agent=scripted" in expert and not [o for o in expert if o.startswith(("agent=ppo", "agent.recurrent"))]
    assert "env.task=make_stone_pickaxe" in expert and "expert" in oni_sparse.study.upper_reference
    assert oni_sparse.arm_overrides("ppo") == crafter.arm_overrides("ppo")
    # --control pairs against another arm (a knowledge control); a key as --metric is named by its key
    versus = plan_of("craftax_sparse", ["--control", "oni_retrieval-constant", "--metric", "achievements/collect_stone",
                                        "--arms", "oni_retrieval-oracle"])
    assert versus.study.control == "oni_retrieval-constant" and versus.arms[0] == "oni_retrieval-constant"
    assert versus.metric_name == "`achievements/collect_stone`" and oni_sparse.study.control == "ppo"
    with pytest.raises(SystemExit, match="not an arm"):
        plan_of("craftax_sparse", ["--control", "no-such-arm"])
    ptgm = plan_of("ptgm", ["--env-id", "craftax", "--goal-space", "inventory_delta", "--steps", "400000"])
    assert (ptgm.env, ptgm.task, ptgm.name, ptgm.variant) == ("craftax", "make_stone_pickaxe", "ptgm_craftax",
                                                              "make_stone_pickaxe-400k-inventory_delta")
    assert ptgm.metric == "charts/success" and "agent.num_steps=2" in ptgm.arm_overrides("ptgm")   # 32 / L 16
    assert {"method.lowlevel.cfg_scale=7.0", "method.codebook.k=64"} <= set(ptgm.arm_overrides("ptgm"))
    assert "method.lowlevel.cfg_scale=0" in ptgm.arm_overrides("ptgm-cfg0")
    unguided = plan_of("ptgm", ["--env-id", "craftax", "--cfg-scale", "0"])   # ptgm-cfg7 keeps Steve-1's guidance
    assert "method.lowlevel.cfg_scale=7" in unguided.arm_overrides("ptgm-cfg7")
    assert "method.lowlevel.cfg_scale=0.0" in unguided.arm_overrides("ptgm")
    # BC alone: bc-finetune's start, never updated
    frozen, finetune = set(ptgm.arm_overrides("bc-frozen")), set(ptgm.arm_overrides("bc-finetune"))
    assert finetune < frozen and frozen - finetune == {"agent.update_epochs=0"}
    # Craftax: the shared sparse task's PPO as a reference row, and the expert as the upper reference
    assert set(harness.SPARSE_PPO) <= set(ptgm.arm_overrides("ppo-shared")) and "expert" in ptgm.study.upper_reference
    assert "agent.recurrent=gru" not in ptgm.arm_overrides("ppo")   # the arms PTGM is compared with share its network
    babyai = plan_of("ptgm", ["--seeds", "1"])
    assert "ppo-shared" not in babyai.arms and "expert" not in babyai.arms and "ptgm" in babyai.arms
    with pytest.raises(SystemExit, match="a Craftax arm"):
        plan_of("ptgm", ["--arms", "ppo,expert"])
    explorer = plan_of("ptgm", ["--env", "craftax", "--task", "all", "--collect-policy", "ppo"])
    assert explorer.task is None and explorer.metric == "charts/achievements_per_episode"
    assert explorer.variant.endswith("-explorer") and explorer.args.exclude == "[]"
    oni = plan_of("oni", ["--env-id", "NetHackScore-v0"])
    assert (oni.env, oni.metric) == ("nethack", "charts/episodic_return")
    assert {"method.extrinsic_coef=0.1", "env.action_set=extended", "env.id=NetHackScore-v0"} <= set(oni.overrides)
    finetune = plan_of("ellm_finetune", ["--arms", "ellm-oracle,novelty"])
    assert finetune.arms == ["scratch", "ellm-oracle-pretrained", "novelty-pretrained"]
    assert f"method.pretrained={tmp_path}/prep/pretrained/novelty/seed-${{seed}}" in finetune.arm_overrides(
        "novelty-pretrained")
    assert load_benchmark("lm_guidance").STUDY.order == "alternate"

    # success AUC: the mean over the bins that hold values; values after the budget are cut
    assert harness.auc([10, 60, 70, 150], [1.0, 0.0, 1.0, 1.0], budget=100, bins=2) == pytest.approx(0.75)
    assert math.isnan(harness.auc([], [], 100, 2))


def test_the_rate_matched_control_takes_the_oracle_arms_rate(harness, load_benchmark, tmp_path, capsys):
    """oni_retrieval-random-matched says yes at the mean rate of the study's finished oni_retrieval-oracle runs
    (their lm_stats.json); with none it is failed with the reason, and a dry run composes no config for it."""
    sparse = load_benchmark("craftax_sparse")
    runs = tmp_path / "runs"
    argv = ["--runs", str(runs), "--results", str(tmp_path / "results"), "--seeds", "2", "--dry-run",
            "--arms", "oni_retrieval-random-matched"]
    assert harness.main(sparse.STUDY, argv) == 0
    out = capsys.readouterr()
    assert "failed oni_retrieval-random-matched: no finished oni_retrieval-oracle run" in out.out
    assert "config error" not in out.err
    for seed, rate in ((0, 0.2), (1, 0.4)):
        folder = runs / "oni_retrieval-oracle" / f"seed-{seed}"
        folder.mkdir(parents=True)
        (folder / "lm_stats.json").write_text(json.dumps(
            {"oni_retrieval": {"runs": {str(folder): {"lm/annot_positive_fraction": rate, "lm/calls": 9.0}}}}))
    assert harness.main(sparse.STUDY, argv) == 0
    assert "llm=random llm.positive_rate=0.3000" in capsys.readouterr().out
    assert harness.main(sparse.STUDY, [*argv, "--positive-rate", "0.25"]) == 0
    assert "llm.positive_rate=0.25 " in capsys.readouterr().out


def test_label_agreement_ranks_and_compares_pairs(load_benchmark, tmp_path):
    """benchmarks/analyses/oni_label_agreement.py: the ROC AUC of a margin for the oracle's label, and two labellings of
    the same Motif pairs compared where the reference prefers a side."""
    import sqlite3

    import numpy as np

    agree = load_benchmark("oni_label_agreement")
    truth = np.array([True, True, False, False])
    assert agree.roc_auc(np.array([3.0, 2.0, 1.0, 0.0]), truth) == 1.0
    assert agree.roc_auc(np.array([0.0, 1.0, 2.0, 3.0]), truth) == 0.0
    assert agree.roc_auc(np.ones(4), truth) == 0.5
    dbs = {}
    for name, labels in (("mine", [1.0, 1.0, 0.0, 1.0]), ("ref", [1.0, 0.0, 0.0, 0.5])):
        dbs[name] = tmp_path / f"{name}.sqlite"
        con = sqlite3.connect(dbs[name])
        con.execute("create table pairs (id integer, a text, b text, label real, status text, annotations text)")
        con.executemany("insert into pairs values (?, ?, ?, ?, 'done', '')",
                        [(i, f"a{i}", f"b{i}", label) for i, label in enumerate(labels)])
        con.commit()
        con.close()
    result = agree.pair_agreement(dbs["mine"], dbs["ref"])
    assert result["pairs"] == 4 and result["reference_strict"] == 3
    assert result["agreement"] == 0.5 and result["agreement_where_reference_prefers"] == 2 / 3
    assert result["independent_agreement_there"] == (2 / 3) * (1 / 3) + (1 / 3) * (2 / 3)
    assert result["p_against_independent"] == pytest.approx(0.5885, abs=1e-4)   # binomial, 2 of 3 at 4/9


def test_the_report_warns_when_arms_come_from_different_code(harness, tmp_path):
    """A run resumed under another commit lists both; arms from different commits get the report's warning."""
    runs = []
    for arm, sessions in (("a", [("1" * 40, False)]), ("b", [("1" * 40, False), ("2" * 40, True)])):
        run = tmp_path / arm / "seed-0"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text("seed: 0\n")
        (run / "provenance.jsonl").write_text("".join(
            json.dumps({"commit": c, "dirty": d, "version": "0.1.0"}) + "\n" for c, d in sessions) + "torn{")
        runs.append(str(run))
    old = tmp_path / "c" / "seed-3"
    old.mkdir(parents=True)
    (old / "config.yaml").write_text("seed: 3\n")
    commits, lines = harness.code_of_arms([*runs, str(old)])
    assert commits == {"a": {"1111111111": [0]}, "b": {"1111111111": [0], "2222222222+dirty": [0]},
                       "c": {"unrecorded": [3]}}
    text = "\n".join(lines)
    assert "**Warning: this study's runs come from 3 different codes**" in text
    assert "- `b`: `1111111111` (seeds 0); `2222222222+dirty` (seeds 0)" in text
    assert "Warning" not in "\n".join(harness.code_of_arms(runs[:1])[1])


def test_ppo_sweep_ellm_lm_and_craftax_score_arm_tables(harness, load_benchmark, tmp_path):
    load_benchmark("ellm_crafter")

    def plan_of(module, argv):
        study = load_benchmark(module).STUDY
        return harness.make_plan(study, harness.build_parser(study).parse_args([*argv, "--runs", str(tmp_path)]))

    # the PPO sweep: 18 grid arms by default, each setting every swept key exactly once; the control is the
    # shared sparse PPO before the sweep
    plan = plan_of("ppo_sweep", [])
    assert len(plan.arms) == 18 and plan.arms[0] == "lr2.5e-4-ent0.01-n64"
    for arm in plan.arms:
        keys = [o.split("=", 1)[0] for o in plan.arm_overrides(arm)]
        assert len(keys) == len(set(keys)), arm   # no key given twice (the arm's and the study's)
    control = plan.arm_overrides("lr2.5e-4-ent0.01-n64")
    assert {"agent.lr=2.5e-4", "agent.ent_coef=0.01", "agent.num_steps=64", "agent.recurrent=gru",
            "method.extrinsic_coef=10.0"} <= set(control)
    assert "agent.recurrent=null" in plan_of("ppo_sweep", ["--arms", "lr2.5e-4-ent0.01-n64-mlp"]).arm_overrides(
        "lr2.5e-4-ent0.01-n64-mlp")
    # ELLM with a real LM: every LM-like arm reads a table in --tables; the random control one per seed
    plan = plan_of("ellm_lm", ["--tables", str(tmp_path / "t"), "--seeds", "2"])
    plan.values["tables"] = str(tmp_path / "t")
    tables = {arm: next(o for o in plan.arm_overrides(arm) if o.startswith("llm.table=")) for arm in plan.arms
              if arm.startswith("ellm-")}
    assert tables["ellm-random-open"] == f"llm.table={tmp_path}/t/random-s${{seed}}.sqlite"
    assert tables["ellm-qwen-open"].endswith("qwen-gen3.sqlite") and plan.variant == "open-lm-120k"
    qwen = plan.arm_overrides("ellm-qwen-open")
    assert "method.prompt=ellm_actions_listed" in qwen and "method.vocabulary=actions" in qwen
    assert qwen.index("method.suggester=generate") > qwen.index("method.suggester=score")   # the later one wins
    assert plan.study.control == "ellm-random-open"


def test_craftax_score_reads_each_runs_crafter_score(harness, load_benchmark, tmp_path):
    score = load_benchmark("craftax_score")
    study = score.STUDY
    plan = harness.make_plan(study, harness.build_parser(study).parse_args(["--runs", str(tmp_path), "--seeds", "1",
                                                                          "--steps", "100"]))
    run = tmp_path / "ppo" / "seed-0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\ntotal_steps: 100\n")
    (run / "eval.json").write_text("{}")
    episodes = [{"step": 10 * i, "charts/achievements_per_episode": 1, "achievements/collect_wood": float(i == 10)}
                for i in range(1, 11)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    lines, data = score.details(plan)
    # collect_wood in 10 % of all episodes and in 50 % of the last 10 % (steps 90 and 100); 21 achievements at 0 %
    scores = data["crafter_score"]["ppo"]
    assert scores["crafter_score_all"] == pytest.approx(math.exp(math.log(11) / 22) - 1)
    assert scores["crafter_score_last10"] == pytest.approx(math.exp(math.log(51) / 22) - 1)
    assert "PPO (Hafner 2022) 4.6 %" in "\n".join(lines) and data["scoreboard"]["DreamerV3"] == 14.5


def test_the_sparse_study_reports_each_arms_distractor_share(harness, load_benchmark, tmp_path):
    """With env.distractors on, craftax_sparse's details give each arm's share of steps on the distractor action,
    averaged over the budget (as the AUC) and over the last 10 %; with it off (no such key) they add nothing."""
    sparse = load_benchmark("craftax_sparse")
    study = sparse.STUDY
    plan = harness.make_plan(study, harness.build_parser(study).parse_args(
        ["--runs", str(tmp_path), "--seeds", "1", "--steps", "100", "--arms", "oni_retrieval-constant"]))
    assert sparse.details(plan) == ([], {})
    for arm, share in (("ppo", lambda i: 0.0), ("oni_retrieval-constant", lambda i: i / 10)):
        run = tmp_path / arm / "seed-0"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text("seed: 0\ntotal_steps: 100\n")
        (run / "eval.json").write_text("{}")
        (run / "metrics.jsonl").write_text("".join(
            json.dumps({"step": 10 * i, "charts/success": 0.0, "charts/distractor_share": share(i)}) + "\n"
            for i in range(1, 11)))
    lines, data = sparse.details(plan)
    shares = data["distractor_share"]
    assert shares["ppo"]["final"] == 0.0
    # logged 0.1 .. 1.0 at steps 10 .. 100: the last 10 % of steps (>= 90) averages 0.9 and 1.0
    assert shares["oni_retrieval-constant"]["final"] == pytest.approx(0.95)
    assert 0.4 < shares["oni_retrieval-constant"]["auc"] < 0.7
    assert "| oni_retrieval-constant | 1 |" in "\n".join(lines)


def test_a_subset_of_arms_never_replaces_a_report_whose_other_arms_it_cannot_report(harness, load_benchmark,
                                                                                    tmp_path, capsys):
    """A report holding arms that this call neither runs nor finds finished runs of (e.g. the committed report,
    reported from another machine's runs) is kept: exit 2 before any training, naming the arms and --variant;
    --replace-report, another --variant, or finished runs of those arms in --runs let it go on."""
    study = load_benchmark("craftax_sparse").STUDY
    results, runs = tmp_path / "results", tmp_path / "runs"
    argv = ["--arms", "ppo", "--seeds", "1", "--runs", str(runs), "--results", str(results), "--report-only"]

    def plan(*more):
        return harness.make_plan(study, harness.build_parser(study).parse_args([*argv, *more]))

    out = plan().out   # the study's default variant
    out.mkdir(parents=True)
    kept = json.dumps({"arms": {"ppo": {}, "oni_retrieval-oracle": {}, "motif-oracle": {}}})
    (out / "result.json").write_text(kept)
    assert harness.lost_arms(plan()) == ["oni_retrieval-oracle", "motif-oracle"]
    assert harness.main(study, argv) == 2
    err = capsys.readouterr().err
    assert "['oni_retrieval-oracle', 'motif-oracle']" in err and "--variant" in err
    assert (out / "result.json").read_text() == kept
    # the user says so, or names another variant: the call goes on (to "no finished run", exit 1)
    for more in (["--replace-report"], ["--variant", "subset"]):
        assert harness.main(study, [*argv, *more]) == 1
        assert "no finished run" in capsys.readouterr().err
    assert harness.lost_arms(plan("--variant", "subset")) == []
    # the dropped arms' finished runs are in --runs: the full report can be made again from them
    for arm in ("oni_retrieval-oracle", "motif-oracle"):
        run = runs / arm / "seed-0"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text("seed: 0\ntotal_steps: 1000000\n")
        (run / "eval.json").write_text("{}")
    assert harness.lost_arms(plan()) == []


def test_the_sparse_study_counts_the_sights_in_motifs_pairs(harness, load_benchmark, tmp_path):
    """With the noisy TV on, the details say how many of Motif's distinct messages and labelled pairs hold a sight,
    and how many of those pairs are ties; without a sight in the data they add nothing."""
    from llmguide.envs.crafter.distractors import all_sentences
    from llmguide.methods.oni.motif import PairsDB

    sparse = load_benchmark("craftax_sparse")
    study = sparse.STUDY
    plan = harness.make_plan(study, harness.build_parser(study).parse_args(
        ["--runs", str(tmp_path), "--seeds", "1", "--steps", "100", "--arms", "motif-oracle"]))
    sight = all_sentences()[7]
    db = PairsDB(plan.prep / "motif-data" / "pairs.sqlite")
    db.add_messages(Counter({"": 90, "You collected wood.": 8, sight: 1, f"You collected wood. {sight}": 1}))
    db.add_pairs([("", sight), ("", "You collected wood."), ("You collected wood.", f"You collected wood. {sight}")])
    ids = {tuple(sorted(p)): i for i, *p in db.todo(10)}
    db.write_labels([(ids[tuple(sorted(("", sight)))], 0.5), (ids[("", "You collected wood.")], 1.0),
                     (ids[tuple(sorted(("You collected wood.", f"You collected wood. {sight}")))], 0.5)])
    db.close()
    pairs = sparse.motif_pairs(plan)
    assert pairs == {"distinct_messages": 4, "distinct_with_sight": 2, "observations_with_sight": 0.02, "pairs": 3,
                     "pairs_with_sight": 2, "ties_with_sight": 2, "ties": 2}
    (plan.prep / "motif-data" / "pairs.sqlite").unlink()
    db = PairsDB(plan.prep / "motif-data" / "pairs.sqlite")
    db.add_messages(Counter({"": 9, "You collected wood.": 1}))
    db.close()
    assert sparse.motif_pairs(plan) == {}


def test_the_sparse_study_labels_motifs_pairs_with_qwen_both_ways_round(harness, load_benchmark, tmp_path):
    """motif-qwen (issue 48): Qwen labels a copy of the oracle's pairs, asked both ways round, with --lm-threads
    threads, into its own folder, and the arm trains on that folder; an unlabelled copy fails the arm, naming why."""
    sparse = load_benchmark("craftax_sparse")
    study = sparse.STUDY
    plan = harness.make_plan(study, harness.build_parser(study).parse_args(
        ["--runs", str(tmp_path), "--seeds", "1", "--steps", "100", "--arms", "motif-qwen,motif-shuffled",
         "--lm-threads", "2", "--report-only"]))
    (plan.prep / "motif-data").mkdir(parents=True)
    (plan.prep / "motif-data" / "collect_stats.json").write_text("{}")   # the shared collection is done
    sparse.prepare(plan)
    command = plan.steps_done["motif-label-qwen"]["command"]
    for key in ("llm=qwen", f"method.pairs_from={plan.prep}/motif-data", "method.both_orders=true", "llm.n_threads=2",
                f"method.data_dir={plan.prep}/motif-data-qwen"):
        assert key in command.split(), key
    assert "llm=oracle" in plan.steps_done["motif-data"]["command"].split()
    assert f"method.data_dir={plan.prep}/motif-data-qwen" in plan.arm_overrides("motif-qwen")
    assert "llm=qwen" in plan.arm_overrides("motif-qwen")
    assert "motif-data-qwen/label_stats.json" in plan.failed["motif-qwen"]


def test_the_glam_study_is_an_arm_table(harness, load_benchmark, tmp_path):
    """benchmarks/studies/glam.py on the harness (issue 51): the LM arms' rollout follows the budget, ``llm.dtype=auto`` is
    resolved (the config takes no ``auto``), the symbolic PPO is the control, the 64-step PPO is not run by default."""
    load_benchmark("glam_costs")   # glam.py imports its scoring measurement
    study = load_benchmark("glam").STUDY

    def plan_of(argv):
        return harness.make_plan(study, harness.build_parser(study).parse_args([*argv, "--runs", str(tmp_path)]))

    plan = plan_of([])
    assert plan.arms == ["glam", "npae", "bc-bot", "symbolic-ppo", "drrn"] and plan.study.control == "symbolic-ppo"
    assert (plan.env, plan.task, plan.steps, plan.variant) == ("babyai", "GoToLocal", 384, "GoToLocal-384")
    glam = plan.arm_overrides("glam")
    assert {"method=glam", "llm=hf", "agent.num_steps=16", "agent.num_minibatches=8", "llm.dtype=float32",
            "method.post_tests=[oov_nouns,invented_words,synonym_actions]", "num_envs=2", "eval.greedy=false",
            "eval.episodes=10", "total_steps=384"} <= set(glam)
    assert "method.lora_last_layers=6" not in plan.arm_overrides("npae")
    small = plan_of(["--steps", "40", "--num-envs", "4", "--greedy", "--arms", "symbolic-ppo-64,drrn"])
    assert small.arms == ["symbolic-ppo", "symbolic-ppo-64", "drrn"]
    assert {"agent.num_steps=5", "eval.greedy=true", "num_envs=4"} <= set(small.arm_overrides("symbolic-ppo"))
    assert "agent.num_steps=64" in small.arm_overrides("symbolic-ppo-64")


def test_a_dirty_tree_is_refused_unless_allowed_and_its_diff_is_kept(harness, tmp_path, monkeypatch, capsys):
    """A change to the package or a study script (tracked or new) makes the tree dirty; one to results or the README
    does not. Training from it is refused (one line, exit 2); --allow-dirty keeps the patch and its sha256."""
    repo = _repo(tmp_path / "repo")
    monkeypatch.setattr(harness, "REPO", repo)
    (repo / "benchmarks/results/s/v/report.md").write_text("# r, rewritten\n")
    (repo / "README.md").write_text("b\n")
    (repo / "notes.txt").write_text("scratch\n")   # outside the code paths
    clean = harness.tree_state()
    assert clean["dirty"] is False and clean["diff_sha256"] is None and clean["commit"] == _git(repo, "rev-parse",
                                                                                                "HEAD").strip()
    (repo / "src/pkg.py").write_text("x = 2\n")
    tracked = harness.tree_state()
    (repo / "benchmarks/new_study.py").write_text("arms = {'a': []}\n")
    both = harness.tree_state()
    assert tracked["dirty"] and both["dirty"] and tracked["diff_sha256"] != both["diff_sha256"]
    assert b"x = 2" in both["patch"] and b"new_study.py" in both["patch"]
    assert hashlib.sha256(both["patch"]).hexdigest() == both["diff_sha256"]

    study = harness.Study(name="d", env="babyai", steps=300, seeds=1, arms={"a": ["method=none"]}, control="a",
                          metric="charts/episodic_length")
    runs = tmp_path / "runs"
    args = ["--runs", str(runs), "--results", str(tmp_path / "results"), "--prepare-only"]
    assert harness.main(study, args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("harness: src/ or benchmarks/ have uncommitted changes") and "--allow-dirty" in err
    assert len(err.splitlines()) == 1 and not runs.exists()   # nothing ran, nothing recorded
    assert harness.main(study, [*args, "--dry-run"]) == 0     # a dry run trains nothing: not refused
    assert harness.main(study, [*args, "--allow-dirty"]) == 0
    entry = json.loads((runs / "code.jsonl").read_text().splitlines()[-1])
    assert entry["dirty"] is True and entry["diff_sha256"] == both["diff_sha256"]
    assert Path(entry["patch"]).read_bytes() == both["patch"]
    lines = harness.code_warnings({}, [entry])
    assert lines[0].startswith("**Trained from uncommitted changes (`--allow-dirty`)**") and both["diff_sha256"] in lines[0]


def test_the_index_says_which_studies_have_no_commit_record(harness, tmp_path):
    def study(name: str, commits: dict | None, produced: str = "benchmarks/harness.py") -> None:
        folder = tmp_path / name / "v"
        folder.mkdir(parents=True)
        arms = {"a": {"seeds": [0, 1], "values": [1.0, 2.0]}, "b": {"seeds": [0, 1], "values": [1.5, 2.5]}}
        result = {"env": "babyai", "task": "T", "control": "a", "arms": arms, "produced_by": produced}
        (folder / "result.json").write_text(json.dumps(result | ({"commits": commits} if commits is not None else {})))

    study("none", None)
    study("package", None, produced="benchmarks/harness")   # a result made since the harness is a package
    study("old", None, produced="benchmarks/bk.py")
    study("unrecorded", {"a": {"unrecorded": [0, 1]}, "b": {"unrecorded": [0, 1]}})
    study("partly", {"a": {"1111111111": [0, 1]}, "b": {"unrecorded": [0, 1]}})
    study("mixed", {"a": {"1111111111": [0, 1]}, "b": {"1111111111": [0], "2222222222": [1]}})
    study("one", {"a": {"1111111111": [0, 1]}, "b": {"1111111111": [0, 1]}})
    index = harness.write_index(tmp_path).read_text()
    for name, note in (("none", "harness, no commit record"), ("package", "harness, no commit record"),
                       ("old", "old code, no commit record"),
                       ("unrecorded", "harness, no commit record"), ("partly", "harness, commits partly unrecorded"),
                       ("mixed", "harness, mixed commits"), ("one", "harness, one commit per comparison")):
        assert f"| [{name}/v]({name}/v/report.md) | {note} |" in index, name


def test_coverage_per_arm_and_its_warnings(harness, tmp_path):
    """Arms that read no table have none; within 5 points and >= 90 % no warning; an arm with a lower or unequal
    one is named."""
    done = []
    for arm, values in (("ppo", (None, None)), ("oracle", (0.95, 0.93)), ("qwen", (0.91, 0.97))):
        for s, value in enumerate(values):
            run = tmp_path / arm / f"seed-{s}"
            run.mkdir(parents=True)
            (run / "config.yaml").write_text(f"seed: {s}\n")
            record = {"step": 10, "charts/x": 1.0, **({"lm/table_coverage": value} if value is not None else {})}
            (run / "metrics.jsonl").write_text(json.dumps(record) + "\n")
            done.append(str(run))
    coverage = harness.arm_coverage(done)
    assert coverage["ppo"] is None and coverage["oracle"]["mean"] == pytest.approx(0.94)
    assert (coverage["qwen"]["min"], coverage["qwen"]["max"], coverage["qwen"]["seeds"]) == (0.91, 0.97, 2)
    assert harness.coverage_warnings(coverage) == []
    section = "\n".join(harness.coverage_section(coverage))
    assert "| ppo | – | – | – | – |" in section and "| qwen | 0.940 | 0.910 | 0.970 | 2 |" in section
    coverage["qwen"]["mean"] = 0.88
    assert harness.coverage_warnings(coverage) == [
        "`qwen` answers 0.880 of its training steps from its table (under 0.90)",
        "coverage differs by 6.0 points between arms (more than 5): `qwen` 0.880 to `oracle` 0.940"]
    assert harness.coverage_section({"ppo": None}) == []


def test_coverage_names_the_share_answered_for_the_steps_own_state_beside_the_fallbacks(harness, tmp_path):
    """With a declared fallback every step is covered; the share its own state answered (ellm/table_exact_fraction,
    the last logged value) is what tells a learning arm that left the table's states, and it is reported per arm."""
    done = []
    for arm, exact in (("oracle", (0.40, 0.50)), ("random", (0.80, 0.90))):
        for s, value in enumerate(exact):
            run = tmp_path / arm / f"seed-{s}"
            run.mkdir(parents=True)
            (run / "config.yaml").write_text(f"seed: {s}\n")
            early = {"step": 5, "lm/table_coverage": 1.0, "ellm/table_exact_fraction": 0.99}
            last = {"step": 10, "lm/table_coverage": 1.0, "ellm/table_exact_fraction": value}
            (run / "metrics.jsonl").write_text(json.dumps(early) + "\n" + json.dumps(last) + "\n")
            done.append(str(run))
    coverage = harness.arm_coverage(done)
    assert coverage["oracle"]["mean"] == 1.0 and coverage["oracle"]["exact"]["mean"] == pytest.approx(0.45)
    assert coverage["random"]["exact"]["per_seed"] == {"0": 0.80, "1": 0.90}
    section = "\n".join(harness.coverage_section(coverage))
    assert "| oracle | 1.000 | 1.000 | 1.000 | 2 | 0.450 [0.400, 0.500] |" in section and "own state" in section
    assert "table_fallback=nearest" in section


def test_coverage_is_backfilled_from_lm_stats_into_older_results(harness, tmp_path):
    """benchmarks/tools/coverage_backfill.py: a result without coverage gets it from lm_stats.json; nothing else in
    result.json changes; the report gets the warning first and the section before Code; a second pass is a no-op."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "coverage_backfill", Path(harness.HERE) / "tools" / "coverage_backfill.py")
    backfill = importlib.util.module_from_spec(spec)
    sys.modules["coverage_backfill"] = backfill
    spec.loader.exec_module(backfill)
    folder = tmp_path / "ellm" / "v"
    folder.mkdir(parents=True)
    result = {"control": "random", "arms": {"random": {"seeds": [0, 1], "values": [1.0, 2.0]},
                                            "qwen": {"seeds": [0, 1], "values": [1.5, 2.5]},
                                            "none": {"seeds": [0, 1], "values": [0.5, 0.5]}}, "paired": {}}
    (folder / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    (folder / "lm_stats.json").write_text(json.dumps({
        arm: {"runs": {f"{arm}/seed-{s}": {"lm/table_coverage": v, "lm/calls": 9.0} for s, v in enumerate(values)}}
        for arm, values in (("random", (0.62, 0.68)), ("qwen", (0.45, 0.47)))}))
    (folder / "report.md").write_text("# Study\n\nIntro.\n\n## Code\n\n- `qwen`: x\n")
    assert backfill.main(["--results", str(tmp_path)]) == 0
    new = json.loads((folder / "result.json").read_text())
    assert {k: v for k, v in new.items() if not k.startswith("coverage")} == result
    assert new["coverage"]["qwen"] == {"mean": pytest.approx(0.46), "min": 0.45, "max": 0.47,
                                       "per_seed": {"0": 0.45, "1": 0.47}, "seeds": 2}
    assert new["coverage"]["none"] is None and len(new["coverage_warnings"]) == 3   # two under 90 %, a gap
    report = (folder / "report.md").read_text().splitlines()
    assert report[:2] == ["# Study", ""] and report[2].startswith("**Warning: unequal or low answer-table coverage**")
    assert report.index("## Answer-table coverage") < report.index("## Code") and "| qwen | 0.460 | 0.450 | 0.470 | 2 |" in report
    snapshot = {p: p.read_bytes() for p in folder.iterdir()}
    assert backfill.backfill(folder) is False and {p: p.read_bytes() for p in folder.iterdir()} == snapshot
