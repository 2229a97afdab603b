"""A resume cannot damage a run (issue 70, item 1).

``config.yaml`` becomes the resumed session's only once that session has trained an update: a resume that fails
after its checkpoint loaded (a changed ``num_envs`` that the reward normaliser's per-env state does not fit) or that
diverges (``agent.lr=1e9``) leaves the file as it was, so the next plain resume works.  A changed ``num_envs`` is
refused up front with one line.  Resume loads the newest complete checkpoint (``latest.pt`` can be one behind when
a kill fell between the two writes) and prints the step it resumed from and the steps the session trained.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml

from llmguide.cli import main
from llmguide.core.rundir import safe_torch_load
from llmguide.learners.callbacks import Callback
from llmguide.learners.common import NonFiniteError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# method=rnd: its reward normaliser keeps one running return per env, so the checkpoint is shaped by num_envs
TINY = ["env=crafter", "env.max_steps=40", "num_envs=2", "agent.num_steps=32", "agent.hidden=32", "method=rnd",
        "progress=false", "eval.episodes=0"]
ROLLOUT = 2 * 32


def resume_args(run_dir: Path, *extra: str) -> list[str]:
    return ["train", f"run.dir={run_dir.parent}", f"run.name={run_dir.name}", "run.resume=true", *extra]


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def ckpt_step(run_dir: Path) -> int:
    return safe_torch_load(run_dir / "checkpoints" / "latest.pt")["step"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished tiny run: checkpoints at 128 and 192 (latest.pt: 192)."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    assert main(["train", *TINY, f"run.dir={run_dir.parent}", f"run.name={run_dir.name}", "total_steps=192",
                 "checkpoint_every=64"]) == 0
    return run_dir


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    shutil.copytree(trained, tmp_path / "run")
    return tmp_path / "run"


def test_a_resume_with_another_num_envs_is_refused_up_front(run_copy, capsys):
    before = (run_copy / "config.yaml").read_bytes()
    assert main(resume_args(run_copy, "num_envs=4", "total_steps=512")) == 2
    line = one_line(capsys.readouterr().err)
    assert "'num_envs'" in line and "trained with num_envs=2, not 4" in line
    assert (run_copy / "config.yaml").read_bytes() == before


def test_a_resume_that_fails_after_its_checkpoint_loaded_leaves_the_record_as_it_was(run_copy, capsys):
    """The Python API can still hand the Runner a config the checkpoint does not fit: the session fails in its
    first update, and config.yaml (once rewritten as the checkpoint loaded) keeps the run resumable."""
    from llmguide.pipelines import load_config, train_run

    before = (run_copy / "config.yaml").read_bytes()
    cfg = load_config(resume_args(run_copy, "total_steps=512")[1:])
    cfg.num_envs = 4
    with pytest.raises(ValueError, match=r"expected rewards of shape \(T, 2\)"):
        train_run(cfg)
    assert (run_copy / "config.yaml").read_bytes() == before
    assert main(resume_args(run_copy, f"total_steps={192 + ROLLOUT}")) == 0     # the next plain resume works
    assert ckpt_step(run_copy) == 192 + ROLLOUT


def test_a_diverged_resume_never_becomes_the_runs_record(run_copy, capsys):
    before = (run_copy / "config.yaml").read_bytes()
    assert main(resume_args(run_copy, "agent.lr=1e9", "total_steps=1024")) == 1
    assert (run_copy / "config.yaml").read_bytes() == before
    resuming, line = capsys.readouterr().err.strip().splitlines()
    assert resuming == f"llmguide: resuming {run_copy} from step 192 (latest.pt)"
    assert "training diverged" in line and "is the one this session found" in line
    assert main(resume_args(run_copy, f"total_steps={192 + ROLLOUT}")) == 0     # trains on with the old lr
    assert yaml.safe_load((run_copy / "config.yaml").read_text())["agent"]["lr"] == 0.00025


class PoisonAfterFirstUpdate(Callback):
    """Sets the critic to NaN after the session's first update: the next update's loss guard stops the run."""

    def on_rollout_end(self, metrics):
        with torch.no_grad():
            self.agent.net.critic.bias.fill_(float("nan"))   # values, not actions


def test_a_session_that_diverges_after_it_wrote_its_config_puts_the_old_one_back(run_copy):
    from llmguide.pipelines import load_config, train_run

    before = (run_copy / "config.yaml").read_bytes()
    cfg = load_config(resume_args(run_copy, "agent.ent_coef=0.5", "total_steps=1024")[1:])
    with pytest.raises(NonFiniteError) as err:
        train_run(cfg, callbacks=[PoisonAfterFirstUpdate()])
    assert (run_copy / "config.yaml").read_bytes() == before
    assert "is the one this session found" in str(err.value)


def test_resume_loads_the_newest_complete_checkpoint_and_says_which(run_copy, capsys):
    """A kill between ``ckpt_<step>.pt`` and ``latest.pt`` leaves latest.pt one checkpoint behind."""
    ckpts = run_copy / "checkpoints"
    shutil.copyfile(ckpts / "ckpt_000000000128.pt", ckpts / "latest.pt")
    assert main(resume_args(run_copy, f"total_steps={192 + ROLLOUT}")) == 0
    out = capsys.readouterr()
    assert f"llmguide: resuming {run_copy} from step 192 (ckpt_000000000192.pt)" in out.err
    assert f"resume: from step 192; this session trained {ROLLOUT} steps (to step {192 + ROLLOUT})" in out.out
    assert ckpt_step(run_copy) == 192 + ROLLOUT
