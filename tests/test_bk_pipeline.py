"""End to end through the run directories: collect → label → train (slow: real PPO and embedded LM)."""

from __future__ import annotations

import json

import pytest

from llmguide.core.config import load_config
from llmguide.data import EpisodeDataset


@pytest.mark.slow
def test_collect_label_train_bk_code(tmp_path):
    from llmguide.pipelines import bk

    base = ["env=babyai", "env.task=GoToRedBall", "num_envs=2", "agent.num_steps=64", "progress=false",
            f"run.dir={tmp_path}", "method=bk_code"]
    bk.collect(load_config([*base, "total_steps=512", "run.name=data"]))
    bk.collect(load_config([*base, "total_steps=256", "run.name=data", "run.resume=true", "seed=1"]))
    ds = EpisodeDataset(tmp_path / "data")
    assert len(ds) > 0 and len(ds.stats()["writers"]) == 2          # two collections merged on read
    bk.label(load_config([*base, f"method.data={tmp_path / 'data'}", "run.name=labels",
                          "method.code.iterations=1", "method.code.fix_retries=1", "method.code.max_tokens=64"]))
    manifest = json.loads((tmp_path / "labels" / "bk" / "manifest.json").read_text())
    assert manifest["method"] == "bk_code" and manifest["episodes"] == len(ds)
    assert (tmp_path / "labels" / "bk" / "final.py").exists()
    bk.train(load_config([*base, f"method.labels={tmp_path / 'labels'}", "run.name=train", "total_steps=256"]))
    summary = json.loads((tmp_path / "train" / "train_summary.json").read_text())
    assert summary["steps"] == 256
    assert (tmp_path / "train" / "checkpoints" / "latest.pt").exists()
