"""`llmguide report`: run dirs written through RunDir -> report.md + PNGs with correct numbers."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from llmguide.cli import main
from llmguide.core.rundir import RunDir
from llmguide.pipelines import load_config
from llmguide.report import CRAFTER_ACHIEVEMENTS, study_report, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FINALS = {"none": [1.0, 2.0, 3.0, 10.0], "rnd": [4.0, 4.0, 5.0, 5.0]}


def make_run(tmp_path, method: str, seed: int, final: float, table_every: int, lm: bool = False, path=None):
    """20 episodes: return ramps 0 -> ``final`` over the first 10, then stays at ``final``.

    Each episode unlocks collect_wood; place_table in every ``table_every``-th episode.
    """
    cfg = load_config([f"method={method}", f"seed={seed}", "env=crafter"])
    with RunDir(path or tmp_path / f"{method}-s{seed}", cfg, tensorboard=False) as run:
        for ep in range(20):
            step = (ep + 1) * 100
            ret = final * min(ep, 10) / 10
            record = {"charts/episodic_return": ret, "charts/episodic_length": 100,
                      **{f"achievements/{n}": 0.0 for n in CRAFTER_ACHIEVEMENTS}}
            record["achievements/collect_wood"] = 1.0
            record["achievements/place_table"] = float(ep % table_every == 0)
            run.log(step, record)
            if lm:
                run.log(step, lm_record(ep, seed))
            run.log(step, {"charts/sps": 1000.0, "losses/value": 0.1})
    return str(run.path)


def lm_record(ep: int, seed: int) -> dict[str, float]:
    """The service's lm/* metrics after episode ``ep`` (cumulative), plus the long tail a reader never needs."""
    requests = 10.0 * (ep + 1)
    return {"lm/requests": requests, "lm/deduplicated": requests / 5, "lm/cache_hits": requests / 4,
            "lm/calls": requests / 2, "lm/hit_rate": 0.5, "lm/answered_fraction": 0.9, "lm/fresh_fraction": 0.25,
            "lm/latency_p50": 0.1 * (seed + 1), "lm/latency_p95": 0.5, "lm/fallbacks": seed, "lm/errors": 2.0,
            **{f"lm/{k}": 0.0 for k in ("errors_http", "errors_decode", "errors_timeout", "errors_connection",
                                       "errors_oversize", "rejected_nonfinite", "truncated", "errors_backend",
                                       "cache_rejected", "cache_evictions", "cache_bytes", "http_requests",
                                       "redacted", "mean_batch_size", "tokens", "queue_depth", "inflight",
                                       "circuit_open", "dropped_stale", "retries", "completed")}}


