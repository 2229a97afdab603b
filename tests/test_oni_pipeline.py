"""End to end: PPO on a real MiniHack task with ONI-Retrieval labelled by the real embedded LM."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("minihack")

from llmguide.pipelines import load_config  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def oni_cfg(tmp_path, method: str, *extra: str):
    return load_config(["env=minihack", "env.id=MiniHack-KeyRoom-S5-v0", f"method={method}", "num_envs=2",
                        "agent.num_steps=64", "agent.hidden=32", "total_steps=256", "eval.episodes=0", "progress=false",
                        f"run.dir={tmp_path}", f"run.name={method}", *extra])


def test_oni_retrieval_trains_ppo_and_records_annotation_stats(tmp_path):
    import torch

    from llmguide.pipelines import run as run_verb

    assert run_verb("train", oni_cfg(tmp_path, "oni_retrieval")) == 0
    run = tmp_path / "oni_retrieval"
    stats = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if "lm/annot_requests" in x][-1]
    assert stats["lm/annot_duplicate_requests"] == 0
    assert {"lm/calls", "lm/hit_rate", "lm/fallbacks"} <= set(stats)   # the LM service's definitions
    assert (run / "eval.json").exists() and (run / "report.md").exists()
    assert stats["lm/annot_requests"] >= 1  # the real env produced messages that were sent to the LM
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("reward/oni_retrieval/annot/requests" in r for r in records)
    state = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)["agent"]
    assert state["global_step"] == 256
    saved = state["reward_modules"][0]
    assert saved["name"] == "oni_retrieval" and saved["coef"] == pytest.approx(0.4)
    labels = saved["state"]["annotator"]["labels"]
    assert "" not in labels and all(v in (0.0, 1.0, None) for v in labels.values())


@pytest.mark.slow
def test_motif_collect_label_train_end_to_end(tmp_path):
    from llmguide.methods.oni.motif_recipe import collect, label
    from llmguide.pipelines import run

    def train(cfg):
        return run("train", cfg)

    extra = [f"method.data_dir={tmp_path / 'data'}", "method.collect_steps=200", "method.num_pairs=4",
             "method.label_batch=2"]
    cfg = oni_cfg(tmp_path, "motif", *extra)
    assert collect(cfg) == 0 and label(cfg) == 0
    stats = json.loads((tmp_path / "data" / "label_stats.json").read_text())
    assert stats["todo"] == 0 and stats["done"] + stats["unparseable"] == 4
    assert label(cfg) == 0  # nothing left: a rerun sends no request
    assert json.loads((tmp_path / "data" / "label_stats.json").read_text())["lm_submitted"] == 0
    assert train(cfg) == 0
    assert (tmp_path / "data" / "reward_model.pt").exists()
    reward = json.loads((tmp_path / "motif" / "motif_reward.json").read_text())
    assert all(v == 0.0 or v > reward["threshold"] for v in reward["messages"].values())
    assert (tmp_path / "motif" / "checkpoints" / "latest.pt").exists()
