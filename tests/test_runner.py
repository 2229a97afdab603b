"""The Runner: a new reward is one file + one YAML; every run writes the same artefacts; sweeps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ARTEFACTS = {"config.yaml", "metrics.jsonl", "tb", "checkpoints", "eval.json", "report.md"}

TOY_REWARD = '''
import numpy as np
from llmguide.rewards.base import RewardModule


class ActionOne(RewardModule):
    """Pays `bonus` whenever the agent takes action 1."""

    name = "action_one"

    def __init__(self, obs_space, num_envs, device="cpu", seed=0, bonus=1.0):
        self.bonus = float(bonus)
        self.watched = 0

    def watch(self, step):
        self.watched += len(step.actions)

    def compute(self, batch):
        return self.bonus * (np.asarray(batch.actions) == 1).astype(np.float32)

    def metrics(self):
        return {"watched": float(self.watched)}
'''


def _cli(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "llmguide.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


SMALL = ["env=crafter", "total_steps=128", "num_envs=2", "agent.num_steps=32", "agent.hidden=32", "eval.episodes=1",
         "env.max_steps=40", "log_every=64", "progress=false"]


def test_a_new_reward_is_one_file_and_one_yaml_trained_through_the_cli(tmp_path):
    (tmp_path / "my_reward.py").write_text(TOY_REWARD)
    conf = tmp_path / "conf" / "method"
    conf.mkdir(parents=True)
    (conf / "action_one.yaml").write_text(f"name: action_one\nreward: {tmp_path / 'my_reward.py'}:ActionOne\n"
                                          "extrinsic_coef: 1.0\nintrinsic_coef: 0.5\nmodule:\n  bonus: 2.0\n")
    env = {"LLMGUIDE_CONFIG_PATH": str(tmp_path / "conf")}
    out = _cli(["train", "method=action_one", *SMALL, f"run.dir={tmp_path}", "run.name=toy"], env)
    assert out.returncode == 0, out.stderr[-2000:]
    run = tmp_path / "toy"
    assert ARTEFACTS <= {p.name for p in run.iterdir()}
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    bonus = [r["charts/intrinsic_reward/action_one"] for r in records if "charts/intrinsic_reward/action_one" in r]
    assert bonus and all(0.0 <= b <= 2.0 for b in bonus) and max(bonus) > 0
    assert [r["reward/action_one/watched"] for r in records if "reward/action_one/watched" in r][-1] == 128
    returns = [r["charts/episodic_return"] for r in records if "charts/episodic_return" in r]
    assert returns and all(float(x).is_integer() for x in returns)   # the env return, never the shaped one
    state = __import__("torch").load(run / "checkpoints" / "latest.pt", weights_only=False)
    assert [m["name"] for m in state["agent"]["reward_modules"]] == ["action_one"]
    # a wrong module key is a config error naming it, before any compute
    bad = _cli(["train", "method=action_one", "method.module.bonnus=1.0", *SMALL, f"run.dir={tmp_path}"], env)
    assert bad.returncode == 2 and "method.module.bonnus" in bad.stderr
    assert "action_one" in _cli(["train", "--help"], env).stdout


LM_REWARD = '''
import numpy as np
from llmguide.rewards.base import RewardModule


class AskedCaption(RewardModule):
    """Pays 1 for a transition whose caption the LM has answered with some text (never waits)."""

    name = "asked"

    def __init__(self, obs_space, num_envs, service, device="cpu", seed=0):
        self.service, self.futures, self.rows = service, {}, []

    def watch(self, step):
        row = []
        for info in step.infos:
            caption = info["caption"]
            if caption not in self.futures:
                self.futures[caption] = self.service.submit_generate(f"Caption: {caption}", max_tokens=32)
            done = self.futures[caption].done()
            row.append(float(done and bool(self.futures[caption].result().text.strip())))
        self.rows.append(row)

    def compute(self, batch):
        out, self.rows = np.asarray(self.rows, np.float32), []
        return out
'''


def test_an_lm_backed_reward_is_one_file_and_one_yaml_and_gets_the_runs_lm_service(tmp_path):
    (tmp_path / "asked.py").write_text(LM_REWARD)
    conf = tmp_path / "conf" / "method"
    conf.mkdir(parents=True)
    (conf / "asked.yaml").write_text(f"name: asked\nreward: {tmp_path / 'asked.py'}:AskedCaption\n"
                                     "extrinsic_coef: 0.0\nintrinsic_coef: 1.0\n")
    env = {"LLMGUIDE_CONFIG_PATH": str(tmp_path / "conf"), "LLMGUIDE_CACHE_DIR": str(tmp_path / "cache")}
    out = _cli(["train", "method=asked", "llm=oracle", *SMALL, f"run.dir={tmp_path}", "run.name=lm"], env)
    assert out.returncode == 0, out.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "lm" / "metrics.jsonl").read_text().splitlines()]
    lm = [r for r in records if "lm/requests" in r][-1]
    assert lm["lm/requests"] >= 1 and lm["lm/calls"] >= 1 and "lm/hit_rate" in lm
    assert max(r.get("charts/intrinsic_reward/asked", 0.0) for r in records) > 0   # answers arrived and paid


def test_sweep_runs_every_combination_reports_failures_and_prints_the_report_command(tmp_path):
    out = _cli(["train", "-m", "method=none,rnd", "seed=0,1", *SMALL, "eval.episodes=0", "sweep.jobs=2",
                f"run.dir={tmp_path}", "run.name=sw"])
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    runs = sorted(p.name for p in (tmp_path / "sw").iterdir() if p.is_dir() and p.name != "report")
    assert (tmp_path / "sw" / "report" / "report.md").exists()   # the sweep's own aggregate report
    assert runs == ["method-none_seed-0", "method-none_seed-1", "method-rnd_seed-0", "method-rnd_seed-1"]
    for name in runs:
        assert (tmp_path / "sw" / name / "checkpoints" / "latest.pt").exists()
    assert "llmguide report " in out.stdout and str(tmp_path / "sw" / "method-rnd_seed-1") in out.stdout
    # a bad combination fails before any run starts, naming the key
    bad = _cli(["train", "-m", "method=none,rnd", "agent.gamma=0.9,2.0", *SMALL, f"run.dir={tmp_path}",
                "run.name=bad"])
    assert bad.returncode == 2 and "agent.gamma" in bad.stderr and not (tmp_path / "bad").exists()


@pytest.mark.parametrize("method", ["none", "ellm_oracle"])
def test_eval_verb_rewrites_eval_json_from_the_checkpoint(tmp_path, method):
    assert _cli(["train", f"method={method}", *SMALL, f"run.dir={tmp_path}", "run.name=r"]).returncode == 0
    (tmp_path / "r" / "eval.json").unlink()
    out = _cli(["eval", str(tmp_path / "r"), "eval.episodes=1"])
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "r" / "eval.json").read_text())
    assert result["step"] == 128 and result["episodes"] == 1 and result["sampled"]["episodes"] == 1
    assert Path(tmp_path / "r" / "report.md").exists()


def test_wandb_logging_in_offline_mode_mirrors_the_metrics(tmp_path):
    pytest.importorskip("wandb")
    out = _cli(["train", "method=none", *SMALL, "logger.wandb=true", "logger.project=llmguide-test",
                f"run.dir={tmp_path}", "run.name=wb"], {"WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    assert out.returncode == 0, out.stderr[-2000:]
    offline = list((tmp_path / "wb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert offline and offline[0].stat().st_size > 0
    data = offline[0].read_bytes()   # the offline run's record stream holds the logged metric names
    assert b"charts/episodic_return" in data and b"losses/value_loss" in data
