"""Kill -9 a real `llmguide train` after a checkpoint, resume with run.resume=true, check continuity."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from llmguide.cli import main

ROLLOUT = 2 * 32  # num_envs x agent.num_steps


def _args(run_dir: Path, total: int, *extra: str) -> list[str]:
    return ["train", "env=crafter", "env.max_steps=100", "method=rnd", "agent=ppo", "num_envs=2",
            "agent.num_steps=32", "agent.hidden=32", "agent.update_epochs=2", "agent.num_minibatches=2",
            "method.module.hidden=32", "method.module.feature_dim=16", f"total_steps={total}",
            "checkpoint_every=128", "eval.episodes=1", "progress=false", f"run.dir={run_dir.parent}",
            f"run.name={run_dir.name}", *extra]


def _adam_step(optimizer_state: dict) -> float:
    return float(next(iter(optimizer_state["state"].values()))["step"])


def test_kill_then_resume_continues_step_optimiser_and_reward_module(tmp_path):
    run_dir = tmp_path / "resume"
    latest = run_dir / "checkpoints" / "latest.pt"
    code = "import sys; from llmguide.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, *_args(run_dir, 1_000_000)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if latest.exists() and torch.load(latest, weights_only=False)["step"] >= 2 * 128:
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    ckpt = torch.load(latest, weights_only=False)
    step = ckpt["step"]
    assert step % 128 == 0 and ckpt["agent"]["global_step"] == step

    assert main(_args(run_dir, step + 4 * ROLLOUT, "run.resume=true")) == 0

    final = torch.load(latest, weights_only=False)
    agent, before = final["agent"], ckpt["agent"]
    assert final["step"] == agent["global_step"] == step + 4 * ROLLOUT
    assert agent["updates"] == before["updates"] + 4 == final["step"] // ROLLOUT
    # Adam continued: 4 rollouts x 2 epochs x 2 minibatches more steps than at the checkpoint
    assert _adam_step(agent["optimizer"]) == _adam_step(before["optimizer"]) + 4 * 2 * 2
    # the RND module's predictor optimiser and normalisers continued too
    rnd_now, rnd_then = agent["reward_modules"][0], before["reward_modules"][0]
    assert rnd_now["name"] == rnd_then["name"] == "rnd"
    assert _adam_step(rnd_now["state"]["optimizer"]) > _adam_step(rnd_then["state"]["optimizer"]) > 0
    # metrics: one training record per rollout, no duplicates from the killed process after `step`
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    update_steps = [r["step"] for r in records if "losses/policy_loss" in r]
    assert update_steps == list(range(ROLLOUT, final["step"] + 1, ROLLOUT))
    assert (run_dir / "eval.json").exists()
