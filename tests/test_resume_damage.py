"""Resume survives ordinary damage, and checkpoints load without running code (RunDir directly).

Damage: a torn last line in metrics.jsonl (a kill mid-write); an empty, truncated or garbage
latest.pt / ckpt_*.pt; a kill before the first checkpoint.  Hostile: a crafted checkpoint whose
pickle would run a command or write a file on load.
"""

from __future__ import annotations

import collections
import io
import json
import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from llmguide.core.rundir import CheckpointError, RunDir, read_metrics, safe_torch_load


def steps(run_path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_path / "metrics.jsonl").read_text().splitlines()]


def killed_run(path: Path, logged: tuple[int, ...], checkpoints: tuple[int, ...], torn: bool = False) -> Path:
    """A run folder as a kill leaves it: metric rows, checkpoints, maybe a torn last line."""
    with RunDir(path, tensorboard=False) as run:
        for step in logged:
            run.log(step, {"x": step})
            if step in checkpoints:
                run.save_checkpoint({"weights": torch.full((3,), float(step))}, step)
    if torn:
        with open(path / "metrics.jsonl", "a") as f:
            f.write('{"step": 999, "time": 1.0, "x": 0.12')          # no newline: cut off mid-write
    return path


DAMAGE = {
    "empty": lambda data: b"",
    "truncated": lambda data: data[: len(data) // 2],
    "garbage": lambda data: os.urandom(len(data)),
    "zeroed": lambda data: bytes(len(data)),
}


def damage(path: Path, how: str) -> None:
    path.write_bytes(DAMAGE[how](path.read_bytes()))


def test_a_torn_metrics_line_is_dropped_on_resume(tmp_path):
    path = killed_run(tmp_path / "run", (1, 2, 3, 4), checkpoints=(2,), torn=True)
    with RunDir(path, tensorboard=False) as run:
        run.truncate_metrics_after(2)
        run.log(3, {"x": 30})
    assert steps(path) == [1, 2, 3]                     # every line parses: the torn one is gone


def test_resume_cuts_the_metrics_to_the_checkpoint_step(tmp_path, caplog):
    path = killed_run(tmp_path / "run", (1, 2, 3, 4), checkpoints=(2,), torn=True)
    with RunDir(path, tensorboard=False) as run, caplog.at_level("INFO", logger="llmguide.core.rundir"):
        state = run.resume_state()
    assert state["step"] == 2 and steps(path) == [1, 2]
    assert "do not parse" in caplog.text


def test_resume_without_a_checkpoint_starts_over(tmp_path, caplog):
    """A kill before the first checkpoint: the killed attempt's rows go, so steps never go backwards."""
    path = killed_run(tmp_path / "run", (64, 128, 192), checkpoints=(), torn=True)
    with RunDir(path, tensorboard=False) as run, caplog.at_level("WARNING", logger="llmguide.core.rundir"):
        assert run.resume_state() is None
        run.log(64, {"x": 1})
    assert steps(path) == [64]
    assert "no checkpoint: starting from step 0" in caplog.text


@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_damaged_latest_falls_back_to_the_newest_checkpoint_that_loads(tmp_path, caplog, how):
    path = killed_run(tmp_path / "run", (100, 200, 300, 400), checkpoints=(100, 200, 300))
    ckpts = path / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["ckpt_000000000200.pt", "ckpt_000000000300.pt", "latest.pt"]
    damage(ckpts / "latest.pt", how)
    with RunDir(path, tensorboard=False) as run:
        assert run.load_checkpoint()["step"] == 300       # ckpt_300 holds the same step
        damage(ckpts / "ckpt_000000000300.pt", how)
        with caplog.at_level("WARNING", logger="llmguide.core.rundir"):
            state = run.resume_state()
    assert state["step"] == 200 and torch.equal(state["weights"], torch.full((3,), 200.0))
    assert steps(path) == [100, 200]
    assert "using checkpoint" in caplog.text and "ckpt_000000000200.pt" in caplog.text
    assert "latest.pt (" in caplog.text and "ckpt_000000000300.pt (" in caplog.text   # which, and why


def test_no_checkpoint_that_loads_is_a_clear_error(tmp_path):
    path = killed_run(tmp_path / "run", (100, 200), checkpoints=(100, 200))
    for ckpt in (path / "checkpoints").iterdir():
        damage(ckpt, "truncated")
    with RunDir(path, tensorboard=False) as run, pytest.raises(CheckpointError, match="no checkpoint .* loads"):
        run.resume_state()
    assert steps(path) == [100, 200]                      # nothing cut when nothing can resume


class Shell:
    """Unpickling calls os.system (a command)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class Writer:
    """Unpickling calls builtins.exec (no module torch blocklists) on code that writes a file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",)


@pytest.mark.parametrize("payload", [Shell, Writer])
@pytest.mark.parametrize("container", ["torch-zip", "raw-pickle"])
def test_a_crafted_checkpoint_does_not_run(tmp_path, payload, container):
    marker = tmp_path / "pwned"
    evil = {"step": 500, "agent": payload(marker)}
    path = killed_run(tmp_path / "run", (100,), checkpoints=(100,))
    latest = path / "checkpoints" / "latest.pt"
    if container == "torch-zip":
        torch.save(evil, latest)
    else:
        latest.write_bytes(pickle.dumps(evil))
    with RunDir(path, tensorboard=False) as run:
        state = run.load_checkpoint()                     # refuses latest.pt, uses the intact ckpt_100
        assert state["step"] == 100 and not marker.exists()
        (path / "checkpoints" / "ckpt_000000000100.pt").write_bytes(latest.read_bytes())
        with pytest.raises(CheckpointError, match="safe loading refused it"):
            run.load_checkpoint()
    assert not marker.exists()


def test_saving_a_state_that_safe_loading_refuses_fails_before_writing(tmp_path):
    with RunDir(tmp_path / "run", tensorboard=False) as run:
        with pytest.raises(CheckpointError, match="collections.deque"):
            run.save_checkpoint({"agent": {"window": collections.deque([1, 2])}}, 10)
    assert not list((tmp_path / "run").glob("checkpoints/*.pt"))


def learner_like_state() -> dict:
    """What learners' and reward modules' state_dict()s hold: tensors, an optimiser, numpy arrays
    and scalars of several dtypes, the three RNG states, counters, sets, tuples, big ints."""
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.ones(1, 3)).sum().backward()
    opt.step()
    gen = np.random.default_rng(3)
    return {
        "algo": "ppo", "net": net.state_dict(), "optimizer": opt.state_dict(), "global_step": 128, "updates": 2,
        "counters": {"episodes": 3}, "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                                             "torch": torch.get_rng_state()},
        "agent_rng": gen.bit_generator.state,
        "reward_modules": [{"name": "rnd", "coef": 1.0, "state": {
            "obs_norm": {"mean": np.zeros((2, 3)), "var": np.ones((2, 3), np.float32), "count": np.float64(4.0)},
            "np_rng": gen.bit_generator.state, "torch_rng": torch.Generator().get_state()}}],
        "replay": {"obs": {"image": np.zeros((4, 2, 2), np.uint8)}, "actions": np.arange(4, dtype=np.int64),
                   "terminated": np.zeros(4, bool), "discounts": np.ones(4, np.float16), "pos": 4, "size": 4,
                   "items": [(np.zeros(2), 1, 0.5, np.ones(2), False)]},
        "labels": {"msg": 1.0}, "counts": collections.Counter(a=2), "seen": {1, 2}, "big": 2 ** 130,
        "scalars": [np.int64(3), np.int32(2), np.float32(0.5), np.bool_(True)], "text": np.array(["a", "bc"]),
        "carry": None, "rms": [np.float64(1.0), 0.5, 2.0],
    }


def test_learner_states_round_trip_through_safe_loading(tmp_path):
    state = learner_like_state()
    with RunDir(tmp_path / "run", tensorboard=False) as run:
        run.save_checkpoint({"agent": state}, 128)
        loaded = run.resume_state()["agent"]
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    expected = torch.load(buffer, weights_only=False)          # (our own file: the reference)
    assert repr(loaded) == repr(expected)
    np.random.set_state(loaded["rng"]["numpy"])
    random.setstate(loaded["rng"]["python"])
    torch.set_rng_state(loaded["rng"]["torch"])
    np.random.default_rng().bit_generator.state = loaded["agent_rng"]
    opt = torch.optim.Adam(torch.nn.Linear(3, 2).parameters())
    opt.load_state_dict(loaded["optimizer"])
    assert safe_torch_load(tmp_path / "run" / "checkpoints" / "latest.pt")["step"] == 128
    assert read_metrics(tmp_path / "run") == []
