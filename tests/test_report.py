"""`llmguide report`: run dirs written through RunDir -> report.md + PNGs with correct numbers."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from llmguide.cli import main
from llmguide.core.config import load_config
from llmguide.core.rundir import RunDir
from llmguide.report import CRAFTER_ACHIEVEMENTS, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FINALS = {"none": [1.0, 2.0, 3.0, 10.0], "rnd": [4.0, 4.0, 5.0, 5.0]}


def make_run(tmp_path, method: str, seed: int, final: float, table_every: int, lm: bool = False):
    """20 episodes: return ramps 0 -> ``final`` over the first 10, then stays at ``final``.

    Each episode unlocks collect_wood; place_table in every ``table_every``-th episode.
    """
    cfg = load_config([f"method={method}", f"seed={seed}", "env=crafter"])
    with RunDir(tmp_path / f"{method}-s{seed}", cfg, tensorboard=False) as run:
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
    assert "| none | 4 | 80 | 2.50 [" in none_row  # IQM of [1, 2, 3, 10] = mean(2, 3)
    assert "| 4.00 [" in none_row  # mean of [1, 2, 3, 10]
    assert "| rnd | 4 | 80 | 4.50 [" in text
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
    assert "icm: only one seed, so no confidence interval" in text
    assert "| icm | 1 | 20 | 3.00 (1 seed, no CI) |" in text
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
