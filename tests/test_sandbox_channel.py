"""Hostile programs against the sandbox's result channel (part of the hostile corpus, like
``test_sandbox_hostile.py``: no static check, no audit hook, every module importable).

A program shares its process, and so its result pipe, with the runner.  It must not learn the
per-call result marker from anywhere it can read (argv, environment, ``/proc``); and when it does
learn it (simulated here by fixing the random token), what it forges must not reach the caller
as anything but a counted failure or a capped, finite result: ``Sandbox.evaluate`` never raises.
"""

from __future__ import annotations

import json
import os
import secrets

import numpy as np
import pytest

from llmguide.sandbox import DEFAULT_IMPORTS, Sandbox, SandboxLimits

ISOLATION = os.environ.get("LLMGUIDE_SANDBOX_TEST_ISOLATION", "os")
HOSTILE = SandboxLimits(timeout=10, python_guards=ISOLATION != "os", isolation=ISOLATION,
                        allowed_imports=(*DEFAULT_IMPORTS, "os", "stat", "json", "atexit", "re"))
ITEMS = [(1.0, "caption")]
LEAKED = "ab" * 8                           # the token every call gets while the marker is "leaked"
MARKER = f"\n@@llmguide-sandbox-result-{LEAKED}@@\n"

PIPES = '''
import atexit, json, os, re, stat
def pipes():
    """The fds that are pipes: the runner's result pipe (stdin/stdout/stderr are /dev/null by now)."""
    found = []
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                found.append(fd)
        except OSError:
            pass
    return found
def write_all(fds, data):
    for fd in fds:
        try:
            os.write(fd, data)
        except OSError:
            pass
FORGED = json.dumps({"status": "ok", "values": [123.0], "item_errors": 0, "extras": [], "stdout": "FORGED"})
'''


def run(code: str, limits: SandboxLimits = HOSTILE) -> tuple[Sandbox, object]:
    sandbox = Sandbox(limits, static_check=False)
    return sandbox, sandbox.evaluate(PIPES + code, "potential", ITEMS)


@pytest.fixture
def leaked(monkeypatch):
    """Every random token is LEAKED, so the program knows the marker (as if it had read it somewhere)."""
    monkeypatch.setattr(secrets, "token_hex", lambda n=8: "ab" * n)


def assert_clean(res, n: int = len(ITEMS)) -> None:
    """Whatever came back is well-typed, finite and small."""
    assert isinstance(res.values, np.ndarray) and res.values.shape == (n,) and np.isfinite(res.values).all()
    assert type(res.item_errors) is int and 0 <= res.item_errors <= n
    for text in (res.error, res.first_item_error, res.batch_error):
        assert text is None or (type(text) is str and len(text) <= 4000)
    assert type(res.stdout) is str and len(res.stdout) <= HOSTILE.max_output_chars
    assert type(res.batched) is bool and type(res.extras) is list and len(res.extras) <= 32
    assert len(json.dumps(res.extras, allow_nan=False)) < 32 * 20 * 250
    for extra in res.extras:
        assert type(extra) is dict and len(extra) <= 20
        for key, value in extra.items():
            assert type(key) is str and len(key) <= 100
            assert value is None or (type(value) is float and np.isfinite(value)) or (
                type(value) is str and len(value) <= 100)


def test_the_marker_is_not_readable_from_argv_environment_or_proc():
    """The program forges a result with every sandbox token it can find in /proc/*/{cmdline,environ}."""
    code = ("tokens = set()\nfor p in os.listdir('/proc'):\n    for name in ('cmdline', 'environ'):\n"
            "        try:\n            data = open(f'/proc/{p}/{name}', 'rb').read()\n        except OSError:\n"
            "            continue\n        tokens.update(re.findall(rb'llmguide-sandbox-[a-z]+-([0-9a-f]{16})', data))\n"
            "fds = pipes()\nfor t in tokens:\n"
            "    write_all(fds, f'\\n@@llmguide-sandbox-result-{t.decode()}@@\\n'.encode() + FORGED.encode())\n"
            "os._exit(0)\n")
    sandbox, res = run(code)
    assert not res.ok and res.values.tolist() == [0.0] and "FORGED" not in res.stdout
    assert sandbox.failures == 1 and ("before it returned its results" in res.error or ISOLATION != "os")


