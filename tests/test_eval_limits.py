"""Evaluation cannot dwarf training (issue 32 point 3): ``eval.max_steps`` caps every evaluation episode (the
Runner's and ``llmguide eval``'s), evaluation shows a progress line, and an LM-guided evaluation against a slow
server finishes in env time: the LM path never blocks, and closing it drops the requests not yet sent
(``HTTPLM.interrupt``) instead of sending a whole batch first.  Also the one-line summary of ``train``."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from llmguide.cli import main
from llmguide.llm.backends.http import HTTPLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_server import FaultServer  # noqa: E402

TINY = ["env=crafter", "num_envs=2", "agent.num_steps=32", "agent.hidden=32", "total_steps=64", "log_every=32"]


def _train(tmp_path: Path, name: str, *extra: str) -> Path:
    assert main(["train", *TINY, f"run.dir={tmp_path}", f"run.name={name}", *extra]) == 0
    return tmp_path / name


def test_eval_max_steps_caps_every_episode_and_prints_a_summary(tmp_path, capsys):
    run = _train(tmp_path, "capped", "progress=false", "eval.episodes=2", "eval.max_steps=7")
    results = json.loads((run / "eval.json").read_text())
    assert results["episode_lengths"] == [7, 7] and results["max_steps"] == 7 and results["seconds"] >= 0
    out = capsys.readouterr().out.strip().splitlines()
    summary = [line for line in out if line.startswith("train: ")]
    assert len(summary) == 1, out    # progress=false: still the one summary line
    assert str(run) in summary[0] and "eval return (greedy)" in summary[0] and "over 2 episodes of ≤ 7 steps" in summary[0]
    assert "train return (last 10%)" in summary[0] and "final" not in summary[0]   # two numbers, two names
    assert f"report {run / 'report.md'}" in summary[0] and (run / "report.md").exists()
    # llmguide eval RUN_DIR takes the cap as an override; the config's own env.max_steps is left alone
    assert main(["eval", str(run), "eval.max_steps=3", "eval.episodes=1"]) == 0
    again = json.loads((run / "eval.json").read_text())
    assert again["episode_lengths"] == [3] and again["sampled"]["episode_lengths"] == [3]
    assert "eval: " in capsys.readouterr().out


def test_evaluation_shows_a_progress_line(tmp_path, capsys):
    _train(tmp_path, "bar", "progress=true", "eval.episodes=2", "eval.max_steps=5")
    err = capsys.readouterr().err
    assert "eval greedy" in err and "2/2" in err


def test_an_interrupted_http_call_sends_no_more_requests():
    with FaultServer(["stall"], stall=1.0) as server:
        lm = HTTPLM(server.base_url, "fault", concurrency=1, timeout=10.0, max_retries=0)
        out: dict = {}

        def call() -> None:
            start = time.perf_counter()
            try:
                out["scores"] = lm.score(["Caption: a tree."], [[f" goal {i}" for i in range(12)]])
            except Exception as err:  # noqa: BLE001 - every request failed: the call raises, which is fine here
                out["error"] = err
            out["seconds"] = time.perf_counter() - start

        thread = threading.Thread(target=call)
        thread.start()
        time.sleep(0.3)
        lm.interrupt()
        thread.join(timeout=30)
        lm.close()
    assert out["seconds"] < 4.0, out            # 12 sequential 1 s requests without the cut
    assert server.requests <= 2 and lm.io_stats()["cancelled"] >= 10


def test_lm_guided_evaluation_against_a_slow_server_takes_env_time(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGUIDE_CACHE_DIR", str(tmp_path / "cache"))
    with FaultServer(["stall"], stall=4.0) as server:
        start = time.perf_counter()
        run = _train(tmp_path, "slow", "method=ellm", "method.embedder=bow", "llm=http",
                     f"llm.base_url={server.base_url}", "llm.model=fault", "llm.timeout=30", "llm.max_retries=0",
                     "llm.service.max_retries=0", "progress=false", "eval.episodes=1", "eval.max_steps=40",
                     "env.max_steps=60")
        seconds = time.perf_counter() - start
    results = json.loads((run / "eval.json").read_text())
    assert results["episode_lengths"] == [40]
    # about 16 s here; closing the training's and the evaluation's service each used to send their batch's
    # remaining requests first (22 goals per state, 4 in flight, 4 s each: about 60 s in all)
    assert seconds < 40, seconds
    assert server.requests < 60


@pytest.mark.parametrize("bad", ["eval.max_steps=0", "eval.max_steps=-3"])
def test_a_bad_cap_is_a_config_error(bad, capsys):
    assert main(["train", "--print-config", bad]) == 2
    assert "eval.max_steps" in capsys.readouterr().err


def test_the_eval_cap_never_lengthens_a_task_whose_env_cap_is_null():
    from llmguide.pipelines import load_config
    from llmguide.pipelines.runner import _eval_episode_cap

    cfg = load_config(["env=crafter", "env.task=collect_wood", "eval.max_steps=5000"])
    assert cfg.env.max_steps is None
    with _eval_episode_cap(cfg) as cap:
        assert cap == 1500 and cfg.env.max_steps == 1500   # the task's own cap (rules.TASK_MAX_STEPS) is smaller
    assert cfg.env.max_steps is None
    cfg = load_config(["env=crafter", "eval.max_steps=300"])
    with _eval_episode_cap(cfg) as cap:
        assert cap == 300
