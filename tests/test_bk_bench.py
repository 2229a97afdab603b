"""benchmarks/bk.py: success curves, budgets and run statistics from a run directory."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

spec = importlib.util.spec_from_file_location("bk_bench", Path(__file__).parents[1] / "benchmarks" / "bk.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


@pytest.fixture
def run(tmp_path):
    recs = [{"step": s, "time": 100.0 + s / 10, "charts/success": float(s >= 500)} for s in range(50, 1001, 50)]
    recs += [{"step": s, "time": 100.0 + s / 10, "charts/sps": 10.0, "reward/bk_code/phi_factor": 0.5,
              "charts/intrinsic_reward/bk_code": -0.01} for s in (500, 1000)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (tmp_path / "config.yaml").write_text("total_steps: 1000\nseed: 0\n")
    return tmp_path


def test_success_curve_bins_by_step_and_cuts_at_the_window(run):
    full = bench.success_curve(run, 1000, 4)
    assert np.allclose(full, [0.0, 0.0, 1.0, 1.0])      # successes only from step 500 on
    first = bench.success_curve(run, 500, 2)           # records after step 500 are not folded into the last bin
    assert np.allclose(first, [0.0, 1 / 6])            # [250, 500] holds 6 records, one success (step 500)
    assert bench.run_budget(run) == 1000


def test_run_stats_reads_throughput_and_shaping_scale(run):
    st = bench.run_stats(run)
    assert st["sps"] == 10.0 and st["train_seconds"] == pytest.approx(95.0)
    assert st["phi_factor_mean"] == 0.5 and st["abs_rollout_mean_shaping"] == pytest.approx(0.01)


def test_bootstrap_ci_brackets_the_mean_and_collapses_on_equal_seeds():
    lo, hi = bench.bootstrap_ci(np.array([[0.1], [0.2], [0.3]]))
    assert lo[0] <= 0.2 <= hi[0] and lo[0] >= 0.1 and hi[0] <= 0.3
    lo, hi = bench.bootstrap_ci(np.array([[0.4], [0.4], [0.4]]))
    assert lo[0] == hi[0] == pytest.approx(0.4)
