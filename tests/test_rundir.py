"""Run directory: redacted config, metrics JSONL + TensorBoard, atomic checkpoints."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from omegaconf import OmegaConf

from llmguide.core.rundir import RunDir, atomic_write_bytes, read_metrics
from llmguide.pipelines import load_config


def test_config_metrics_and_tensorboard(tmp_path):
    cfg = load_config([f"run.dir={tmp_path}", "run.name=r1", "llm=http", "+llm.api_key=sk-fake-0123456789"])
    with RunDir.open(cfg) as run:
        run.log(10, {"charts/episodic_return": 1.5, "note": "x"})
        run.log(20, {"charts/episodic_return": torch.tensor(2.5)})
    path = tmp_path / "r1"
    saved = OmegaConf.load(path / "config.yaml")
    assert saved.llm.api_key_env == "OPENAI_API_KEY"
    records = read_metrics(path)
    assert [r["step"] for r in records] == [10, 20]
    assert records[1]["charts/episodic_return"] == 2.5
    assert any(p.name.startswith("events.out.tfevents") for p in (path / "tb").iterdir())
    blob = b"".join(p.read_bytes() for p in path.rglob("*") if p.is_file())
    assert b"sk-fake-0123456789" not in blob


def test_existing_run_is_not_overwritten_without_asking(tmp_path):
    cfg = load_config([f"run.dir={tmp_path}", "run.name=r"])
    with RunDir.open(cfg) as run:
        run.log(1, {"a": 1})
    with pytest.raises(FileExistsError, match="run.resume=true"):
        RunDir.open(cfg)
    cfg.run.resume = True
    with RunDir.open(cfg) as run:
        run.log(2, {"a": 2})
    assert [r["step"] for r in read_metrics(tmp_path / "r")] == [1, 2]


def test_checkpoint_round_trip_and_rotation(tmp_path):
    run = RunDir(tmp_path / "run")
    assert run.load_checkpoint() is None
    for step in (100, 200, 300):
        run.save_checkpoint({"weights": torch.full((3,), float(step))}, step, keep=2)
    state = run.load_checkpoint()
    assert state["step"] == 300
    assert torch.equal(state["weights"], torch.full((3,), 300.0))
    assert len(list((tmp_path / "run" / "checkpoints").glob("ckpt_*.pt"))) == 2
    assert not list((tmp_path / "run" / "checkpoints").glob(".*tmp"))
    run.close()


def test_atomic_write_survives_kill_mid_write(tmp_path):
    """A writer killed while rewriting a file leaves the previous complete version, never a torn one."""
    target = tmp_path / "state.bin"
    atomic_write_bytes(target, b"A" * 1000)
    script = textwrap.dedent(f"""
        from llmguide.core.rundir import atomic_write_bytes
        import sys
        print("ready", flush=True)
        i = 0
        while True:
            i += 1
            atomic_write_bytes({str(target)!r}, bytes([65 + i % 26]) * 5_000_000)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    import time

    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    data = target.read_bytes()
    assert len(set(data)) == 1, "file content is a mix of two writes"
    assert len(data) in (1000, 5_000_000)


def test_truncate_metrics_after_resume_point(tmp_path):
    run = RunDir(tmp_path / "run", tensorboard=False)
    for step in (1, 2, 3, 4):
        run.log(step, {"x": step})
    run.truncate_metrics_after(2)
    run.log(3, {"x": 30})
    run.close()
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(ln)["x"] for ln in lines] == [1, 2, 30]
