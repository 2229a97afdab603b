"""Scale-out on Ray (issue #18) on a local 2-CPU Ray cluster: env-runner actors, the LM actor, Ray sweeps.

Marked ``slow`` and ``ray``: ``make test`` skips them, ``make test-slow`` (CI) and ``make test-ray`` run them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.ray]

SMALL = ["total_steps=256", "num_envs=4", "agent.num_steps=32", "agent.hidden=32", "eval.episodes=1",
         "log_every=64", "progress=false", "ray.num_cpus=2"]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             namespace="llmguide-test")
    yield ray
    ray.shutdown()


def _cli(args: list[str], env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmguide.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def _babyai(num_envs: int = 4):
    from llmguide.pipelines import load_config

    return load_config(["env=babyai", "env.max_steps=12", f"num_envs={num_envs}", "agent.num_steps=32",
                        "agent.hidden=32"])


def test_two_runner_vector_env_matches_the_local_vector_env_step_for_step(local_ray):
    from llmguide.distributed.vector import RayVectorEnv
    from llmguide.envs import make_vector_env, split_infos

    cfg = _babyai()
    local = make_vector_env(cfg.env, 4, 7, "sync")
    remote = RayVectorEnv(cfg.env, 4, 7, runners=2, ray_cfg=cfg.ray)   # what the Runner builds for runners=2
    assert isinstance(remote, RayVectorEnv) and remote.slices == [(0, 2), (2, 4)]
    assert remote.single_observation_space == local.single_observation_space
    a, _ = local.reset(seed=7)
    b, _ = remote.reset(seed=7)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    rng = np.random.default_rng(0)
    finished = 0
    for t in range(60):
        actions = rng.integers(0, local.single_action_space.n, size=4)
        (oa, ra, ta, ua, ia), (ob, rb, tb, ub, ib) = local.step(actions), remote.step(actions)
        assert all(np.array_equal(oa[k], ob[k]) for k in oa), t
        assert np.array_equal(ra, rb) and np.array_equal(ta, tb) and np.array_equal(ua, ub), t
        sa, sb = split_infos(ia, 4), split_infos(ib, 4)
        assert [(s["caption"], s["events"], s["mission"]) for s in sa] == \
               [(s["caption"], s["events"], s["mission"]) for s in sb], t
        done = np.logical_or(ta, ua)
        for i in np.flatnonzero(done):   # the finished episode's last observation and statistics
            assert all(np.array_equal(ia["final_obs"][i][k], ib["final_obs"][i][k]) for k in oa)
            assert sa[i]["episode"]["l"] == sb[i]["episode"]["l"]
        finished += int(done.sum())
    assert finished >= 8   # episodes of <= 12 steps: autoreset exercised in both actors
    local.close()
    remote.close()


def _kill_at(envs, at: int):
    """A learner callback that kills env-runner actor 0 (Ray may restart it) once ``at`` env steps are done."""
    from llmguide.learners.callbacks import Callback

    class KillAt(Callback):
        killed_at = None
        truncated_after_kill = None

        def on_step(self, step):   # the kill lands a step or two later (ray.kill is asynchronous)
            if envs.runner_restarts and self.truncated_after_kill is None:
                self.truncated_after_kill = step.truncated.copy()
            if self.killed_at is None and step.step >= at:
                ray.kill(envs.actors[0], no_restart=False)
                self.killed_at = step.step
            return True

    return KillAt()


def test_a_killed_env_runner_is_restarted_and_ppo_finishes_with_its_step_count(local_ray):
    from llmguide.learners.ppo import PPO
    from llmguide.pipelines.runner import make_run_envs

    cfg = _babyai()
    cfg.runners = 2
    envs = make_run_envs(cfg)   # the Runner's choice: runners=2 -> two env-runner actors
    kill = _kill_at(envs, at=64)
    agent = PPO(envs, cfg.agent, seed=0)
    agent.learn(256, callback=kill, progress=False)
    assert agent.global_step == 256 and kill.killed_at == 64
    assert envs.runner_restarts == 1
    # the dead actor's envs (0, 1) were cut: reported as truncated, the other actor's untouched
    assert kill.truncated_after_kill.tolist()[:2] == [True, True]
    obs, *_ = envs.step(np.zeros(4, dtype=np.int64))   # the restarted actor serves steps again
    assert obs["image"].shape[0] == 4
    envs.close()


def test_restarts_are_bounded_by_max_restarts(local_ray):
    from llmguide.core.errors import LLMGuideError
    from llmguide.distributed.vector import RayVectorEnv

    cfg = _babyai(2)
    cfg.ray.max_restarts = 0
    envs = RayVectorEnv(cfg.env, 2, 0, runners=1, ray_cfg=cfg.ray)
    envs.reset(seed=0)
    ray.kill(envs.actors[0], no_restart=False)
    with pytest.raises(LLMGuideError, match="max_restarts=0"):
        for _ in range(100):   # ray.kill is asynchronous: a step or two may still be answered
            envs.step(np.zeros(2, dtype=np.int64))
            time.sleep(0.05)
    envs.close()


def test_lm_actor_is_shared_falls_back_counted_when_killed_then_recovers(local_ray, tmp_path):
    from llmguide.distributed.lm import ActorLM
    from llmguide.llm.service.core import LLMService
    from llmguide.pipelines import load_config
    from llmguide.pipelines.services import make_run_lm

    cfg = load_config(["llm=oracle", "llm.actor=true", "env=crafter"])
    lm_a, lm_b = make_run_lm(cfg), make_run_lm(cfg)   # the Runner's choice: llm.actor=true -> the actor's client
    assert isinstance(lm_a, ActorLM)
    # one named actor per LM config: both clients reach the same process
    assert ray.get(lm_a.actor.pid.remote()) == ray.get(lm_b.actor.pid.remote())
    prompt = "You see tree, grass. You face tree. What should you do next?"
    service = LLMService(lm_a, max_retries=0, backoff_base=0.01, backoff_max=0.5, timeout=30.0)
    first = service.submit_generate(prompt).result(timeout=60)
    assert first.error is None and first.text.startswith("- ")
    pid = ray.get(lm_a.actor.pid.remote())
    ray.kill(lm_a.actor, no_restart=False)
    for i in range(100):   # ray.kill is asynchronous: a call or two may still be answered
        fallback = service.submit_generate(f"{prompt} (after the kill {i})").result(timeout=60)
        if fallback.error is not None:
            break
        time.sleep(0.05)
    assert fallback.error is not None and fallback.text == ""
    assert service.lm_metrics()["lm/fallbacks"] >= 1       # counted, not raised
    deadline, answer = time.monotonic() + 90, None
    while time.monotonic() < deadline:                # Ray restarts the actor; the circuit breaker probes
        answer = service.submit_generate(prompt + " (recovered)").result(timeout=60)
        if answer.error is None:
            break
        time.sleep(0.3)
    assert answer is not None and answer.error is None and answer.text.startswith("- ")
    assert ray.get(lm_a.actor.pid.remote()) != pid   # a new actor process answered
    service.close()
    ray.kill(lm_a.actor, no_restart=True)


FLAKY = '''
import os
from pathlib import Path
from llmguide.rewards.base import RewardModule


class Flaky(RewardModule):
    """Fails its run's first attempt (seed 0) or every attempt (seed 1)."""

    name = "flaky"

    def __init__(self, obs_space, num_envs, device="cpu", seed=0):
        flag = Path(os.environ["FLAKY_DIR"]) / f"seed{seed}"
        if seed == 1 or not flag.exists():
            flag.touch()
            raise RuntimeError(f"flaky failure for seed {seed}")

    def compute(self, batch):
        return 0.0 * batch.rewards
