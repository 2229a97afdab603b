"""The LM-code sandbox: good programs run batched; hostile ones give a clear error and zeros."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmguide.sandbox import DEFAULT_IMPORTS, Sandbox, SandboxError, SandboxLimits, check_code

ITEMS = [({"image": np.full((2, 3), float(i))}, f"caption {i}") for i in range(4)]
# Runtime layers are tested with the static check off and dangerous modules importable, so the
# audit hook and resource limits themselves must stop the program.
OPEN = SandboxLimits(timeout=10, allowed_imports=(*DEFAULT_IMPORTS, "os", "socket", "subprocess", "pathlib",
                                                   "ctypes", "multiprocessing"))


def run(code: str, limits: SandboxLimits | None = None, static: bool = True, items=ITEMS):
    return Sandbox(limits or SandboxLimits(timeout=10), static_check=static).evaluate(code, "potential", items)


def test_good_program_runs_once_over_the_batch():
    code = ("import numpy as np\nimport math\ncalls = []\n"
            "def potential(obs, caption):\n    calls.append(1)\n    print(len(calls))\n"
            "    return float(np.sum(obs['image'])) + len(caption) / 100, {'n': len(calls)}\n")
    res = run(code)
    assert res.ok and res.error is None
    np.testing.assert_allclose(res.values, [6 * i + 0.09 for i in range(4)])
    assert res.stdout.split() == ["1", "2", "3", "4"]   # one process, module state kept across items
    assert res.extras[-1] == {"n": 4.0}


def test_items_that_raise_get_zero_and_are_counted():
    res = run("def potential(obs, caption):\n    return 1.0 / float(obs['image'][0, 0])\n")
    assert res.ok and res.item_errors == 1 and "ZeroDivisionError" in res.first_item_error
    np.testing.assert_allclose(res.values, [0.0, 1.0, 0.5, 1 / 3])


def test_non_finite_and_missing_function_and_syntax_error():
    assert not run("def potential(obs, caption):\n    return float('nan')\n").ok
    res = run("def other(obs, caption):\n    return 1\n")
    assert not res.ok and "no function 'potential'" in res.error
    res = run("def potential(obs caption):\n    return 1\n")
    assert not res.ok and res.error.startswith("rejected: syntax error")


@pytest.mark.parametrize("code, needle", [
    ("import os\nos.system('echo hi')\n", "forbidden import 'os'"),
    ("import subprocess\n", "forbidden import 'subprocess'"),
    ("from socket import socket\n", "forbidden import 'socket'"),
    ("def potential(o, c):\n    return ().__class__.__base__.__subclasses__()\n", "private attribute"),
    ("def potential(o, c):\n    return open('/etc/passwd').read()\n", "'open' is not allowed"),
    ("def potential(o, c):\n    return eval('1')\n", "'eval' is not allowed"),
    ("def potential(o, c):\n    return getattr(o, '__class__')\n", "'getattr' is not allowed"),
])
def test_static_check_rejects_dangerous_code(code, needle):
    with pytest.raises(SandboxError, match=needle):
        check_code(code)
    res = run(code)
    assert not res.ok and needle in res.error and not res.values.any()


def test_infinite_loop_is_killed_by_the_wall_clock():
    res = run("def potential(o, c):\n    while True:\n        pass\n", SandboxLimits(timeout=2, timeout_per_item=0))
    assert not res.ok and "timed out" in res.error
    assert res.values.tolist() == [0.0] * 4


def test_cpu_limit_stops_a_busy_program():
    res = run("import math\nwhile True:\n    math.sqrt(2.0)\n", SandboxLimits(timeout=60, cpu_seconds=1))
    assert not res.ok and "CPU time limit" in res.error


@pytest.mark.parametrize("code", [
    "def potential(o, c):\n    x = bytearray(10 ** 11)\n    return 1.0\n",
    "import numpy as np\ndef potential(o, c):\n    return float(np.ones(10 ** 11).sum())\n",
    "x = []\nwhile True:\n    x.append(' ' * 10 ** 7)\n",
])
def test_memory_bombs_hit_the_address_space_limit(code):
    res = run(code, SandboxLimits(timeout=30, memory_mb=512))
    assert not res.ok and ("MemoryError" in res.error or "allocate" in res.error or "memory" in res.error)


def test_fork_bomb_is_blocked_at_run_time():
    res = run("import os\nwhile True:\n    os.fork()\n", OPEN, static=False)
    assert not res.ok and "'os.fork' is not allowed" in res.error
    res = run("import multiprocessing\nmultiprocessing.Process(target=print).start()\n", OPEN, static=False)
    assert not res.ok and "not allowed" in res.error


@pytest.mark.parametrize("code, needle", [
    ("import os\nos.system('touch /tmp/x')\n", "'os.system' is not allowed"),
    ("import subprocess\nsubprocess.run(['true'])\n", "'subprocess.Popen' is not allowed"),
    ("import socket\nsocket.create_connection(('127.0.0.1', 9))\n", "not allowed"),
    ("import ctypes\nctypes.CDLL(None)\n", "'ctypes.dlopen' is not allowed"),
])
def test_processes_sockets_and_ctypes_are_blocked_at_run_time(code, needle):
    res = run(code, OPEN, static=False)
    assert not res.ok and needle in res.error


def test_file_writes_only_inside_the_scratch_dir(tmp_path: Path):
    target = tmp_path / "pwned.txt"
    victim = tmp_path / "keep.txt"
    victim.write_text("data")
    for code in (f"import pathlib\npathlib.Path({str(target)!r}).write_text('x')\n",
                 f"import os\nos.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)\n",
                 f"import os\nos.remove({str(victim)!r})\n"):
        res = run(code, OPEN, static=False)
        # the audit hook refuses it, or (in the OS jail, whose scratch is its own /tmp) the path is not there
        assert not res.ok and ("outside the scratch directory" in res.error or "No such file" in res.error)
    assert not target.exists() and victim.read_text() == "data"
    ok = run("import pathlib\ndef potential(o, c):\n    pathlib.Path('note.txt').write_text(c)\n    return 1.0\n",
             OPEN, static=False)
    assert ok.ok and ok.values.tolist() == [1.0] * 4
    big = run("import pathlib\npathlib.Path('big.txt').write_text('x' * 10 ** 8)\n", OPEN, static=False)
    assert not big.ok and "File too large" in big.error


def test_runtime_import_guard_and_exit():
    res = run("def potential(o, c):\n    import os\n    return 1.0\n", static=False)
    assert not res.ok and "import of 'os' is not allowed" in res.error
    res = run("import os\nos._exit(0)\n", OPEN, static=False)
    assert not res.ok and "before it returned its results" in res.error


def test_failures_are_counted_and_logged(caplog):
    sandbox = Sandbox(SandboxLimits(timeout=10))
    with caplog.at_level("WARNING", logger="llmguide.sandbox"):
        sandbox.evaluate("import os\n", "potential", ITEMS)
        sandbox.evaluate("def potential(o, c):\n    return 2.0\n", "potential", ITEMS)
    assert sandbox.calls == 2 and sandbox.failures == 1
    assert "forbidden import 'os'" in caplog.text


def test_without_the_os_jail_lm_code_is_refused(monkeypatch):
    from llmguide.sandbox import SandboxUnavailable, jail

    find_bwrap = jail.find_bwrap
    monkeypatch.setattr(jail, "check_available", jail.check_available.__wrapped__)   # no cached answer
    monkeypatch.setattr(jail, "find_bwrap", lambda: "/bin/false")          # a bwrap that cannot start
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        Sandbox()
    monkeypatch.setattr(jail, "find_bwrap", find_bwrap)
    monkeypatch.setattr(jail.os, "access", lambda *a: False)               # no bwrap installed
    with pytest.raises(SandboxUnavailable, match="make setup"):
        Sandbox(SandboxLimits(timeout=10))
    with pytest.raises(ValueError, match="isolation"):
        Sandbox(isolation="none")


def test_python_isolation_is_opt_in_and_loud(caplog):
    with caplog.at_level("WARNING", logger="llmguide.sandbox"):
        sandbox = Sandbox(SandboxLimits(timeout=10, isolation="python"))
    assert "WITHOUT the OS jail" in caplog.text and sandbox.limits.isolation == "python"
    res = sandbox.evaluate("def potential(o, c):\n    return 2.0\n", "potential", ITEMS)
    assert res.ok and res.values.tolist() == [2.0] * 4
    assert Sandbox(isolation="python").limits.isolation == "python"
    assert SandboxLimits().isolation == "os" and Sandbox().limits.isolation == "os"


def test_guards_refuse_frames_and_proc():
    """With the default guards a program cannot walk up to the runner's frame (whose locals hold the
    result being built) nor read its own memory or argv under /proc."""
    walk = ("box = []\ndef probe():\n    yield box[0].gi_frame.f_back\n"
            "def potential(o, c):\n    box.append(probe())\n    frame = next(box[-1])\n"
            "    while frame is not None:\n        for value in list(frame.f_locals.values()):\n"
            "            if isinstance(value, dict) and 'item_errors' in value:\n"
            "                value['item_errors'] = 'many'\n"
            "        frame = frame.f_back\n    return 1.0\n")
    res = run(walk)
    assert not res.ok and "access to frames" in res.error and res.values.tolist() == [0.0] * 4
    proc = "import numpy as np\ndef potential(o, c):\n    return float(len(np.loadtxt('/proc/self/cmdline', dtype=str)))\n"
    res = run(proc)
    assert not res.ok and "reading '/proc/self/cmdline' is not allowed" in res.error


def test_repeated_timeouts_open_the_breaker(caplog):
    """A program that times out breaker_timeouts calls in a row is refused from then on (counted,
    logged, at no cost); a call that finishes in time resets the count; other programs still run."""
    sandbox = Sandbox(SandboxLimits(timeout=1.5, timeout_per_item=0, breaker_timeouts=2))
    code = "def potential(o, c):\n    while c == 'slow':\n        pass\n    return 1.0\n"
    slow, fast = [(1, "slow")], [(1, "fast")]
    with caplog.at_level("WARNING", logger="llmguide.sandbox"):
        assert "timed out" in sandbox.evaluate(code, "potential", slow).error
        assert sandbox.evaluate(code, "potential", fast).ok                   # resets the count
        assert "timed out" in sandbox.evaluate(code, "potential", slow).error
        assert "refused for the rest of the run" not in caplog.text
        assert "timed out" in sandbox.evaluate(code, "potential", slow).error  # second in a row: opens
    assert "refused for the rest of the run" in caplog.text
    refused = sandbox.evaluate(code, "potential", fast)
    assert not refused.ok and refused.error.startswith("refused") and refused.duration < 0.5
    assert sandbox.timeouts == 3 and sandbox.refused == 1 and sandbox.failures == 4 and sandbox.calls == 5
    assert sandbox.evaluate("def potential(o, c):\n    return 2.0\n", "potential", fast).ok


def test_evaluate_never_raises_on_internal_errors(monkeypatch):
    import subprocess

    sandbox = Sandbox(SandboxLimits(timeout=10))

    def no_process(*args, **kwargs):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    res = sandbox.evaluate("def potential(o, c):\n    return 2.0\n", "potential", ITEMS)
    assert not res.ok and "internal error" in res.error and res.values.tolist() == [0.0] * 4
    res = sandbox.evaluate_batch("def potential(o, c):\n    return 2.0\n", "potential", [[1, 2], ["a", "b"]])
    assert not res.ok and sandbox.failures == 2
