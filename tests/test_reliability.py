"""A run directory nothing can corrupt (issue 49): one writer per run, resume from the saved config, a clean
Ctrl-C / SIGTERM, environment errors as one line, a NaN guard, checked inputs.

Real processes where it matters: two ``llmguide train`` of one run, a real SIGINT / SIGTERM to a child, a full
tmpfs and a read-only bind mount in a private mount namespace (``unshare -m``; skipped with the reason where the
machine cannot make one).  Every error is one line ``llmguide: ...``, never a traceback.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from llmguide.cli import main
from llmguide.core.errors import StorageError
from llmguide.core.rundir import RunDir, safe_torch_load

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = ["env=crafter", "env.max_steps=40", "num_envs=2", "agent.num_steps=32", "agent.hidden=32", "method=none",
        "progress=false", "eval.episodes=0"]
ROLLOUT = 2 * 32   # num_envs x agent.num_steps


def train_args(run_dir: Path, *extra: str) -> list[str]:
    return ["train", *TINY, f"run.dir={run_dir.parent}", f"run.name={run_dir.name}", *extra]


def resume_args(run_dir: Path, *extra: str) -> list[str]:
    """Only the run and the overrides: the rest comes from the run's config.yaml."""
    return ["train", f"run.dir={run_dir.parent}", f"run.name={run_dir.name}", "run.resume=true", *extra]


