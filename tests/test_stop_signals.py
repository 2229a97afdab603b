"""Stop signals honoured everywhere (issue 70, items 2 and 3): real processes, real signals.

- A sweep (``llmguide train -m``): SIGTERM or Ctrl-C to the launcher is forwarded to its runs (no orphans), a run
  stopped that way (exit 130) is never retried, a run not yet started never starts, and one line says what
  finished and how to continue (exit 130).
- ``vector=async``: one Ctrl-C to the whole process group (as a terminal sends it) stops at the next step boundary
  with a checkpoint, without a traceback from every env worker.
- SIGTERM during setup (a stalled LM server at the start-up probe) or during the final evaluation: one line, exit
  130, and what can be written is (the checkpoint and report.md; eval.json is not).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from llmguide.core.rundir import safe_torch_load

TINY = ["env=crafter", "env.max_steps=40", "num_envs=2", "agent.num_steps=32", "agent.hidden=32", "method=none",
        "progress=false", "eval.episodes=0"]


def spawn(args: list[str], stderr: Path) -> subprocess.Popen:
    """A real ``llmguide`` process in its own session (a test can signal its whole group, as a terminal does)."""
    with open(stderr, "w") as err:
        return subprocess.Popen([sys.executable, "-m", "llmguide.cli", *args], stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)


def wait_for(condition, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert proc.poll() is None, f"exited early with {proc.returncode}"
        assert time.time() < deadline, "timed out"
        time.sleep(0.2)


def learning(run_dir: Path) -> bool:
    metrics = run_dir / "metrics.jsonl"
    return metrics.exists() and metrics.stat().st_size > 0


def holder(run_dir: Path) -> int | None:
    """The pid a run's lock file names (the ``llmguide train`` writing it)."""
    text = (run_dir / ".lock").read_text().strip() if (run_dir / ".lock").exists() else ""
    return int(text) if text.isdigit() else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


def lines(path: Path) -> list[str]:
    text = path.read_text()
    assert "Traceback" not in text, text
    return [line for line in text.splitlines() if line.strip()]


def ckpt_step(run_dir: Path) -> int | None:
    latest = run_dir / "checkpoints" / "latest.pt"
    return safe_torch_load(latest)["step"] if latest.exists() else None