def test_report_over_seeds_and_methods(tmp_path):
    dirs = [make_run(tmp_path, "none", s, FINALS["none"][s], table_every=2) for s in range(4)]
    dirs += [make_run(tmp_path, "rnd", s, FINALS["rnd"][s], table_every=4, lm=True) for s in range(4)]
    out = tmp_path / "report"
    path = write_report(dirs, out=str(out), reps=300)
    text = path.read_text()
    assert path == out / "report.md"
    for png in ("learning_curves.png", "achievements.png"):
        data = (out / png).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    assert "## Learning curves" in text and "## Achievements (Crafter)" in text and "## LM statistics" in text
    # final return = mean over the last 10% of steps (episodes 19-20, both at the final value)
    none_row = next(line for line in text.splitlines() if line.startswith("| none | 4 |"))
    # IQM of [1, 2, 3, 10] = mean(2, 3); mean 4; 4 seeds: the interval is the min-max range, not a CI
    assert none_row == "| none | 4 | 80 | 2.50 | 4.00, range [1.00, 10.00] |"
    assert "| rnd | 4 | 80 | 4.50 | 4.50, range [4.00, 5.00] |" in text
    assert "(shaded: range over seeds)" not in text  # the plot title is in the PNG, the rule in the text
    assert "min-max range with <= 5 seeds (not a confidence interval)" in text
    assert not [line for line in text.splitlines() if line.startswith("|") and "CI" in line]
    assert "Paired differences" not in text and not (out / "curves.png").exists()  # no control named
    # Crafter score from known success rates: wood 100%, table 50% (none) / 25% (rnd), 20 others 0%
    for method, table in (("none", 50.0), ("rnd", 25.0)):
        score = math.exp((math.log(101) + math.log(1 + table)) / 22) - 1
        per_episode = 1 + table / 100
        assert f"| {method} | 4 | 80 | {score:.2f} ± 0.00 | {per_episode:.2f} ± 0.00 |" in text
    assert re.search(r"\| place_table \| 50\.0 \| 25\.0 \|", text)
    assert re.search(r"\| collect_diamond \| 0\.0 \| 0\.0 \|", text)
    # LM statistics: a short table of the figures a reader needs (last value per run, mean over seeds; only
    # rnd logged any); the other 20-odd lm/* metrics only in lm_stats.json
    lm = text.split("## LM statistics")[1].split("\n## ")[0]
    table = [line for line in lm.splitlines() if line.startswith("|")]
    assert table[0] == ("| method | runs | requests | answered | fresh | latency p50 (s) | latency p95 (s) | "
                        "fallbacks | errors | cache hit |")
    # requests 200; cache hit = cache_hits / (requests - deduplicated) = 50 / 160; fallbacks = seed -> 1.5
    assert table[2:] == ["| rnd | 4 | 200 | 90.0% | 25.0% | 0.250 | 0.500 | 1.5 | 2 | 31.2% |"]
    assert "errors_http" not in text and "mean_batch_size" not in text and "[lm_stats.json](lm_stats.json)" in lm
    dump = json.loads((out / "lm_stats.json").read_text())
    assert set(dump) == {"rnd"} and len(dump["rnd"]["runs"]) == 4
    assert dump["rnd"]["mean"]["lm/mean_batch_size"] == 0.0 and dump["rnd"]["mean"]["lm/fallbacks"] == 1.5
    assert len(dump["rnd"]["mean"]) == len(lm_record(0, 0))
    assert "only one seed" not in text


def test_report_handles_single_seed_and_broken_runs(tmp_path):
    good = make_run(tmp_path, "icm", 0, 3.0, table_every=2)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("")
    bare = tmp_path / "bare"  # no config, metrics without returns, a torn last line
    bare.mkdir()
    (bare / "metrics.jsonl").write_text('{"step": 10, "charts/sps": 5}\n{"step": 20, "charts/ep')
    path = write_report([good, str(empty), str(bare)])
    text = path.read_text()
    assert path.parent.parent == tmp_path and path.parent.name.startswith("report-")  # a new folder
    assert "icm: only one seed, so no interval" in text
    assert "| icm | 1 | 20 | 3.00 (1 seed, no interval) |" in text
    assert "empty: no config.yaml" in text and "empty: metrics.jsonl is empty" in text
    assert "bare: no episodic returns logged" in text
    assert (path.parent / "learning_curves.png").read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(FileNotFoundError, match="run directory not found"):
        write_report([str(tmp_path / "missing")])


def test_report_with_no_usable_metrics_still_writes_a_report(tmp_path):
    run = tmp_path / "nothing"   # a run killed before its first metric: config.yaml only
    run.mkdir()
    (run / "config.yaml").write_text("method: {name: none}\n")
    text = write_report([str(run)]).read_text()
    assert "No episodic returns in any run." in text and "no metrics.jsonl" in text


def test_cli_report_verb(tmp_path, capsys):
    dirs = [make_run(tmp_path, "apt", s, 1.0 + s, table_every=3) for s in range(2)]
    assert main(["report", *dirs, "--out", str(tmp_path / "out")]) == 0
    assert "report:" in capsys.readouterr().out
    text = (tmp_path / "out" / "report.md").read_text()
    assert "| apt | 2 | 40 |" in text
    assert main(["report", str(tmp_path / "nope")]) == 1