def one_line(err: str) -> str:
    """The single line of an error on stderr (no traceback)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("llmguide: "), err
    return lines[0]


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmguide.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def spawn(args: list[str], stderr: Path) -> subprocess.Popen:
    """A real ``llmguide`` process (its own session, so a test can kill it and its children)."""
    with open(stderr, "w") as err:
        return subprocess.Popen([sys.executable, "-m", "llmguide.cli", *args], stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)


def wait_for(condition, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert proc.poll() is None, f"exited early with {proc.returncode}"
        assert time.time() < deadline, "timed out"
        time.sleep(0.2)


def metric_steps(run_dir: Path) -> list[int]:
    text = (run_dir / "metrics.jsonl").read_text() if (run_dir / "metrics.jsonl").exists() else ""
    return [json.loads(line)["step"] for line in text.splitlines() if line.strip().endswith("}")]


def ckpt_step(run_dir: Path) -> int | None:
    latest = run_dir / "checkpoints" / "latest.pt"
    return safe_torch_load(latest)["step"] if latest.exists() else None


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {name: (run_dir / name).read_bytes() for name in ("config.yaml", "metrics.jsonl")}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One finished tiny run (checkpoints at 64 and 128), copied by the tests that change it."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    assert main(train_args(run_dir, "total_steps=128", "checkpoint_every=64")) == 0
    return run_dir


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    shutil.copytree(trained, tmp_path / "run")
    return tmp_path / "run"


# --- 1. one writer per run directory ---------------------------------------------------------------------------
def test_a_second_writer_is_refused_and_a_dead_writers_lock_is_taken_over(tmp_path):
    run_dir = tmp_path / "shared"
    first = spawn(train_args(run_dir, "total_steps=100000000", "checkpoint_every=64"), tmp_path / "first.err")
    try:
        wait_for(lambda: (ckpt_step(run_dir) or 0) >= 64 and metric_steps(run_dir), first)
        before = (run_dir / "config.yaml").read_bytes()
        for extra in ([], ["run.overwrite=true"], ["run.resume=true"]):
            second = cli(*train_args(run_dir, "total_steps=128", *extra))
            assert second.returncode == 2, second.stderr
            line = one_line(second.stderr)
            assert f"pid {first.pid}" in line and "in use" in line
        assert (run_dir / "config.yaml").read_bytes() == before          # the second writer changed nothing
        steps = metric_steps(run_dir)
        assert steps == sorted(steps)                                      # no interleaved second run
    finally:
        os.killpg(first.pid, signal.SIGKILL)                               # dies holding the lock
        first.wait(timeout=60)
    step = ckpt_step(run_dir)
    third = cli(*resume_args(run_dir, f"total_steps={step + ROLLOUT}"))
    assert third.returncode == 0, third.stderr
    assert f"taking over the lock left by pid {first.pid}, which is no longer running" in third.stderr
    assert ckpt_step(run_dir) == step + ROLLOUT


def test_the_lock_is_released_when_the_run_dir_closes(tmp_path, capsys):
    with RunDir(tmp_path / "r", tensorboard=False):
        assert (tmp_path / "r" / ".lock").read_text().strip() == str(os.getpid())
    assert (tmp_path / "r" / ".lock").read_text() == ""                    # a clean end names no holder
    with RunDir(tmp_path / "r", tensorboard=False):
        pass
    assert "taking over" not in capsys.readouterr().err


# --- 2. resume from what the run saved --------------------------------------------------------------------------
@pytest.mark.parametrize("change", ["method=rnd", "env=babyai", "agent=dqn", "agent.hidden=64",
                                    "agent.recurrent=gru"])
def test_a_resume_that_changes_what_the_checkpoint_was_built_for_is_refused(run_copy, change, capsys):
    before = snapshot(run_copy)
    assert main(resume_args(run_copy, change)) == 2
    line = one_line(capsys.readouterr().err)
    assert "was trained with" in line and change.split("=")[0] in line
    assert snapshot(run_copy) == before


def test_a_resume_composes_the_saved_config_with_the_overrides(run_copy):
    assert main(resume_args(run_copy, f"total_steps={128 + ROLLOUT}")) == 0
    saved = yaml.safe_load((run_copy / "config.yaml").read_text())
    assert saved["agent"]["hidden"] == 32 and saved["env"]["max_steps"] == 40 and saved["num_envs"] == 2
    assert saved["total_steps"] == 128 + ROLLOUT and saved["run"]["resume"] is True
    assert ckpt_step(run_copy) == 128 + ROLLOUT


def test_a_resume_whose_checkpoint_does_not_load_changes_no_file(run_copy, capsys):
    for ckpt in (run_copy / "checkpoints").iterdir():
        ckpt.write_bytes(ckpt.read_bytes()[:100])
    before = snapshot(run_copy)
    assert main(resume_args(run_copy, "total_steps=999")) == 1
    assert "no checkpoint" in one_line(capsys.readouterr().err)
    assert snapshot(run_copy) == before                   # config.yaml is written only after a checkpoint loads


# --- 3. Ctrl-C and SIGTERM ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_saves_a_checkpoint_and_the_metrics_and_says_how_to_resume(tmp_path, sig):
    run_dir = tmp_path / "stopped"
    proc = spawn(train_args(run_dir, "total_steps=100000000"), tmp_path / "err")   # no periodic checkpoint
    try:
        wait_for(lambda: metric_steps(run_dir), proc)                               # it is learning
        os.kill(proc.pid, sig)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    err = (tmp_path / "err").read_text()
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "stopping at the next step boundary" in lines[0], err
    step = ckpt_step(run_dir)
    assert f"{sig.name}: stopped at step {step}, checkpoint and metrics saved" in lines[1]
    assert step % ROLLOUT == 0 and max(metric_steps(run_dir)) == step     # the update's metrics are saved too
    if sig == signal.SIGINT:                                               # the printed command continues it
        command = shlex.split(lines[1].split("resume with: ", 1)[1])
        assert command[:2] == ["llmguide", "train"]
        assert main([*command[1:], f"total_steps={step + ROLLOUT}"]) == 0
        assert ckpt_step(run_dir) == step + ROLLOUT
        steps = metric_steps(run_dir)
        assert steps == sorted(steps) and max(steps) == step + ROLLOUT


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    run_dir = tmp_path / "stopped"
    err = tmp_path / "err"
    # a rollout of 2 x 5000 steps: the first Ctrl-C alone would wait for its end
    proc = spawn(train_args(run_dir, "total_steps=100000000", "agent.num_steps=5000"), err)
    try:
        wait_for(lambda: metric_steps(run_dir), proc)
        os.kill(proc.pid, signal.SIGINT)
        wait_for(lambda: "stopping at the next step boundary" in err.read_text(), proc, timeout=30)
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = err.read_text()
    assert "Traceback" not in text and "stopped at once" in text and "no checkpoint was saved" in text, text
    assert ckpt_step(run_dir) is None


# --- 4. environment errors ----------------------------------------------------------------------------------------
def in_mount_namespace(tmp_path: Path, mount: str, command: list[str]) -> subprocess.CompletedProcess:
    """``command`` in a private mount namespace after ``mount`` (a shell line); skip when the machine cannot."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1): cannot make a private mount namespace")
    probe = tmp_path / "probe"
    probe.mkdir()
    if subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=4k tmpfs {probe}"],
                      capture_output=True).returncode != 0:
        pytest.skip("unshare -m / mount not permitted here (needs CAP_SYS_ADMIN)")
    script = f"{mount} && {shlex.join(command)}; echo rc=$?; find {tmp_path} -type f"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300)