def stop_all(proc: subprocess.Popen, pids: list[int] = ()) -> None:
    """Clean up after a failed test: the process group and any runs it left behind."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


# --- sweeps ------------------------------------------------------------------------------------------------------
def sweep(tmp_path: Path, *extra: str) -> tuple[list[str], Path]:
    args = ["train", "-m", "seed=0,1", *TINY, "total_steps=100000000", f"run.dir={tmp_path}", "run.name=sw", *extra]
    return args, tmp_path / "sw"


def test_sigterm_to_a_sweep_stops_every_run_and_leaves_no_orphan(tmp_path):
    args, root = sweep(tmp_path, "sweep.jobs=2", "sweep.retries=1")
    proc = spawn(args, tmp_path / "err")
    pids: list[int] = []
    try:
        wait_for(lambda: all(learning(root / f"seed-{s}") for s in (0, 1)), proc)
        pids = [holder(root / f"seed-{s}") for s in (0, 1)]
        assert all(pids), pids
        os.kill(proc.pid, signal.SIGTERM)                                  # the launcher only, as `kill PID` does
        assert proc.wait(timeout=120) == 130
        assert not [pid for pid in pids if alive(pid)]                     # each run stopped with it
    finally:
        stop_all(proc, pids)
    line, = lines(tmp_path / "err")
    assert line.startswith("sweep: SIGTERM: stopped; 0 of 2 runs finished, 2 stopped (2 with a checkpoint)"), line
    assert "continue with: llmguide train -m seed=0,1" in line and "run.resume=true" in line
    for s in (0, 1):
        log = (root / f"seed-{s}.log").read_text()
        assert "SIGTERM: stopped at step" in log and "attempt 2" not in log   # saved, and never retried
        assert ckpt_step(root / f"seed-{s}") is not None


def test_ctrl_c_to_a_sweep_is_not_retried_and_starts_no_further_run(tmp_path):
    args, root = sweep(tmp_path, "sweep.jobs=1", "sweep.retries=2")
    proc = spawn(args, tmp_path / "err")
    try:
        wait_for(lambda: learning(root / "seed-0"), proc)
        os.killpg(proc.pid, signal.SIGINT)                                 # a terminal's Ctrl-C: the whole group
        assert proc.wait(timeout=120) == 130
    finally:
        stop_all(proc)
    line, = lines(tmp_path / "err")
    assert line.startswith("sweep: SIGINT: stopped; 0 of 2 runs finished, 2 stopped (1 with a checkpoint)"), line
    log = (root / "seed-0.log").read_text()
    assert "SIGINT: stopped at step" in log and "stopped at once" not in log and "attempt 2" not in log
    assert not (root / "seed-1").exists()                                  # never started


# --- async workers -----------------------------------------------------------------------------------------------
def test_one_ctrl_c_with_async_workers_saves_a_checkpoint_without_worker_tracebacks(tmp_path):
    run_dir = tmp_path / "async"
    proc = spawn(["train", *TINY, "vector=async", "total_steps=100000000", f"run.dir={tmp_path}", "run.name=async"],
                 tmp_path / "err")
    try:
        wait_for(lambda: learning(run_dir), proc)
        os.killpg(proc.pid, signal.SIGINT)                                 # reaches the env workers too
        assert proc.wait(timeout=120) == 130
    finally:
        stop_all(proc)
    first, last = lines(tmp_path / "err")
    assert "stopping at the next step boundary" in first
    step = ckpt_step(run_dir)
    assert step and f"SIGINT: stopped at step {step}, checkpoint and metrics saved" in last


# --- outside training --------------------------------------------------------------------------------------------
class Stall(BaseHTTPRequestHandler):
    """An LM server that takes requests and never answers (until the test ends)."""

    seen = threading.Event()
    release = threading.Event()

    def do_GET(self):
        self.do_POST()

    def do_POST(self):
        Stall.seen.set()
        Stall.release.wait(120)

    def log_message(self, *args):
        pass


@pytest.fixture
def stalled_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stall)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    Stall.release.set()
    server.shutdown()
    server.server_close()


def test_sigterm_during_setup_is_one_line(tmp_path, stalled_server):
    proc = spawn(["train", "env=crafter", "method=ellm", "llm=http", f"llm.base_url={stalled_server}", "llm.timeout=60",
                  "total_steps=64", "progress=false", f"run.dir={tmp_path}", "run.name=setup"], tmp_path / "err")
    try:
        wait_for(Stall.seen.is_set, proc, timeout=120)                     # the start-up probe waits for an answer
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 130
    finally:
        stop_all(proc)
    line, = lines(tmp_path / "err")
    assert line.startswith("llmguide: SIGTERM: stopped"), line


def test_sigterm_during_the_final_evaluation_keeps_the_checkpoint_and_writes_the_report(tmp_path):
    run_dir = tmp_path / "ev"
    args = [a for a in TINY if a != "eval.episodes=0"] + ["eval.episodes=100000", "total_steps=64"]
    proc = spawn(["train", *args, f"run.dir={tmp_path}", "run.name=ev"], tmp_path / "err")
    try:
        wait_for(lambda: ckpt_step(run_dir) == 64, proc)                   # the final checkpoint: evaluating now
        time.sleep(1)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 130
    finally:
        stop_all(proc)
    line, = lines(tmp_path / "err")
    assert line.startswith("llmguide: SIGTERM during the final evaluation: the checkpoint (step 64) and the "
                           "report"), line
    assert f"evaluate with: llmguide eval {run_dir}" in line
    assert (run_dir / "report.md").exists() and not (run_dir / "eval.json").exists()
    assert json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])["step"] <= 64
