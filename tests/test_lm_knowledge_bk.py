"""benchmarks/analyses/lm_knowledge.py --method bk_code --from-labels: the knowledge probe measures the programs a BK
study trains on (its label runs) before any RL, and names a program that is the prompt's example (issue 66)."""

from __future__ import annotations

import json
import shutil

import pytest


def test_the_probe_measures_a_studys_programs_and_names_the_one_that_copies_the_example(load_benchmark, tmp_path):
    from llmguide.methods.bk import recipe as bk
    from llmguide.pipelines import load_config

    probe = load_benchmark("lm_knowledge")
    prep = tmp_path / "prep"
    base = ["env=babyai", "num_envs=2", "agent.num_steps=64", "progress=false", f"run.dir={prep}", "method=bk_code",
            "agent.image_encoder=flat", "env.max_steps=64"]
    bk.collect(load_config([*base, "env.task=GoToLocal-RedBall-S20", "run.name=data", "total_steps=512"]))
    task = [*base, "env.task=GoToLocal-RedBall-S20", f"method.data={prep / 'data'}", "method.code.iterations=1"]
    bk.label(load_config([*task, "llm=oracle", "run.name=labels-bk_code-oracle"]))
    bk.label(load_config([*task, "llm=prompt_only", "method.tell_task=false", "run.name=labels-bk_code-prompt-only"]))
    # an "LM" whose program is the example, character for character (what Qwen's S30 program did)
    shutil.copytree(prep / "labels-bk_code-prompt-only", prep / "labels-bk_code-qwen-agnostic")
    out = tmp_path / "out"
    assert probe.main(["--method", "bk_code", "--env-id", "babyai", "--task", "GoToLocal-RedBall-S20", "--n", "200",
                       "--from-labels", str(prep), "--arms", "oracle,prompt-only,qwen-agnostic,qwen-offdomain",
                       "--out", str(out)]) == 0
    result = json.loads((out / "bk_code-GoToLocal-RedBall-S20.json").read_text())
    assert result["setup"]["label_runs"] == "<prep>" and result["setup"]["states"] == 200
    assert result["setup"]["data"] == "<prep>/data"   # no machine path in a result
    oracle, example, copy = (result[a]["runs"][0] for a in ("oracle", "prompt-only", "qwen-agnostic"))
    assert oracle["valid"] and oracle["spearman_vs_oracle"] == pytest.approx(1.0)
    assert oracle["same_values_as_example"] is False and result["oracle"]["copies_example"] == 0
    assert example["same_values_as_example"] is True and example["spearman_vs_example"] == pytest.approx(1.0)
    assert copy["same_values_as_example"] is True and result["qwen-agnostic"]["copies_example"] == 1
    assert result["qwen-offdomain"]["runs"] == [{"seed": 0, "ran": False}]   # no label run: measured as not run
    assert not (prep / "labels-bk_code-qwen-offdomain").exists()              # and none was started
