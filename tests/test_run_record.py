"""Every training session records its system, LM, command and config (llmguide.core.provenance, issue 67 item 4);
a study report shows the record fields that differ between arms (benchmarks/harness/)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from llmguide.core import provenance


def test_a_real_run_records_its_system_lm_command_and_config(tmp_path, monkeypatch):
    from llmguide.pipelines import load_config, train_run

    monkeypatch.setenv("LLMGUIDE_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"   # an embedded model of the user's own: its file's sha256 is recorded
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    base = ["env=babyai", "method=none", "num_envs=2", "eval.episodes=0", "progress=false", f"run.dir={tmp_path}",
            "agent.num_steps=16", "total_steps=32", "llm=embedded", f"llm.model_path={gguf}", "llm.temperature=0.5"]
    monkeypatch.setattr(sys, "argv", ["llmguide", "train", "seed=0"])
    train_run(load_config([*base, "run.name=a"]))
    monkeypatch.setattr(sys, "argv", ["llmguide", "train", "seed=1"])
    train_run(load_config([*base, "run.name=b", "seed=1"]))

    (a,), (b,) = provenance.read(tmp_path / "a"), provenance.read(tmp_path / "b")
    system = a["system"]
    assert system["cores"] == os.cpu_count() and system["python"] == platform.python_version()
    assert system["os"] == platform.platform() and system["cpu"] and isinstance(system["cpu"], str)
    assert system["packages"]["torch"] == version("torch")
    assert set(system["packages"]) == {"torch", "jax", "jaxlib", "llama-cpp-python"}
    lm = a["lm"]
    assert (lm["backend"], lm["model"], lm["temperature"], lm["chat"]) == ("embedded", "gemma-3-270m-q4_k_m", 0.5, "auto")
    assert lm["gguf_sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest() and lm["gguf"] == str(gguf)
    from llmguide.pipelines.answers import prompt_sha256

    assert lm["prompt_sha256"] == prompt_sha256(load_config(base)) and len(lm["prompt_sha256"]) == 64
    assert a["command"] == ["llmguide", "train", "seed=0"] and b["command"][-1] == "seed=1"
    # the config's sha256 is the one of the config.yaml the session wrote: the seed makes it differ
    assert a["config_sha256"] == hashlib.sha256((tmp_path / "a" / "config.yaml").read_bytes()).hexdigest()
    assert b["config_sha256"] == hashlib.sha256((tmp_path / "b" / "config.yaml").read_bytes()).hexdigest()
    assert a["config_sha256"] != b["config_sha256"]
    assert a["commit"] == provenance.code_version()["commit"]   # the code line is still there


def test_the_gguf_hash_is_computed_once_per_file_version(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGUIDE_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    from llmguide.llm import assets

    real = assets.sha256_of
    monkeypatch.setattr(assets, "sha256_of", lambda p: calls.append(p) or real(p))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"one")
    first = provenance.gguf_sha256(gguf)
    assert provenance.gguf_sha256(gguf) == first == hashlib.sha256(b"one").hexdigest() and len(calls) == 1
    stored = json.loads((tmp_path / "cache" / provenance.GGUF_SHA_CACHE).read_text())
    assert stored[str(gguf.resolve())]["sha256"] == first
    gguf.write_bytes(b"two!")   # another size (and mtime): hashed again
    assert provenance.gguf_sha256(gguf) == hashlib.sha256(b"two!").hexdigest() and len(calls) == 2


@pytest.fixture(scope="module")
def harness(load_benchmark):
    return load_benchmark("harness")


def _run(root: Path, arm: str, seed: int, lines: list[dict]) -> str:
    run = root / arm / f"seed-{seed}"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"seed: {seed}\n")
    (run / provenance.FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(run)


def test_the_report_names_the_record_fields_that_differ_between_arms(harness, tmp_path):
    def line(cpu: str, llama: str | None, backend: str, config: str) -> dict:
        return {"commit": "1" * 40, "system": {"cpu": cpu, "cores": 2, "os": "Linux", "python": "3.12.1",
                                               "packages": {"torch": "2.5.0", "llama-cpp-python": llama}},
                "lm": {"backend": backend, "temperature": 0.0}, "command": ["llmguide", config],
                "config_sha256": config}

    done = [_run(tmp_path, "ppo", 0, [line("Xeon", "0.3.1", "oracle", "c0")]),
            _run(tmp_path, "ppo", 1, [line("Xeon", "0.3.1", "oracle", "c1")]),
            _run(tmp_path, "ellm", 0, [line("Xeon", "0.3.1", "oracle", "c2")]),
            _run(tmp_path, "ellm", 1, [line("Xeon", "0.3.1", "oracle", "c3"),   # resumed on another machine
                                       line("EPYC", "0.3.2", "oracle", "c4")])]
    records, lines = harness.run_records(done)
    assert records["differ"] == {"system.cpu": {"ellm": ["EPYC", "Xeon"], "ppo": ["Xeon"]},
                                 "system.packages.llama-cpp-python": {"ellm": ["0.3.1", "0.3.2"], "ppo": ["0.3.1"]}}
    assert records["same"]["lm.backend"] == "oracle" and records["same"]["system.python"] == "3.12.1"
    assert "config_sha256" not in records["same"] and "command" not in str(records)   # per run by design
    text = "\n".join(lines)
    assert "## Run records" in text and "| `system.cpu` | ellm: EPYC / Xeon; ppo: Xeon |" in text
    assert "`system.packages.llama-cpp-python`" in text and "`lm.backend`" not in text
    # the same record everywhere: no table, one line saying so; runs from before records: said, not compared
    records, lines = harness.run_records(done[:3])
    assert records["differ"] == {} and any("the same for every run" in ln for ln in lines)
    old = _run(tmp_path, "rnd", 0, [{"commit": "1" * 40}])
    records, lines = harness.run_records([*done[:3], old])
    assert records["unrecorded"] == ["rnd"] and records["differ"] == {}
