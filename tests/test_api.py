"""The Python API (issue 32 point 5): ``llmguide.train`` -> Run, ``llmguide.load_policy`` -> Policy with
``act`` / ``predict``, and a package root that stays light (nothing heavy imported until a function is called)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import llmguide
from llmguide.core.errors import ConfigError

TINY = dict(env="crafter", method="rnd", num_envs=2, total_steps=64, progress=False, log_every=32,
            agent={"num_steps": 32, "hidden": 32}, eval={"episodes": 2, "max_steps": 10})


def test_importing_the_package_is_light():
    code = ("import sys, llmguide; heavy = [m for m in ('torch', 'omegaconf', 'hydra', 'numpy', 'llmguide.pipelines',"
            " 'llmguide.api', 'llmguide.core') if m in sys.modules]; print(heavy); "
            "assert callable(llmguide.train) and callable(llmguide.load_policy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_overrides_as_a_list_a_dict_or_keywords_give_the_same_config():
    a = llmguide.load_config(["env=babyai", "agent.lr=0.001", "eval.greedy=false", "run.name=my run"])
    b = llmguide.load_config({"env": "babyai", "agent": {"lr": 1e-3}}, eval={"greedy": False}, run={"name": "my run"})
    assert a == b and b.run.name == "my run"
    with pytest.raises(ConfigError, match="did you mean total_steps"):
        llmguide.train(totl_steps=5)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return llmguide.train(TINY, run={"dir": str(tmp_path_factory.mktemp("api")), "name": "rnd"})


def test_train_returns_the_run(run):
    assert isinstance(run, llmguide.Run) and run.path.is_dir() and run.path.name == "rnd"
    assert run.config["method"]["name"] == "rnd" and run.config["total_steps"] == 64
    assert run.metrics and run.metrics[-1]["step"] >= 64
    assert run.eval["episodes"] == 2 and run.eval["episode_lengths"] == [10, 10]
    assert run.eval_return == run.eval["return_mean"] and run.report == run.path / "report.md"
    assert llmguide.load_run(run.path).eval == run.eval and "eval_return" in repr(run) and "train_return" in repr(run)


def test_the_policy_acts_like_a_stable_baselines3_model(run):
    policy = llmguide.load_policy(run.path)
    assert isinstance(policy, llmguide.Policy) and policy.step >= 64
    env = policy.make_env(seed=3)
    obs, _ = env.reset(seed=3)
    action = policy.act(obs)
    assert isinstance(action, int) and env.action_space.contains(action)
    assert policy.act(obs) == action                         # deterministic by default
    predicted, state = policy.predict(obs, deterministic=True)
    assert isinstance(predicted, np.ndarray) and predicted.shape == () and predicted == action and state is None
    assert policy.predict(obs, state="h")[1] == "h"          # SB3 hands the state back
    batch = {k: np.stack([v, v, v]) for k, v in obs.items()}
    actions, _ = policy.predict(batch)
    assert isinstance(actions, np.ndarray) and actions.tolist() == [action] * 3
    env.step(predicted)                                      # an env takes SB3's action as it is
    for _ in range(5):
        obs, *_ = env.step(policy.act(obs, deterministic=False))
    env.close()
    results = policy.evaluate(episodes=1)
    assert results["episodes"] == 1 and results["episode_lengths"] == [10]   # the run's eval.max_steps


def test_a_run_directory_that_is_not_one_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        llmguide.load_policy(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        llmguide.load_run(tmp_path)
