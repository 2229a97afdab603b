"""``llm.require_fraction``: a run whose LM answered too few of its requests fails clearly (exit 1, one
line), with its files written; the progress bar and metrics carry ``lm/answered_fraction``."""

from __future__ import annotations

import json
import socket

from llmguide import cli


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]   # nothing listens once the socket is closed


def _args(tmp_path, *extra: str) -> list[str]:
    return ["train", "env=crafter", "env.actions=text", "method=ellm", "llm=http",
            f"llm.base_url=http://127.0.0.1:{_closed_port()}/v1", "llm.model=none", "llm.max_retries=0",
            "llm.timeout=2", "llm.cache.enabled=false", "method.embedder=bow", "llm.service.max_retries=0", "total_steps=128",
            "num_envs=2", "agent.num_steps=32", "eval.episodes=0", "progress=false", "log_every=32",
            f"run.dir={tmp_path}", *extra]


def test_an_unreachable_lm_fails_the_run_when_answers_are_required(tmp_path, capsys) -> None:
    assert cli.main(_args(tmp_path, "run.name=strict", "llm.require_fraction=0.5")) == 1
    err = capsys.readouterr().err
    assert "answered" in err and "Traceback" not in err
    run = tmp_path / "strict"
    assert (run / "report.md").exists() and (run / "checkpoints" / "latest.pt").exists()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["lm/answered_fraction"] for r in rows if "lm/answered_fraction" in r][-1] == 0.0


def test_without_the_requirement_the_same_run_succeeds(tmp_path) -> None:
    assert cli.main(_args(tmp_path, "run.name=lenient")) == 0