def test_binned_curve_and_achievement_conventions():
    from llmguide.report import Run, achievement_stats, binned_curve

    curve = binned_curve(np.array([10.0, 20.0, 45.0]), np.array([1.0, 3.0, 5.0]), np.array([25.0, 50.0, 75.0]))
    np.testing.assert_allclose(curve, [2.0, 5.0, 5.0])  # bin mean, then carried forward
    run = Run(path=None, method="m", env="crafter", seed=0, records=[
        {"step": 1, "achievements/collect_wood": 1.0},  # eat_cow missing -> counts as 0
        {"step": 2, "achievements/collect_wood": 0.0, "achievements/eat_cow": 1.0},
        {"step": 3, "charts/sps": 9.0},  # not an episode record
    ])
    stats = achievement_stats(run)
    assert stats["episodes"] == 2 and stats["rates"] == {"collect_wood": 50.0, "eat_cow": 50.0}
    assert stats["per_episode"] == 1.0


def t3_two_sided_p(t: float) -> float:
    """Two-sided p of a t statistic with 3 degrees of freedom (closed-form CDF)."""
    x = abs(t) / math.sqrt(3)
    return 1 - (2 / math.pi) * (x / (1 + x * x) + math.atan(x))


def test_report_paired_statistics_against_a_control(tmp_path):
    # final returns per seed: none 1, 2, 3, 10; rnd 4, 4, 5, 5 -> rnd - none = 3, 2, 2, -5 (seed by seed)
    dirs = [make_run(tmp_path, "none", s, FINALS["none"][s], table_every=2) for s in range(4)]
    dirs += [make_run(tmp_path, "rnd", s, FINALS["rnd"][s], table_every=4) for s in (3, 1, 0, 2)]
    out = tmp_path / "report"
    text = write_report(dirs, out=str(out), reps=300, control="none").read_text()
    assert "## train return (last 10%)" in text and "### Paired differences against `none`" in text
    assert (out / "curves.png").read_bytes().startswith(PNG_MAGIC)
    sd = math.sqrt((2.5**2 + 1.5**2 + 1.5**2 + 5.5**2) / 3)   # differences' mean is 0.5
    p = t3_two_sided_p(0.5 / (sd / 2))
    assert f"| rnd − none | 4 | 0.500 | range [-5.000, 3.000] | {p:.3f} | – | – | 3 / 1 |" in text
    assert "| none | 4 | 4.000 | range [1.000, 10.000] | 0: 1.000, 1: 2.000, 2: 3.000, 3: 10.000 |" in text
    assert f"rnd − none: n = 4, sd of the differences {sd:.3f}: smallest detectable |Δ| = " in text
    assert "(observed 0.500, below it)" in text