def test_a_full_disk_is_one_line_naming_the_file_and_leaves_nothing_half_written(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    out = in_mount_namespace(tmp_path, f"mount -t tmpfs -o size=512k tmpfs {disk}",   # a checkpoint is ~2 MB
                             [sys.executable, "-m", "llmguide.cli", *train_args(disk / "r", "total_steps=256",
                                                                              "checkpoint_every=64")])
    assert "rc=1" in out.stdout, out.stdout + out.stderr
    line = one_line(out.stderr)
    assert re.search(rf"no space left on the device of {disk}/r/\S+: free some space", line), line
    files = out.stdout.splitlines()
    assert not [f for f in files if f.endswith(".tmp")], files            # no temp file left behind


def test_a_read_only_run_dir_is_one_line(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    out = in_mount_namespace(tmp_path, f"mount --bind {runs} {runs} && mount -o remount,ro,bind {runs}",
                             [sys.executable, "-m", "llmguide.cli", *train_args(runs / "r", "total_steps=64")])
    assert "rc=1" in out.stdout, out.stdout + out.stderr
    assert f"{runs}/r is on a read-only file system" in one_line(out.stderr)


def test_a_metrics_line_the_disk_refuses_is_cut_back(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "r", tensorboard=False)
    run.log(1, {"x": 1})
    before = (tmp_path / "r" / "metrics.jsonl").read_bytes()
    real_write, fd = os.write, run._metrics_file.fileno()

    def half_then_full(target: int, data: bytes) -> int:
        if target != fd:
            return real_write(target, data)
        real_write(target, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(StorageError, match=r"no space left on the device of .*metrics\.jsonl"):
        run.log(2, {"x": 2})
    monkeypatch.undo()
    assert (tmp_path / "r" / "metrics.jsonl").read_bytes() == before      # no half line
    run.close()


def test_a_checkpoint_the_disk_refuses_keeps_the_previous_one(tmp_path, monkeypatch):
    with RunDir(tmp_path / "r", tensorboard=False) as run:
        run.save_checkpoint({"w": torch.ones(2)}, 64)

        def full(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fsync", full)
        with pytest.raises(StorageError, match=r"ckpt_000000000128\.pt: free some space"):
            run.save_checkpoint({"w": torch.zeros(2)}, 128)
        monkeypatch.undo()
        assert run.load_checkpoint()["step"] == 64
    assert sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir()) == ["ckpt_000000000064.pt", "latest.pt"]


@pytest.mark.parametrize("where", ["folder", "under a file"])
def test_a_cache_path_that_cannot_be_a_file_is_one_line(tmp_path, where, capsys):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    path = tmp_path / "folder" if where == "folder" else tmp_path / "file" / "cache.sqlite"
    code = main(train_args(tmp_path / "r", "total_steps=64", "method=ellm", "method.embedder=bow", "llm=constant",
                           "llm.cache.enabled=true", f"llm.cache.path={path}"))
    assert code == 1
    line = one_line(capsys.readouterr().err)
    assert f"llm.cache.path: {path}" in line
    assert ("is a folder where a file is expected" if where == "folder" else f"sits under {tmp_path / 'file'}") in line


# --- 5. the NaN guard ----------------------------------------------------------------------------------------------
def finite_checkpoint(path: Path) -> bool:
    def tensors(node):
        if isinstance(node, torch.Tensor):
            yield node
        elif isinstance(node, dict):
            for v in node.values():
                yield from tensors(v)
        elif isinstance(node, list | tuple):
            for v in node:
                yield from tensors(v)

    return all(torch.isfinite(t).all() for t in tensors(safe_torch_load(path)["agent"]) if t.is_floating_point())


@pytest.mark.parametrize("agent", ["ppo", "dqn"])
def test_a_diverging_run_stops_with_one_line_and_keeps_the_last_good_checkpoint(tmp_path, agent, capsys):
    run_dir = tmp_path / "r"
    extra = ["agent=dqn", "agent.learning_starts=64"] if agent == "dqn" else []
    args = train_args(run_dir, "total_steps=1024", "checkpoint_every=64", "agent.lr=1e9", *extra)
    code = main([a for a in args if agent == "ppo" or a != "agent.num_steps=32"])   # (a PPO key)
    assert code == 1
    line = one_line(capsys.readouterr().err)
    match = re.search(r"training diverged at step (\d+): (losses/\w+ is (nan|inf|-inf)|parameter \S+ is not finite)",
                      line)
    assert match, line
    step = int(match.group(1))
    ckpts = sorted((run_dir / "checkpoints").glob("*.pt")) if (run_dir / "checkpoints").exists() else []
    assert all(finite_checkpoint(p) and safe_torch_load(p)["step"] < step for p in ckpts)
    assert (f"the last good checkpoint (step {ckpt_step(run_dir)}) is kept" if ckpts
            else "no checkpoint was saved") in line
    assert not (run_dir / "eval.json").exists()


# --- 6. checked inputs ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("edit,key,says", [
    (("lr: 0.00025", "lr: fast"), "agent.lr", "expected float"),
    (("lr: 0.00025", "lrr: 0.1"), "agent.lrr", "unknown key; did you mean agent.lr"),
    (("checkpoint_every: 64", "checkpoint_every: -1"), "checkpoint_every", "must be a number >= 0"),
    (("seed: 0", "seed: [0"), None, "does not parse"),
])
def test_a_hand_edited_config_is_checked_on_resume_and_eval(run_copy, edit, key, says, capsys):
    config = run_copy / "config.yaml"
    assert edit[0] in config.read_text()
    config.write_text(config.read_text().replace(edit[0], edit[1]))
    before = snapshot(run_copy)
    for args in (resume_args(run_copy, "total_steps=256"), ["eval", str(run_copy)]):
        assert main(args) == 2
        line = one_line(capsys.readouterr().err)
        assert says in line and str(config) in line and (key is None or f"'{key}'" in line), line
    assert snapshot(run_copy) == before


def test_metrics_rows_that_are_not_records_are_skipped_and_counted(run_copy, capsys):
    junk = ['[1, 2]', '"text"', '{"step": "ten"}', '{"x": 1}', '{"step": NaN}', 'not json', '{"step": true}']
    with open(run_copy / "metrics.jsonl", "a") as f:
        f.write("\n".join(junk) + "\n")
    assert main(["report", str(run_copy)]) == 0
    assert f"skipped {len(junk)} line(s) that are not records" in (run_copy / "report.md").read_text()


@pytest.mark.parametrize("folder", ["empty", "source"])
def test_report_on_a_folder_with_no_run_says_so_and_writes_nothing(tmp_path, folder, capsys):
    target = tmp_path / "parent" / folder
    target.mkdir(parents=True)
    if folder == "source":
        (target / "module.py").write_text("x = 1\n")
        (target / "sub").mkdir()
    before = sorted(tmp_path.rglob("*"))
    assert main(["report", str(target)]) == 2
    assert f"{target} holds no run" in one_line(capsys.readouterr().err)
    assert sorted(tmp_path.rglob("*")) == before