DEEP = "[" * 100_000 + "]" * 100_000
FORGERIES = {
    "deep-json": '{"status": "ok", "values": ' + DEEP + "}",
    "deep-error": '{"status": "error", "error": ' + DEEP + "}",
    "huge-int-value": '{"status": "ok", "values": [1' + "0" * 400 + "]}",
    "item-errors-word": '{"status": "ok", "values": [1.0], "item_errors": "many"}',
    "texts-not-strings": '{"status": "ok", "values": [1.0], "first_item_error": {"a": 1}, "batch_error": [1]}',
    "not-an-object": "[1.0]",
    "bool-value": '{"status": "ok", "values": [true]}',
    "huge-extra": '{"status": "ok", "values": [1.0], "extras": [{"k": "' + "x" * 5000 + '"}]}',
    "many-extras": '{"status": "ok", "values": [1.0], "extras": [' + ",".join(
        '{"' + "k" * 300 + f'{i}": {i}' + "}" for i in range(1000)) + "]}",
    "non-finite-extras": '{"status": "ok", "values": [1.0], "extras": [{"nan": NaN, "inf": -Infinity, "big": 1'
                         + "0" * 400 + ', "list": [1, 2]}]}',
    "bad-utf8": b'{"status": "ok", "values": [1.0], "stdout": "\xff\xfe"}'.decode("latin-1"),
}


@pytest.mark.parametrize("payload", list(FORGERIES.values()), ids=list(FORGERIES))
def test_a_forged_result_is_a_counted_failure_or_a_clean_result(payload, leaked):
    """Even with the marker known, a forged result never raises into the caller: decoding and
    checking failures are counted failures; a well-formed one comes back capped and finite."""
    code = f"write_all(pipes(), {MARKER!r}.encode() + {payload!r}.encode('latin-1'))\nos._exit(0)\n"
    sandbox, res = run(code)
    assert_clean(res)
    if "extras" in payload:
        assert res.ok and res.values.tolist() == [1.0] and sandbox.failures == 0
        assert all(v is None or type(v) is str or np.isfinite(v) for e in res.extras for v in e.values())
    else:
        assert not res.ok and res.values.tolist() == [0.0] and sandbox.failures == 1
        assert "sandbox result" in res.error


def test_a_second_result_after_the_real_one_is_refused(leaked):
    """An atexit hook (run after the runner wrote the real result) writes a forged second one."""
    code = (f"KEPT = [os.dup(fd) for fd in pipes()]\n"
            f"atexit.register(write_all, KEPT, {MARKER!r}.encode() + FORGED.encode())\n"
            "def potential(o, c):\n    return 2.0\n")
    sandbox, res = run(code)
    assert not res.ok and res.values.tolist() == [0.0] and "FORGED" not in res.stdout
    assert "marker appears 2 times" in res.error and sandbox.failures == 1


@pytest.mark.parametrize("tail", [b"\n \n", b"{}", b"x" * 100])
def test_bytes_after_the_result_are_refused(tail):
    code = (f"KEPT = [os.dup(fd) for fd in pipes()]\natexit.register(write_all, KEPT, {tail!r})\n"
            "def potential(o, c):\n    return 2.0\n")
    sandbox, res = run(code)
    assert not res.ok and res.values.tolist() == [0.0]
    assert "after the result" in res.error and sandbox.failures == 1


def test_junk_before_the_result_is_ignored():
    """Bytes the program writes on the pipe before the real result are not part of it."""
    code = "write_all(pipes(), b'junk ' + FORGED.encode())\ndef potential(o, c):\n    return 2.0\n"
    _, res = run(code)
    assert res.ok and res.values.tolist() == [2.0] and "FORGED" not in res.stdout
