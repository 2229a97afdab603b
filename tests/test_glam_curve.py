"""benchmarks/analyses/glam_curve.py: a GPU lease's GLAM metrics beside CPU baselines, on one env-step axis."""

from __future__ import annotations

import json


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _episodes(step, wins, n):
    return [{"step": step, "time": float(step), "charts/success": float(i < wins)} for i in range(n)]


def _update(step, loss=-0.01, entropy=0.5):
    return {"step": step, "time": float(step), "losses/policy_loss": loss, "losses/value_loss": 0.1,
            "losses/entropy": entropy, "charts/sps": 20.0}


def test_bins_pool_seeds_and_find_the_first_nan_update(load_benchmark, tmp_path):
    curve = load_benchmark("glam_curve")
    lease, base = tmp_path / "lease", tmp_path / "base"
    _write(lease / "train" / "GoToX-glam-s0.metrics.jsonl",
           [*_episodes(1000, 1, 4), _update(1024, entropy=0.6), *_episodes(3000, 2, 4), _update(2048, entropy=0.4)])
    _write(lease / "train" / "GoToX-glam-s1.metrics.jsonl",
           [*_episodes(1500, 0, 4), _update(1024), _update(2048, loss=float("nan"))])
    with (lease / "train" / "GoToX-glam-s1.metrics.jsonl").open("a") as f:
        f.write('{"step": 2100, "time": 21')   # copied out mid-write: a torn last line is skipped
    _write(base / "drrn" / "seed-0" / "metrics.jsonl", [*_episodes(1000, 3, 4), *_episodes(3000, 4, 4)])
    assert curve.main(["--lease", str(lease), "--baseline", f"GoToX={base}", "--bin-steps", "2048"]) == 0
    result = json.loads((lease / "result.json").read_text())["tasks"]["GoToX"]
    s0, s1 = result["lease"]["glam"]["0"], result["lease"]["glam"]["1"]
    assert [b["success"] for b in s0["bins"]] == [0.25, 0.5] and s0["nan_at"] is None
    assert s0["entropy"] == [0.6, 0.4]
    assert s1["nan_at"] == 2048 and s1["entropy"] == [0.5]     # the NaN update is no point of the curve
    assert result["common_steps"] == 3000
    # bins that end by the common step (2048 and 4096 > 3000: only the first bin) pooled over seeds
    assert result["pooled"]["glam (GPU)"] == {"episodes": 8, "successes": 1, "success": 0.125}
    assert result["pooled"]["drrn (CPU)"] == {"episodes": 4, "successes": 3, "success": 0.75}
    report = (lease / "report.md").read_text()
    assert "| glam (GPU) | 1 | 2,048 |" in report and (lease / "curves.png").stat().st_size > 0


def test_a_baseline_that_is_not_task_equals_folder_exits_2(load_benchmark, tmp_path, capsys):
    curve = load_benchmark("glam_curve")
    _write(tmp_path / "train" / "GoToX-glam-s0.metrics.jsonl", _episodes(10, 1, 1))
    assert curve.main(["--lease", str(tmp_path), "--baseline", "GoToX"]) == 2
    assert "--baseline 'GoToX'" in capsys.readouterr().err
    assert curve.main(["--lease", str(tmp_path / "nothing")]) == 2


def test_skipped_minibatches_are_counted_and_an_earlier_lease_gets_its_own_rows(load_benchmark, tmp_path, capsys):
    curve = load_benchmark("glam_curve")
    lease, old = tmp_path / "lease", tmp_path / "old-lease"
    skips = [0, 4, 12, 0]
    _write(lease / "train" / "GoToX-glam-s0.metrics.jsonl",
           [{**_update(512 * (i + 1)), "losses/skipped_minibatches": float(k)} for i, k in enumerate(skips)])
    _write(old / "train" / "GoToX-glam-s0.metrics.jsonl", [_update(512), _update(1024, loss=float("nan"))])
    _write(old / "train" / "GoToY-glam-s0.metrics.jsonl", [_update(512)])   # a task this lease lacks: left out
    assert curve.main(["--lease", str(lease), "--earlier", str(old)]) == 0
    result = json.loads((lease / "result.json").read_text())["tasks"]
    assert set(result) == {"GoToX"}
    assert result["GoToX"]["lease"]["glam"]["0"]["skipped"] == {"minibatches": 16, "updates": 2, "of": 4}
    assert result["GoToX"]["lease"]["glam [old-lease]"]["0"]["nan_at"] == 1024
    assert result["GoToX"]["lease"]["glam [old-lease]"]["0"]["skipped"] is None   # its run had no guard
    assert result["GoToX"]["common_steps"] == 2048   # this lease's furthest step, not the earlier one's
    report = (lease / "report.md").read_text()
    assert "| 16 (2 of 4) |" in report and "| glam [old-lease] (GPU) | 0 | 1,024 |" in report
    assert curve.main(["--lease", str(lease), "--earlier", str(tmp_path / "none")]) == 2
    assert "--earlier" in capsys.readouterr().err
