"""agent=scripted: the scripted expert (or a uniform policy) through the Runner, as a study's reference row."""

from __future__ import annotations

import json

import pytest

from llmguide.cli import main


def _episodes(run) -> list[dict]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if "charts/success" in r]


def _train(tmp_path, name: str, *overrides: str) -> list[dict]:
    code = main(["train", "env=crafter", "method=none", "agent=scripted", "num_envs=2", "total_steps=1600",
                 "eval.episodes=1", "eval.max_steps=400", "progress=false", f"run.dir={tmp_path}", f"run.name={name}",
                 *overrides])
    assert code == 0
    return _episodes(tmp_path / name)


def test_the_expert_plays_a_sparse_task_through_the_runner_and_random_does_not(tmp_path):
    expert = _train(tmp_path, "expert", "env.task=place_table")
    rand = _train(tmp_path, "random", "env.task=place_table", "agent.policy=random")
    rate = sum(r["charts/success"] for r in expert) / len(expert)
    assert len(expert) >= 10 and rate >= 0.9, rate
    # the same per-episode keys as a PPO run: the harness reads it as any arm
    assert all("charts/episodic_length" in r and "achievements/place_table" in r for r in expert)
    rand_rate = sum(r["charts/success"] for r in rand) / max(len(rand), 1)
    assert rand_rate < rate - 0.3, (rand_rate, rate)
    result = json.loads((tmp_path / "expert" / "eval.json").read_text())
    assert result["episodes"] == 1 and result["success_rate"] == 1.0


def test_on_a_task_the_expert_pursues_only_the_task_its_prerequisites_and_its_vitals():
    from llmguide.envs.registry import make_expert

    expert = make_expert({"name": "crafter"}, seed=0, target="make_stone_pickaxe")
    assert {"collect diamond", "make iron sword", "place furnace", "collect sapling"} <= expert.exclude
    assert not {"collect wood", "place table", "make wood pickaxe", "collect stone", "make stone pickaxe",
                "eat cow", "collect drink", "wake up", "defeat zombie"} & expert.exclude
    with pytest.raises(ValueError, match="unknown goal"):
        make_expert({"name": "crafter"}, seed=0, target="fly")


@pytest.mark.parametrize("overrides,key,text", [
    (["env=babyai"], "agent.policy", "has no scripted expert"),
    (["env=crafter", "agent.policy=bot"], "agent.policy", "must be one of"),
    (["env=crafter", "method=rnd"], "agent", "never learns"),
])
def test_what_a_scripted_agent_cannot_do_is_refused_before_the_run(overrides, key, text, tmp_path, capsys):
    code = main(["train", "agent=scripted", *overrides, "total_steps=8", f"run.dir={tmp_path}", "run.name=x",
                 "progress=false"])
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"config error at '{key}'" in err and text in err
    assert not (tmp_path / "x").exists()
