"""End to end through the run directories: collect → label → train (slow: real PPO; oracle LM)."""

from __future__ import annotations

import json

import pytest

from llmguide.data import EpisodeDataset
from llmguide.pipelines import load_config


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["bk_code", "bk_pref", "bk_goal"])
def test_collect_label_train_with_oracle_knowledge(tmp_path, variant):
    from llmguide.methods.bk import recipe as bk
    from llmguide.pipelines import run

    base = ["env=babyai", "num_envs=2", "agent.num_steps=64", "progress=false", f"run.dir={tmp_path}",
            f"method={variant}", "eval.episodes=1"]
    data = [*base, "env.task=Pretraining-S20", "env.max_steps=64", "run.name=data"]
    bk.collect(load_config([*data, "total_steps=1024"]))
    bk.collect(load_config([*data, "total_steps=512", "run.resume=true", "seed=1"]))
    ds = EpisodeDataset(tmp_path / "data")
    assert len(ds) > 0 and len(ds.stats()["writers"]) == 2          # two collections merged on read
    task = [*base, "env.task=GoToLocal-RedBall-S20", "env.max_steps=64"]
    extra = {"bk_code": ["method.code.iterations=1"], "bk_goal": ["method.goal.iterations=2"],
             "bk_pref": ["method.pref.num_pairs=60", "method.pref.min_usable=10"]}[variant]
    bk.label(load_config([*task, "llm=oracle", f"method.data={tmp_path / 'data'}", "run.name=labels", *extra]))
    manifest = json.loads((tmp_path / "labels" / "bk" / "manifest.json").read_text())
    assert manifest["method"] == variant and manifest["episodes"] == len(ds) and manifest["failed"] is None
    assert manifest["oracle_mission"] == "go to the red ball"
    run("train", load_config([*task, f"method.labels={tmp_path / 'labels'}", "run.name=train", "total_steps=256"]))
    assert (tmp_path / "train" / "eval.json").exists()
    metrics = (tmp_path / "train" / "metrics.jsonl").read_text()
    assert f"reward/{variant}/phi_factor" in metrics
