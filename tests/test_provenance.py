"""Each run records the code that trained it (llmguide.core.provenance), and reports adjust many p-values (Holm)."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from llmguide import stats
from llmguide.core import provenance


def test_code_version_is_this_checkouts_commit():
    provenance.code_version.cache_clear()   # cached per process: HEAD may have moved since
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=provenance.PACKAGE, capture_output=True, text=True)
    version = provenance.code_version()
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert version["commit"] == head.stdout.strip() and isinstance(version["dirty"], bool)
    assert provenance.label(version) == version["commit"][:10] + ("+dirty" if version["dirty"] else "")
    assert provenance.label({"commit": None, "version": "0.1.0"}) == "v0.1.0 (no git)"


def test_train_records_every_session_and_overwrite_starts_afresh(tmp_path):
    from llmguide.pipelines import load_config, train_run

    base = ["env=babyai", "method=none", "num_envs=2", "eval.episodes=0", "progress=false", f"run.dir={tmp_path}",
            "run.name=r", "agent.num_steps=16", "checkpoint_every=32"]
    cfg = load_config([*base, "total_steps=64"])
    train_run(cfg)
    cfg = load_config([*base, "total_steps=96", "run.resume=true"])
    train_run(cfg)
    sessions = provenance.read(tmp_path / "r")
    assert [s["resumed"] for s in sessions] == [False, True]
    assert all(s["commit"] == provenance.code_version()["commit"] for s in sessions)
    cfg = load_config([*base, "total_steps=32", "run.overwrite=true"])
    train_run(cfg)
    assert [s["resumed"] for s in provenance.read(tmp_path / "r")] == [False]   # the old run's code is gone
    (tmp_path / "r" / provenance.FILE).write_text("not json\n" + json.dumps({"commit": "ab" * 20}) + "\n")
    assert provenance.run_codes(tmp_path / "r") == ["abababab" + "ab"]
    assert provenance.run_codes(tmp_path / "missing") == ["unrecorded"]


def test_holm_adjusts_step_down_and_skips_missing_p():
    adjusted = stats.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5, "e": None, "f": math.nan})
    # sorted 0.01, 0.03, 0.04, 0.5 over m = 4: 0.04, 0.09, max(0.09, 0.08) = 0.09, min(1, 0.5) = 0.5
    assert adjusted["a"] == pytest.approx(0.04) and adjusted["c"] == pytest.approx(0.09)
    assert adjusted["b"] == pytest.approx(0.09) and adjusted["d"] == pytest.approx(0.5)
    assert adjusted["e"] is None and adjusted["f"] is None
    assert stats.holm({"x": 0.9, "y": 0.8})["x"] == 1.0   # capped at 1


def test_a_report_with_more_than_three_comparisons_adds_holm():
    three = {k: {"p": p} for k, p in zip("abc", (0.01, 0.02, 0.03), strict=True)}
    assert not stats.add_holm(three) and all("p_holm" not in d for d in three.values())
    four = {k: {"p": p} for k, p in zip("abcd", (0.01, 0.02, 0.03, None), strict=True)}
    assert not stats.add_holm(four)                          # a missing p is no comparison
    four["d"]["p"] = 0.2
    assert stats.add_holm(four) and four["a"]["p_holm"] == pytest.approx(0.04)


def test_the_paired_table_shows_holm_beside_raw_p(tmp_path):
    from llmguide.report.study import study_section

    curve = {"steps": [0, 1], "mean": [0, 1], "low": [0, 1], "high": [0, 1], "interval": "range"}
    arms = {k: {"seeds": [0, 1], "values": [0.1, 0.2], "curve": curve} for k in "cabde"}
    paired = {f"{k} - c": {**stats.paired({0: v, 1: v + 0.05}, {0: 0.1, 1: 0.2}).to_json()}
              for k, v in zip("abde", (0.3, 0.5, 0.2, 0.9), strict=True)}
    assert stats.add_holm(paired)
    text = "\n".join(study_section({"arms": arms, "paired": paired, "notes": []}, "m", "c", tmp_path))
    assert "| arm − control | n | mean Δ | interval | p (t) | p (Holm) | Wilcoxon p |" in text
    row = next(line for line in text.splitlines() if line.startswith("| a − c |"))
    assert row.count("|") == 10 and "p (Holm) adjusts" in text
