"""`llmguide train` (standard pipeline, DQN on Crafter) then `llmguide eval RUN_DIR`."""

from __future__ import annotations

import json

import torch

from llmguide.cli import main
from llmguide.core.rundir import read_metrics


def test_train_dqn_on_crafter_then_eval_run_dir(tmp_path, capsys):
    run_dir = tmp_path / "dqn"
    args = ["train", "env=crafter", "env.max_steps=60", "method=none", "agent=dqn", "num_envs=2",
            "total_steps=512", "agent.hidden=32", "agent.buffer_size=2000", "agent.learning_starts=128",
            "agent.log_interval=128", "agent.target_update_every=256", "eval.episodes=1", "progress=false",
            f"run.dir={tmp_path}", "run.name=dqn"]
    assert main(args) == 0
    state = torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=False)
    assert state["step"] == state["agent"]["global_step"] == 512 and state["agent"]["algo"] == "dqn"
    # 2 envs x 16 steps per chunk, train_every=4: updates from the chunk crossing learning_starts
    assert state["agent"]["updates"] == (512 - 96) // 4
    records = read_metrics(run_dir)
    episodes = [r for r in records if "charts/episodic_return" in r]
    assert len(episodes) >= 2 * (512 // 2 // 60) and all(r["charts/episodic_length"] <= 60 for r in episodes)
    assert any("achievements/collect_wood" in r for r in episodes)
    assert any("losses/td_loss" in r for r in records)
    trained = json.loads((run_dir / "eval.json").read_text())
    assert trained["step"] == 512 and trained["episodes"] == 1 and trained["length_mean"] <= 60

    (run_dir / "eval.json").unlink()
    assert main(["eval", str(run_dir), "eval.episodes=2", "env.max_steps=30"]) == 0
    result = json.loads((run_dir / "eval.json").read_text())
    assert result["step"] == 512 and result["greedy"] is True and result["episodes"] == 2
    assert result["sampled"]["greedy"] is False and len(result["sampled"]["episode_returns"]) == 2
    assert result["episode_lengths"] == [30, 30] or max(result["episode_lengths"]) <= 30
    assert "crafter_score" in result and len(result["episode_achievements"]) == 2

    assert main(["eval", str(run_dir), "eval.no_such_key=3"]) == 2
    assert "eval.no_such_key" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "missing")]) == 1


def test_agent_keys_are_validated_once_learners_are_imported():
    import pytest

    import llmguide.learners  # noqa: F401  (registers the agent.* rules)
    from llmguide.core.errors import ConfigError
    from llmguide.pipelines import load_config

    with pytest.raises(ConfigError, match="agent.n_step"):
        load_config(["agent=dqn", "agent.n_step=0"])
    with pytest.raises(ConfigError, match="agent.recurrent"):
        load_config(["agent=ppo", "agent.recurrent=transformer"])
    assert load_config(["agent=ppo", "agent.recurrent=lstm"]).agent.recurrent == "lstm"
