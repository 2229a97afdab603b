"""Bad inputs of issue 70 (items 5 and 6), each one clear line and no lost data.

- A deeply nested JSON answer (``json.loads`` raises RecursionError) from a real loopback server is a decode
  fault: backed off, counted, warned, never a traceback (at the start-up probe too).
- ``run.name`` stays inside ``run.dir`` (``../x``, an absolute path: refused, and ``run.overwrite=true`` deletes
  nothing there); a 300-character or non-ASCII ``run.name`` is one line.
- ``llmguide cache stats | true`` (a closed pipe) and a folder where the cache file should be are one line.
- ``llmguide report`` does not write ``report.md`` into a folder that merely holds a ``config.yaml``.
- A YAML alias in a run's saved ``config.yaml`` is refused at once with one line (no expansion, no hang).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from llmguide.cli import main
from llmguide.core.errors import LLMUnavailableError
from llmguide.core.rundir import read_metrics

TINY = ["env=crafter", "env.max_steps=40", "num_envs=2", "agent.num_steps=32", "agent.hidden=32", "method=none",
        "progress=false", "eval.episodes=0", "total_steps=64"]
NESTED = ("[" * 100_000 + "]" * 100_000).encode()   # valid JSON, nested far deeper than json.loads recurses


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("llmguide: "), err
    return lines[0]


def cli(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmguide.cli", *args], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


# --- a deeply nested JSON answer -----------------------------------------------------------------------------------
class Nested(BaseHTTPRequestHandler):
    """Every request is answered 200, application/json, with :data:`NESTED`."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(NESTED)))
        self.end_headers()
        self.wfile.write(NESTED)

    do_GET = do_POST

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def nested_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Nested)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("call", ["generate", "score"])
def test_a_deeply_nested_json_answer_is_a_decode_fault_backed_off_and_counted(nested_server, call):
    from llmguide.llm.backends.http import HTTPLM

    lm = HTTPLM(nested_server, "nested", max_retries=2, backoff_base=0.01, backoff_max=0.02)
    try:
        with pytest.raises(LLMUnavailableError, match="does not parse as JSON.*after 2 retries"):
            lm.generate(["hello"]) if call == "generate" else lm.score(["a context "], [["candidate"]])
        stats = lm.io_stats()
    finally:
        lm.close()
    assert stats["errors_decode"] == 3 and stats["retries"] == 2 and stats["failed"] == 1


def test_the_start_up_probe_and_the_run_count_nested_answers_as_faults(nested_server, tmp_path):
    done = cli("train", *TINY, "method=ellm", "llm=http", f"llm.base_url={nested_server}", "llm.max_retries=1",
               f"run.dir={tmp_path}", "run.name=nested", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr, done.stderr
    assert "LM probe: one score request" in done.stderr and "does not parse as JSON" in done.stderr
    assert "LM answered 0 of" in done.stdout
    lm = [r for r in read_metrics(tmp_path / "nested") if "lm/errors_decode" in r][-1]
    # every request that came back was a decode fault, counted and backed off; the last record may be taken while
    # up to llm.concurrency (4) requests are still in flight (sent, not yet answered)
    sent, decode = lm["lm/http_requests"], lm["lm/errors_decode"]
    assert 0 < decode <= sent <= decode + 4 and lm["lm/retries"] > 0
    assert not {k: v for k, v in lm.items() if k.startswith("lm/errors_") and k != "lm/errors_decode" and v}


# --- run.name --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,says", [("../escaped", "outside run.dir"), ("ABS", "outside run.dir"),
                                       ("x" * 300, "300 bytes long")], ids=["dotdot", "absolute", "too-long"])
def test_a_run_name_that_leaves_run_dir_or_is_too_long_is_one_line(tmp_path, name, says, capsys):
    runs = tmp_path / "runs"
    name = str(tmp_path / "abs") if name == "ABS" else name
    assert main(["train", *TINY, f"run.dir={runs}", f"run.name={name}"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "'run.name'" in line and says in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []             # nothing written anywhere


def test_run_overwrite_never_deletes_outside_run_dir(tmp_path, capsys):
    victim = tmp_path / "victim"
    (victim / "checkpoints").mkdir(parents=True)
    (victim / "metrics.jsonl").write_text('{"step": 1}\n')
    (victim / "checkpoints" / "ckpt_000000000001.pt").write_bytes(b"precious")
    assert main(["train", *TINY, f"run.dir={tmp_path / 'runs'}", "run.name=../victim", "run.overwrite=true"]) == 2
    assert "outside run.dir" in one_line(capsys.readouterr().err)
    assert (victim / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert (victim / "checkpoints" / "ckpt_000000000001.pt").read_bytes() == b"precious"


def test_a_non_ascii_run_name_says_to_quote_it(tmp_path, capsys):
    assert main(["train", *TINY, f"run.dir={tmp_path}", "run.name=café"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "'run.name'" in line and "outside ASCII" in line and "run.name='café'" in line
    assert main(["train", *TINY, f"run.dir={tmp_path}", "run.name='café'", "--print-config"]) == 0   # the hint works
    assert "name: café" in capsys.readouterr().out


# --- the cache command -----------------------------------------------------------------------------------------------
def test_cache_stats_into_a_closed_pipe_is_one_line(tmp_path):
    done = subprocess.run(f"{sys.executable} -m llmguide.cli cache stats | true", shell=True, capture_output=True,
                          text=True, timeout=120)
    assert "broken pipe" in one_line(done.stderr)


@pytest.mark.parametrize("how", ["LLMGUIDE_CACHE_DIR", "--path"])
def test_a_folder_where_the_cache_file_should_be_is_one_line(tmp_path, monkeypatch, capsys, how):
    folder = tmp_path / "llm_cache.sqlite"
    folder.mkdir()
    monkeypatch.setenv("LLMGUIDE_CACHE_DIR", str(tmp_path))
    assert main(["cache", "stats", *(["--path", str(tmp_path)] if how == "--path" else [])]) == 1
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"llmguide: {how}: ") and "is a folder where a file is expected" in line


# --- report ----------------------------------------------------------------------------------------------------------
def test_report_does_not_write_into_a_folder_that_only_holds_a_config(tmp_path, capsys):
    import llmguide

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.yaml").write_bytes((Path(llmguide.__file__).parent / "conf" / "config.yaml").read_bytes())
    assert main(["report", str(conf)]) == 2
    assert "--out" in one_line(capsys.readouterr().err)
    assert sorted(p.name for p in conf.iterdir()) == ["config.yaml"]
    assert main(["report", str(conf), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "report.md").exists()


# --- a YAML alias in a saved config ----------------------------------------------------------------------------------
BOMB = "\n".join(["bomb:", '  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
                  *(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9))]) + "\n"


def test_a_yaml_alias_in_a_saved_config_is_refused_at_once(tmp_path):
    run = tmp_path / "run"
    assert main(["train", *TINY, f"run.dir={tmp_path}", "run.name=run"]) == 0
    config = run / "config.yaml"
    config.write_text(config.read_text() + BOMB)
    before = config.read_bytes()
    for args in (["eval", str(run)], ["train", f"run.dir={tmp_path}", "run.name=run", "run.resume=true"]):
        done = cli(*args, timeout=60)
        assert done.returncode == 2
        line = one_line(done.stderr)
        assert str(config) in line and "YAML alias" in line
    assert config.read_bytes() == before