def test_report_groups_by_folder_and_tests_from_six_and_ten_seeds(tmp_path):
    from llmguide import stats
    from llmguide.report import study_report

    rng = np.random.default_rng(1)
    base = rng.uniform(1, 5, 10)
    lift = rng.normal(1.0, 0.3, 10)
    dirs = []
    for arm, finals in (("ctl", base), ("treat", base + lift)):
        for s in range(10):  # both arms are method=none: only the folder tells them apart
            dirs.append(make_run(tmp_path, "none", s, float(finals[s]), table_every=2,
                                 path=tmp_path / "runs" / arm / f"seed-{s}"))
    six = [d for d in dirs if int(d.rsplit("-", 1)[1]) < 6]
    _, summary = study_report(six, tmp_path / "six", reps=200, group_by="folder", control="ctl",
                              metric="charts/episodic_return", metric_name="return")
    expected = stats.paired(dict(enumerate(base[:6] + lift[:6])), dict(enumerate(base[:6])))
    got = summary["paired"]["treat - ctl"]
    assert got["n"] == 6 and got["mean"] == pytest.approx(float(lift[:6].mean()))
    assert got["t_low"] == pytest.approx(expected.t_low) and got["p"] == pytest.approx(expected.p)
    assert got["wilcoxon_p"] == pytest.approx(2 / 64) and got["sign_p"] == pytest.approx(2 / 64)  # all 6 positive
    assert got["bootstrap_low"] is None and got["interval"] == "t95"
    text = (tmp_path / "six" / "report.md").read_text()
    assert "| treat − ctl | 6 |" in text and "t 95% CI [" in text and "| 0.031 | 0.031 | 6 / 0 |" in text
    assert "| ctl | 6 |" in text and "range [" not in text.split("## Learning curves")[1]
    _, summary = study_report(dirs, tmp_path / "ten", reps=200, group_by="folder", control="ctl")
    got = summary["paired"]["treat - ctl"]
    assert got["n"] == 10 and got["bootstrap_low"] < got["mean"] < got["bootstrap_high"]
    assert summary["arms"]["ctl"]["curve"]["interval"] == "bootstrap95"
    assert "bootstrap 95% CI [" in (tmp_path / "ten" / "report.md").read_text()


def test_report_names_a_missing_control(tmp_path):
    dirs = [make_run(tmp_path, "apt", s, 1.0 + s, table_every=3) for s in range(2)]
    text = write_report(dirs, out=str(tmp_path / "out"), reps=100, control="ppo").read_text()
    assert "control `ppo` has no values (arms: apt); no paired statistics" in text
    assert "| apt | 2 | 1.500 | range [1.000, 2.000] |" in text


def test_report_without_out_never_replaces_a_runs_own_report(tmp_path, capsys):
    dirs = [make_run(tmp_path / "runs", m, s, 1.0 + s, table_every=2) for m in ("none", "rnd") for s in range(2)]
    own = {d: write_report([d]) for d in dirs}        # one run: its own report.md (what the Runner writes)
    assert all(path == tmp_path / "runs" / Path(d).name / "report.md" for d, path in own.items())
    before = {d: path.read_text() for d, path in own.items()}
    assert "| none | 1 |" in before[dirs[0]] and "| rnd |" not in before[dirs[0]]
    # several runs, no --out: a new folder in their common parent, whatever order the runs come in
    assert main(["report", *reversed(dirs)]) == 0
    printed = capsys.readouterr().out.strip()
    folder = Path(printed.removeprefix("report: ")).parent
    assert folder.parent == tmp_path / "runs" and re.fullmatch(r"report-\d{8}-\d{6}", folder.name)
    text = (folder / "report.md").read_text()
    assert "| none | 2 | 40 |" in text and "| rnd | 2 | 40 |" in text
    assert {d: Path(d, "report.md").read_text() for d in dirs} == before   # no run's report replaced
    again = write_report(dirs[:2])                    # the same second: the next free name, never the same folder
    assert again.parent.parent == tmp_path / "runs" and again.parent != folder
    assert {d: Path(d, "report.md").read_text() for d in dirs} == before


def progress_only_run(path, rewards: list[float]) -> str:
    """A run that never finished an episode: one record per update with the mean rewards per step."""
    cfg = load_config(["method=rnd", "seed=0", "env=crafter"])
    with RunDir(path, cfg, tensorboard=False) as run:
        for i, r in enumerate(rewards):
            run.log(128 * (i + 1), {"charts/extrinsic_reward": r, "charts/intrinsic_reward": 0.5 * r,
                                    "charts/sps": 900.0, "lm/requests": 3.0})
    return str(run.path)