'''


@pytest.mark.parametrize("launcher", ["ray", "local"])
def test_sweep_of_four_runs_retries_reports_failures_and_aggregates(tmp_path, launcher):
    (tmp_path / "flaky.py").write_text(FLAKY)
    (tmp_path / "conf" / "method").mkdir(parents=True)
    (tmp_path / "conf" / "method" / "flaky.yaml").write_text(
        f"name: flaky\nreward: {tmp_path / 'flaky.py'}:Flaky\nextrinsic_coef: 1.0\nintrinsic_coef: 1.0\n")
    (tmp_path / "flags").mkdir()
    env = {"LLMGUIDE_CONFIG_PATH": str(tmp_path / "conf"), "FLAKY_DIR": str(tmp_path / "flags")}
    out = _cli(["train", "-m", "method=none,flaky", "seed=0,1", "env=crafter", "env.max_steps=40", *SMALL,
                "total_steps=128", f"sweep.launcher={launcher}", "sweep.jobs=2", "sweep.retries=1",
                f"run.dir={tmp_path}", "run.name=sw"], env)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]             # one run failed for good: exit 1, named
    assert ("4 runs as Ray tasks" if launcher == "ray" else "4 runs, 2 at a time") in out.stdout
    assert "retry  method-flaky_seed-0" in out.stdout and "ok     method-flaky_seed-0 (attempt 2)" in out.stdout
    assert "FAILED method-flaky_seed-1 (exit 1 after 2 attempt(s)" in out.stdout
    assert "1 of 4 runs failed: ['method-flaky_seed-1']" in out.stderr
    done = ["method-none_seed-0", "method-none_seed-1", "method-flaky_seed-0"]
    for name in done:   # every finished run is a complete local run directory
        run = tmp_path / "sw" / name
        assert (run / "checkpoints" / "latest.pt").exists() and (run / "eval.json").exists()
        assert json.loads((run / "eval.json").read_text())["step"] == 128
    assert "attempt 2" in (tmp_path / "sw" / "method-flaky_seed-1.log").read_text()
    report_line = out.stdout.split("aggregate with:\n")[1].splitlines()[0].split()
    assert sorted(Path(p).name for p in report_line[2:]) == sorted(done)
    rep = _cli(["report", *report_line[2:], "--out", str(tmp_path / "rep")])
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert all(name in (tmp_path / "rep" / "report.md").read_text() for name in done)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_runner_training_run_logs_the_same_metrics_as_the_local_run(tmp_path):
    common = ["train", "env=babyai", "env.max_steps=16", "method=rnd", *SMALL, f"run.dir={tmp_path}",
              "deterministic=true"]
    local = _cli([*common, "run.name=local"])
    assert local.returncode == 0, local.stderr[-3000:]
    dist = _cli([*common, "run.name=ray", "runners=2"])
    assert dist.returncode == 0, dist.stderr[-3000:]
    a, b = _records(tmp_path / "local" / "metrics.jsonl"), _records(tmp_path / "ray" / "metrics.jsonl")
    keys = ("charts/episodic_return", "charts/episodic_length", "losses/value_loss", "losses/policy_loss",
            "charts/intrinsic_reward")
    pick = [[{k: r[k] for k in keys if k in r} | {"step": r["step"]} for r in recs if any(k in r for k in keys)]
            for recs in (a, b)]
    assert pick[0] and any("charts/episodic_return" in r for r in pick[0])
    assert pick[0] == pick[1]      # the same envs, seeds and actions: identical episodes, losses, RND rewards
    assert json.loads((tmp_path / "ray" / "eval.json").read_text())["step"] == 256
    assert max(r["step"] for r in b) == 256
    # env-runner restarts are logged with the run's metrics (none here); a local run has no such key
    assert [r["env/runner_restarts"] for r in b if "env/runner_restarts" in r][-1] == 0
    assert not any("env/runner_restarts" in r for r in a)
