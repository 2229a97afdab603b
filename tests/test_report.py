"""`llmguide report`: run dirs written through RunDir -> report.md + PNGs with correct numbers."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from llmguide.cli import main
from llmguide.core.rundir import RunDir
from llmguide.pipelines import load_config
from llmguide.report import CRAFTER_ACHIEVEMENTS, write_report

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
                run.log(step, {"lm/calls": 10.0 * (ep + 1), "lm/hit_rate": 0.5, "lm/fallbacks": seed})
            run.log(step, {"charts/sps": 1000.0, "losses/value": 0.1})
    return str(run.path)


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
    # LM statistics: last value per run, mean over seeds; only rnd logged any
    lm_row = next(line for line in text.splitlines() if line.startswith("| rnd | 4 | 200.000"))
    assert "| 0.500 |" in lm_row and "1.500" in lm_row  # fallbacks = seed -> mean(0..3)
    assert "| none | 4 | 200" not in text
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
    assert path.parent == tmp_path / "icm-s0"
    assert "icm: only one seed, so no interval" in text
    assert "| icm | 1 | 20 | 3.00 (1 seed, no interval) |" in text
    assert "empty: no config.yaml" in text and "empty: metrics.jsonl is empty" in text
    assert "bare: no episodic returns logged" in text
    assert (path.parent / "learning_curves.png").read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(FileNotFoundError, match="run directory not found"):
        write_report([str(tmp_path / "missing")])


def test_report_with_no_usable_metrics_still_writes_a_report(tmp_path):
    run = tmp_path / "nothing"
    run.mkdir()
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
    assert "## final episodic return" in text and "### Paired differences against `none`" in text
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
