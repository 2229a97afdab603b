"""The startup probe of ``llm=http`` (issue 32 point 2), against a real server on loopback that answers
generation at once and scoring (echo + prompt log-probs) slowly, as llama.cpp's server does on CPU."""

from __future__ import annotations

import sys
from pathlib import Path

from llmguide.cli import main
from llmguide.llm.backends.probe import probe_http
from llmguide.pipelines import load_config, probe_lm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_server import FaultServer  # noqa: E402


class SlowScoring(FaultServer):
    """Scoring requests stall ``stall`` seconds; generation is answered at once."""

    def _next_fault(self, scoring: bool) -> str:
        with self._lock:
            self.requests += 1
            fault = "stall" if scoring else "ok"
            self.served[fault] += 1
            return fault


def _llm(server: FaultServer, *extra: str):
    return load_config(["llm=http", f"llm.base_url={server.base_url}", "llm.model=fault", *extra]).llm


def test_a_slow_score_server_is_named_with_the_fix():
    with SlowScoring(stall=1.0) as server:
        warning = probe_http(_llm(server), "score", threshold=0.5, switch="method.suggester=generate")
    assert warning is not None and "score request" in warning and server.base_url in warning
    assert "took 1." in warning and "llm.probe_threshold=0.5 s" in warning
    assert "method.suggester=generate (one generate request took 0." in warning
    assert "raise llm.timeout (now 30 s)" in warning and "vLLM" in warning
    # a slow answer is timed twice (a first request may pay for a warm-up), then one generate request
    assert server.served["stall"] == 2 and server.served["ok"] == 1


class WarmingUp(FaultServer):
    """The first request stalls ``stall`` seconds (the server warms up); every later one is answered at once."""

    def _next_fault(self, scoring: bool) -> str:
        with self._lock:
            self.requests += 1
            fault = "stall" if self.requests == 1 else "ok"
            self.served[fault] += 1
            return fault


def test_a_slow_first_answer_is_timed_again_and_a_warm_server_keeps_score(capsys):
    with WarmingUp(stall=1.0) as server:
        assert probe_http(_llm(server), "score", threshold=0.5, switch="method.suggester=generate") is None
    assert server.served["stall"] == 1 and server.served["ok"] == 1 and server.requests == 2


def test_a_score_request_past_the_timeout_says_so(capsys):
    with SlowScoring(stall=4.0) as server:
        warning = probe_http(_llm(server, "llm.timeout=3.0"), "score", threshold=5.0, switch="method.label_mode=generate")
    assert warning is not None and "got no answer within llm.timeout=3 s" in warning
    assert "method.label_mode=generate" in warning
    # a wait longer than 2 s says what it is waiting for, once
    assert capsys.readouterr().err.count("LM probe: waiting for one score request") == 1


def test_a_fast_mode_is_quiet_and_zero_turns_the_probe_off():
    with SlowScoring(stall=1.0) as server:
        assert probe_http(_llm(server), "generate", threshold=0.5) is None
        assert probe_http(_llm(server), "score", threshold=0) is None
    assert server.requests == 1


def test_an_unreachable_server_is_one_line():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = load_config(["llm=http", f"llm.base_url=http://127.0.0.1:{port}/v1", "llm.timeout=2"]).llm
    warning = probe_http(cfg, "generate", threshold=1.0)
    assert warning is not None and "failed" in warning and "lm/answered_fraction" in warning


def test_the_mode_comes_from_the_method(capsys):
    # a generate request has 0.9 s (a loaded box), a score request stalls past it
    with SlowScoring(stall=1.5) as server:
        base = [f"llm.base_url={server.base_url}", "llm.model=fault", "llm=http", "llm.probe_threshold=0.9"]
        assert probe_lm(load_config(["env=crafter", "method=ellm", *base])) is not None        # suggester=score
        assert probe_lm(load_config(["env=crafter", "method=ellm", "method.suggester=generate", *base])) is None
        assert probe_lm(load_config(["env=minihack", "method=oni_retrieval", *base])) is not None  # label_mode=score
        assert probe_lm(load_config(["env=crafter", "method=ellm_oracle", *base])) is None      # no LM asked
        assert probe_lm(load_config(["env=crafter", "method=rnd", *base])) is None
    err = capsys.readouterr().err
    assert err.count("llmguide: LM probe: score requests") == 2 and "switching this run to method.label_mode=generate" in err


def _train(server, tmp_path, name, *extra):
    return main(["train", "env=crafter", "method=ellm", "method.embedder=bow", "llm=http",
                 f"llm.base_url={server.base_url}", "llm.model=fault", "llm.probe_threshold=0.5",
                 "num_envs=2", "agent.num_steps=16", "agent.hidden=16", "total_steps=32", "eval.episodes=0",
                 "progress=false", f"run.dir={tmp_path}", f"run.name={name}", *extra])


def test_train_warns_before_training_when_told_to_keep_score(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LLMGUIDE_CACHE_DIR", str(tmp_path / "cache"))
    with SlowScoring(stall=1.0) as server:
        assert _train(server, tmp_path, "probe", "llm.score_fallback=warn") == 0
    err = capsys.readouterr().err
    assert err.count("LM probe: one score request") == 1 and "method.suggester=generate" in err
    assert "suggester: score" in (tmp_path / "probe" / "config.yaml").read_text()


def test_an_unusable_score_server_switches_the_run_to_generate(tmp_path, monkeypatch, capsys):
    """llm.score_fallback=switch (default): one line, the run trains in generate mode (its saved config says so)
    and sends no further score request."""
    monkeypatch.setenv("LLMGUIDE_CACHE_DIR", str(tmp_path / "cache"))
    with SlowScoring(stall=1.0) as server:
        assert _train(server, tmp_path, "switched") == 0
        served = dict(server.served)
    err = capsys.readouterr().err
    assert err.count("switching this run to method.suggester=generate") == 1 and "warning: LM probe" not in err
    assert "suggester: generate" in (tmp_path / "switched" / "config.yaml").read_text()
    assert served["stall"] == 2 and served["ok"] > 1      # the probe's two score requests; generation from then on


def test_a_method_with_its_own_prompt_is_not_switched_and_stop_refuses(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LLMGUIDE_CACHE_DIR", str(tmp_path / "cache"))
    with SlowScoring(stall=1.0) as server:
        base = [f"llm.base_url={server.base_url}", "llm.model=fault", "llm=http", "llm.probe_threshold=0.5"]
        cfg = load_config(["env=crafter", "method=ellm", "method.prompt=ellm_goal_score", *base])
        warning = probe_lm(cfg)
        assert "not switched: method.prompt=ellm_goal_score" in warning and cfg.method.suggester == "score"
        assert _train(server, tmp_path, "stopped", "llm.score_fallback=stop") == 2
    err = capsys.readouterr().err
    assert "config error at 'method.suggester'" in err and "llm.score_fallback=stop" in err
    assert "Traceback" not in err and not (tmp_path / "stopped" / "metrics.jsonl").exists()