def test_a_run_with_no_finished_episode_still_gets_a_plot(tmp_path):
    run = progress_only_run(tmp_path / "short", [0.0, 0.01, 0.02, 0.0, 0.03])
    path = write_report([run])
    text = path.read_text()
    assert path == tmp_path / "short" / "report.md"
    png = (tmp_path / "short" / "learning_curves.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    assert "![learning curves](learning_curves.png)" in text
    assert "No run finished an episode" in text and "`charts/extrinsic_reward`" in text
    assert "No episodic returns in any run." in text and "short: no episodic returns logged" in text


def test_smoothing_changes_the_curves_not_the_values(tmp_path):
    rng = np.random.default_rng(0)
    dirs = []
    for arm in ("ctl", "treat"):
        for s in range(3):
            cfg = load_config(["method=none", f"seed={s}", "env=crafter"])
            with RunDir(tmp_path / arm / f"seed-{s}", cfg, tensorboard=False) as run:
                for ep in range(60):   # noisy returns: a smoothed curve differs from the raw one
                    run.log(10 * (ep + 1), {"charts/episodic_return": float(rng.integers(0, 2) + (arm == "treat"))})
            dirs.append(str(run.path))
    raw_path, raw = study_report(dirs, tmp_path / "raw", reps=100, group_by="folder", control="ctl")
    smooth_path, smoothed = study_report(dirs, tmp_path / "smooth", reps=100, group_by="folder", control="ctl",
                                         smooth=8)
    for arm in ("ctl", "treat"):
        a, b = raw["arms"][arm], smoothed["arms"][arm]
        assert a["values"] == b["values"]                                # the statistics are unchanged
        assert a["curve"]["steps"] == b["curve"]["steps"] and a["curve"]["smooth"] == 1 and b["curve"]["smooth"] == 8
        assert np.std(np.diff(b["curve"]["mean"])) < np.std(np.diff(a["curve"]["mean"]))   # smoother
    assert smoothed["paired"] == raw["paired"]
    for name in ("learning_curves.png", "curves.png"):
        assert (tmp_path / "raw" / name).read_bytes() != (tmp_path / "smooth" / name).read_bytes()
    text = smooth_path.read_text()
    assert "trailing mean over its last 8 episodes" in text and "trailing mean over its last 8 logged values" in text
    assert "smoothed" not in raw_path.read_text()
    # 3 seeds: every interval the report names is a range, never a CI (the rule sentence aside)
    body = text.replace("95% CI of the mean with 6-9", "").replace("bootstrap CI with >= 10", "")
    body = body.replace("the Student-t 95% CI with 6-9, and also a BCa bootstrap 95% CI with >= 10", "")
    assert "CI" not in body.replace("(not a CI)", "").replace("(not a confidence interval)", "")
    assert "range [" in text
    # the CLI flag
    assert main(["report", *dirs, "--out", str(tmp_path / "cli"), "--smooth", "8"]) == 0
    assert "last 8 episodes" in (tmp_path / "cli" / "report.md").read_text()
    assert main(["report", dirs[0], "--smooth", "0"]) == 1


def test_a_sweep_writes_its_report_and_a_report_failure_does_not_fail_it(tmp_path, monkeypatch, capsys):
    from llmguide import report
    from llmguide.sweep import write_sweep_report

    root = tmp_path / "sw"
    arms = {}
    for lr in ("1", "2"):
        for s in range(2):
            make_run(tmp_path, "none", s, float(lr) + s, table_every=2, path=root / f"lr-{lr}_seed-{s}")
            arms[f"lr-{lr}_seed-{s}"] = f"agent.lr={lr}"
    path = write_sweep_report(root, arms)
    assert path == root / "report" / "report.md" and f"report: {path}" in capsys.readouterr().out
    text = path.read_text()   # arms are the swept values, not the method (every run is method=none)
    assert "| agent.lr=1 | 2 | 40 |" in text and "| agent.lr=2 | 2 | 40 |" in text
    assert not any(Path(root, name, "report.md").exists() for name in arms)

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(report, "write_report", broken)
    assert write_sweep_report(root, arms) is None
    assert "sweep: report not written (RuntimeError: disk full)" in capsys.readouterr().err
