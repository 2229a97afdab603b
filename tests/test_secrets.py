"""API keys never reach the run directory: a real training run with a fake key, then grep."""

import os
import subprocess
import sys

FAKE_KEY = "sk-fake-4f1c9a7e2b3d"


def test_fake_api_key_is_written_nowhere_in_the_run_dir(tmp_path):
    env = {**os.environ, "OPENAI_API_KEY": FAKE_KEY, "MY_PROVIDER_KEY": FAKE_KEY}
    cmd = [sys.executable, "-m", "llmguide.cli", "train", "env=babyai", "method=none", "llm=http",
           "llm.api_key_env=MY_PROVIDER_KEY", f"+llm.api_key={FAKE_KEY}", "total_steps=256", "num_envs=2",
           "agent.num_steps=64", "eval.episodes=1", f"run.dir={tmp_path}", "run.name=secret", "checkpoint_every=128"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    run = tmp_path / "secret"
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any(p.name == "metrics.jsonl" for p in files) and any(p.suffix == ".pt" for p in files)
    for path in files:
        assert FAKE_KEY.encode() not in path.read_bytes(), f"key leaked into {path}"
    assert FAKE_KEY not in out.stdout and FAKE_KEY not in out.stderr
    assert "MY_PROVIDER_KEY" in (run / "config.yaml").read_text()
