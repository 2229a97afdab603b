"""Hostile LM programs against the OS jail alone (no static check, no audit hook, full builtins).

Each program tries one escape and reports what it got (``print``, extras, errors).  The test
planted a canary file, a canary ``.npy`` and a canary environment variable, listens on loopback
TCP/UDP ports, catches SIGUSR1, and checks afterwards that nothing leaked, no marker file exists
(in ``tmp_path``, the host ``/tmp`` and the real LM cache dir), no connection or datagram arrived,
no signal arrived, the program did not report ``ESCAPED`` and the limits held.

``test_detector_sees_escapes_without_the_jail`` runs the cases that are safe to run unjailed with
``isolation="python"`` and the Python guards off, and asserts the detector fires for each: the
corpus is not vacuous.  ``LLMGUIDE_SANDBOX_TEST_ISOLATION=python`` runs the whole corpus under
``isolation="python"`` with the Python guards on (the production fallback); expect failures — that
run only checks the tests themselves.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from llmguide.sandbox import DEFAULT_IMPORTS, Sandbox, SandboxLimits

ISOLATION = os.environ.get("LLMGUIDE_SANDBOX_TEST_ISOLATION", "os")
# The jail alone: no audit hook, no restricted builtins.  (For the manual run under
# isolation="python" the Python guards stay on — running this corpus unguarded on the host
# would, e.g., kill(-1, SIGKILL) every process — with every module the corpus uses importable.)
GUARDS = ISOLATION != "os"
EVERYTHING = (*DEFAULT_IMPORTS, "os", "sys", "io", "pathlib", "ctypes", "subprocess", "socket", "multiprocessing",
              "pty", "sqlite3", "dbm", "mmap", "shutil", "linecache", "codecs", "signal", "resource", "urllib",
              "threading", "time", "json")
HOSTILE = SandboxLimits(timeout=10, python_guards=GUARDS, isolation=ISOLATION, allowed_imports=EVERYTHING)
QUICK = dataclasses.replace(HOSTILE, timeout=3, timeout_per_item=0)
ITEMS = [({"image": np.zeros((2, 2))}, "caption")]
ENV_CANARY = f"sk-canary-{secrets.token_hex(12)}"
MB = 1024 * 1024

PRELUDE = '''
import os, sys
def leak(x):
    s = x.decode("latin-1") if isinstance(x, (bytes, bytearray)) else str(x)
    i = s.find("sk-canary")
    s = s[i:] if i >= 0 else s
    print("LEAK", s[:3000])
    return s[:100]
def escaped(detail):
    print("ESCAPED:", detail)
    return detail
'''


@dataclass
class Case:
    id: str
    code: str
    control: bool = False     # safe to run unjailed, and the detector must then see the escape


def reader(expr: str) -> str:
    return f"def potential(o, c):\n    data = {expr}\n    return 1.0, {{'leak': leak(data)}}\n"


def attempt(body: str, on_success: str = "escaped('it worked')") -> str:
    """Top-level attack; prints ESCAPED if it did not raise."""
    lines = "\n".join("    " + ln for ln in body.strip().splitlines())
    return f"try:\n{lines}\n    {on_success}\nexcept Exception as err:\n    print('blocked', repr(err)[:200])\n"


def spawn(body: str) -> str:
    """Process creation: the new process prints SPAWNED and touches the markers."""
    return ("CMD = f'touch {MARKER} {TMP_MARKER}; echo ESCAPED: SPAWNED'\n"
            + attempt(body, "pass") + "def potential(o, c):\n    return 1.0\n")


CASES = [
    # --- reading a host file, through every module that can ------------------------------------
    Case("read-open", reader("open(CANARY).read()"), control=True),
    Case("read-io-open", "import io\n" + reader("io.open(CANARY, 'rb').read()"), control=True),
    Case("read-pathlib", "import pathlib\n" + reader("pathlib.Path(CANARY).read_text()"), control=True),
    Case("read-os-open", reader("os.read(os.open(CANARY, os.O_RDONLY), 4096)"), control=True),
    Case("read-np-load", "import numpy as np\n" + reader("np.load(CANARY_NPY)"), control=True),
    Case("read-np-loadtxt", "import numpy as np\n" + reader("np.loadtxt(CANARY, dtype=str)"), control=True),
    Case("read-np-genfromtxt", "import numpy as np\n" + reader("np.genfromtxt(CANARY, dtype=str)"), control=True),
    Case("read-np-fromfile", "import numpy as np\n" + reader("np.fromfile(CANARY, dtype=np.uint8).tobytes()"),
         control=True),
    Case("read-np-memmap", "import numpy as np\n" + reader("np.memmap(CANARY, dtype=np.uint8, mode='r').tobytes()"),
         control=True),
    Case("read-np-lib-format", "import numpy as np\n" + reader("np.lib.format.open_memmap(CANARY_NPY, mode='r')"),
         control=True),
    Case("read-np-fromregex", "import numpy as np\n"
         + reader("np.fromregex(CANARY, r'(\\w+)', dtype=[('x', 'U80')])"), control=True),
    Case("read-np-datasource", "import numpy as np\n" + reader("np.lib.npyio.DataSource(None).open(CANARY).read()"),
         control=True),
    Case("read-linecache", "import linecache\n" + reader("linecache.getline(CANARY, 1)"), control=True),
    Case("read-codecs", "import codecs\n" + reader("codecs.open(CANARY).read()"), control=True),
    Case("read-mmap", "import mmap\n"
         + reader("mmap.mmap(os.open(CANARY, os.O_RDONLY), 0, prot=mmap.PROT_READ)[:]"), control=True),
    Case("read-ctypes-fopen", "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.fopen.restype = ctypes.c_void_p\n"
         "buf = ctypes.create_string_buffer(256)\n"
         + reader("(libc.fread(buf, 1, 255, ctypes.c_void_p(libc.fopen(CANARY.encode(), b'r'))), buf.value)[1]"),
         control=True),
    Case("read-shutil-copy", "import shutil\n"
         + reader("open(shutil.copy(CANARY, os.path.join(os.getcwd(), 'copy.txt'))).read()"), control=True),
    Case("read-symlink", reader("(os.symlink(CANARY, 'link.txt'), open('link.txt').read())[1]"), control=True),
    Case("read-proc-parent-root", reader("open(f'/proc/{PPID}/root{CANARY}').read()"), control=True),
    Case("read-etc-shadow", reader("open('/etc/shadow').read()") + "if 'root:' in open('/etc/shadow').read():\n"
         "    escaped('read /etc/shadow')\n", control=os.geteuid() == 0),
    Case("read-repo", reader("open(REPO + '/pyproject.toml').read()")
         + "if 'name = \"llmguide\"' in open(REPO + '/pyproject.toml').read():\n    escaped('read the repo')\n",
         control=True),
    # --- the parent's environment ---------------------------------------------------------------
    # (the child never inherits the parent's environment, in either isolation: no control for those)
    Case("env-os-environ", reader("dict(os.environ)")),
    Case("env-proc-self", reader("open('/proc/self/environ', 'rb').read()")),
    Case("env-proc-1", reader("open('/proc/1/environ', 'rb').read()")),
    Case("env-proc-parent", reader("open(f'/proc/{PPID}/environ', 'rb').read()")),
    Case("env-proc-other-process", reader("open(f'/proc/{HELPER}/environ', 'rb').read()"), control=True),
    Case("env-proc-scan", "def scan():\n    found = []\n    for p in os.listdir('/proc'):\n        try:\n"
         "            env = open(f'/proc/{p}/environ', 'rb').read()\n        except OSError:\n            continue\n"
         "        if b'sk-canary' in env:\n            found.append(env)\n    return found\n" + reader("scan()"),
         control=True),
    Case("env-ctypes-getenv", "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.getenv.restype = ctypes.c_char_p\n"
         + reader("libc.getenv(b'OPENAI_API_KEY')")),
    # --- creating processes, through every primitive ------------------------------------------
    Case("proc-os-system", spawn("if os.system(CMD) != 0: raise OSError('failed')"), control=True),
    Case("proc-os-popen", spawn("print(os.popen(CMD).read())"), control=True),
    Case("proc-subprocess-run", "import subprocess\n"
         + spawn("print(subprocess.run(CMD, shell=True, capture_output=True, text=True).stdout)"), control=True),
    Case("proc-subprocess-popen", "import subprocess\n"
         + spawn("print(subprocess.Popen(['/bin/sh', '-c', CMD], stdout=subprocess.PIPE).communicate()[0])"),
         control=True),
    Case("proc-os-fork", spawn("pid = os.fork()\nif pid == 0:\n    os.execv('/bin/sh', ['sh', '-c', CMD])\n"
                               "os.waitpid(pid, 0)"), control=True),
    Case("proc-os-forkpty", spawn("pid, fd = os.forkpty()\nif pid == 0:\n    os.execv('/bin/sh', ['sh', '-c', CMD])\n"
                                  "os.waitpid(pid, 0)"), control=True),
    Case("proc-os-posix-spawn", spawn("os.waitpid(os.posix_spawn('/bin/sh', ['sh', '-c', CMD], {}), 0)"),
         control=True),
    Case("proc-os-spawnv", spawn("os.spawnv(os.P_WAIT, '/bin/sh', ['sh', '-c', CMD])"), control=True),
    Case("proc-os-execv", spawn("os.execv('/bin/sh', ['sh', '-c', CMD])"), control=True),
    Case("proc-pty-spawn", "import pty\n" + spawn("pty.spawn(['/bin/sh', '-c', CMD])"), control=True),
    Case("proc-multiprocessing", "import multiprocessing\n"
         + spawn("p = multiprocessing.get_context('fork').Process(target=os.system, args=(CMD,))\n"
                 "p.start()\np.join()"), control=True),
    Case("proc-ctypes-system", "import ctypes\n"
         + spawn("if ctypes.CDLL(None).system(CMD.encode()) != 0: raise OSError('failed')"), control=True),
    Case("proc-ctypes-fork", "import ctypes\n"
         + spawn("pid = ctypes.CDLL(None).fork()\nif pid < 0: raise OSError('fork failed')\n"
                 "if pid == 0:\n    os.execv('/bin/sh', ['sh', '-c', CMD])\nos.waitpid(pid, 0)"), control=True),
    Case("proc-ctypes-syscall-clone", "import ctypes, signal\n"
         + spawn("pid = ctypes.CDLL(None).syscall(56, signal.SIGCHLD, 0, 0, 0, 0)\n"
                 "if pid < 0: raise OSError('clone failed')\n"
                 "if pid == 0:\n    os.execv('/bin/sh', ['sh', '-c', CMD])\nos.waitpid(pid, 0)"), control=True),
    # --- writing outside the scratch dir, through C extensions and numpy -------------------------
    Case("write-sqlite-tmp-path", "import sqlite3\n"
         + attempt("db = sqlite3.connect(MARKER)\ndb.execute('create table t (x)')\ndb.commit()"), control=True),
    Case("write-sqlite-lm-cache", "import sqlite3\n"
         + attempt("db = sqlite3.connect(CACHE_DB)\ndb.execute('create table t (x)')\ndb.commit()")),
    Case("write-ctypes-fwrite", "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.fopen.restype = ctypes.c_void_p\n"
         + attempt("f = libc.fopen(MARKER.encode(), b'w')\nif not f: raise OSError('fopen failed')\n"
                   "libc.fwrite(b'x', 1, 1, ctypes.c_void_p(f))\nlibc.fclose(ctypes.c_void_p(f))"), control=True),
    Case("write-np-save", "import numpy as np\n" + attempt("np.save(MARKER, np.zeros(3))"), control=True),
    Case("write-np-tofile-host-tmp", "import numpy as np\n" + attempt("np.zeros(3).tofile(TMP_MARKER)", "pass"),
         control=True),
    Case("write-np-memmap", "import numpy as np\n"
         + attempt("m = np.memmap(MARKER, dtype=np.uint8, mode='w+', shape=(8,))\nm[:] = 1\nm.flush()"),
         control=True),
    Case("write-dbm", "import dbm\n" + attempt("d = dbm.open(MARKER, 'c')\nd[b'k'] = b'v'\nd.close()"),
         control=True),
    Case("write-open-host-tmp", attempt("open(TMP_MARKER, 'w').write('x')", "pass"), control=True),
    Case("write-venv-numpy", attempt("import numpy\n"
                                     "open(os.path.join(os.path.dirname(numpy.__file__), PWN_NAME), 'w').write('x')\n"
                                     "open(os.path.join(NUMPY_DIR, PWN_NAME), 'w').write('x')", "pass"),
         control=True),
    # --- network ------------------------------------------------------------------------------
    Case("net-tcp-connect", "import socket\n"
         + attempt("socket.create_connection(('127.0.0.1', PORT), timeout=2).sendall(b'hello')"), control=True),
    Case("net-urllib", "import urllib.request\n"
         + attempt("urllib.request.urlopen(f'http://127.0.0.1:{PORT}/', timeout=2)", "pass"), control=True),
    Case("net-udp", "import socket\n"
         + attempt("socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'hello', ('127.0.0.1', UDP_PORT))"),
         control=True),
    Case("net-dns", "import socket\n" + attempt("socket.getaddrinfo('example.com', 80)")),
    Case("net-ipv6-raw-netlink", "import socket\n"
         + attempt("socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)")),
    # --- limits, privileges, namespaces ---------------------------------------------------------
    Case("rlimit-raise", "import resource\n"
         + attempt("resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n"
                   "x = bytearray(3 * 1024 ** 3)")),
    Case("rlimit-cpu-raise", "import resource\n"
         + attempt("resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))")),
    Case("rlimit-parent-prlimit", "import resource\n"
         + attempt("resource.prlimit(PPID, resource.RLIMIT_CORE, (0, resource.RLIM_INFINITY))")),
    Case("priv-setuid-root", attempt("os.setuid(0)\nif os.getuid() != 0: raise OSError('not root')"),
         control=os.geteuid() == 0),
    Case("ns-unshare-user", "import ctypes\n"
         + attempt("if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0: raise OSError('refused')")),
    Case("ns-mount-tmpfs", "import ctypes\n"
         + attempt("os.makedirs('mnt', exist_ok=True)\n"
                   "if ctypes.CDLL(None).mount(b'none', b'mnt', b'tmpfs', 0, None) != 0: raise OSError('refused')")),
    Case("ns-ptrace-parent", "import ctypes\n"
         + attempt("if ctypes.CDLL(None).ptrace(16, PPID, 0, 0) != 0: raise OSError('refused')")),
    # --- signals ----------------------------------------------------------------------------
    Case("signal-parent", "import signal\n" + attempt("os.kill(PPID, signal.SIGUSR1)"), control=True),
    Case("signal-parent-group", "import signal\n" + attempt("os.killpg(os.getpgid(PPID), signal.SIGUSR1)")),
    Case("signal-ctypes-kill-parent", "import ctypes, signal\n"
         + attempt("if ctypes.CDLL(None).kill(PPID, signal.SIGUSR1) != 0: raise OSError('refused')"),
         control=True),
    # (the test process surviving these is the check)
    Case("signal-pid-1", "import signal\n" + attempt("os.kill(1, signal.SIGKILL)", "pass")),
    Case("signal-everyone", "import signal\n" + attempt("os.kill(-1, signal.SIGKILL)", "pass")),
]


def _proc_count() -> int:
    return sum(1 for p in os.listdir("/proc") if p.isdigit())


_OWN_TOKENS: list[str] = []   # the random tokens (call ids) of this test process's Sandbox calls


@pytest.fixture(autouse=True)
def _record_tokens(monkeypatch):
    """Remember the call id of every Sandbox call made here, so jails of other processes on the
    machine (another run's sandbox) are not counted as this test's leftovers."""
    original = secrets.token_hex

    def token_hex(n: int = 8) -> str:
        token = original(n)
        _OWN_TOKENS.append(token)
        return token

    monkeypatch.setattr(secrets, "token_hex", token_hex)


def _jailed_processes() -> list[str]:
    """Live processes started by this test process's Sandbox calls (their argv holds the call id)."""
    found = []
    own = [f"llmguide-sandbox-call-{t}".encode() for t in _OWN_TOKENS]
    for p in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{p}/cmdline").read_bytes() if p.isdigit() else b""
            if b"llmguide-sandbox-call" in cmdline and any(m in cmdline for m in own):
                found.append(p)
        except OSError:
            pass
    return found


class Listener:
    """Loopback TCP and UDP sockets; ``received()`` counts connections and datagrams since the last call.

    Nobody accepts while the program runs: the kernel completes TCP handshakes into the backlog,
    so a connection attempt that got through is still there to count afterwards."""

    def __init__(self):
        self.tcp = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        for s in (self.tcp, self.udp):
            s.setblocking(False)

    def received(self) -> int:
        count = 0
        for take in (lambda: self.tcp.accept()[0].close(), lambda: self.udp.recvfrom(100)):
            while True:
                try:
                    take()
                    count += 1
                except OSError:
                    break
        return count

    def close(self):
        self.tcp.close()
        self.udp.close()


@pytest.fixture(scope="module")
def helper():
    """Another host process whose environment holds the canary (for /proc/<pid>/environ)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            env={"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": ENV_CANARY})
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def listener():
    server = Listener()
    yield server
    server.close()


@pytest.fixture
def ctx(tmp_path, monkeypatch, listener, helper):
    import numpy

    secret = secrets.token_hex(16)
    env_value = ENV_CANARY
    monkeypatch.setenv("OPENAI_API_KEY", env_value)
    canary = tmp_path / "canary.txt"
    canary.write_text(f"canary-file-{secret}\n")
    canary_npy = tmp_path / "canary.npy"
    np.save(canary_npy, np.array([f"canary-npy-{secret}"]))
    tag = secrets.token_hex(6)
    cache_dir = Path.home() / ".cache" / "llmguide"
    c = {
        "secret": secret, "env_value": env_value, "canary": str(canary), "canary_npy": str(canary_npy),
        "marker": str(tmp_path / f"marker-{tag}"), "tmp_marker": f"/tmp/llmguide-sandbox-marker-{tag}",
        "cache_db": str(cache_dir / f"sandbox-pwned-{tag}.sqlite"), "pwn_name": f"pwned_{tag}.py",
        "numpy_dir": os.path.dirname(numpy.__file__), "tmp_path": tmp_path, "listener": listener,
        "helper": helper,
    }
    listener.received()
    received = []
    old_handler = signal.signal(signal.SIGUSR1, lambda *a: received.append(1))
    c["usr1"] = received
    yield c
    signal.signal(signal.SIGUSR1, old_handler)
    for leftover in (c["tmp_marker"], c["cache_db"], os.path.join(c["numpy_dir"], c["pwn_name"])):
        if os.path.exists(leftover):
            os.remove(leftover)


def program(case_code: str, c: dict) -> str:
    header = "".join(f"{k.upper()} = {v!r}\n" for k, v in (
        ("canary", c["canary"]), ("canary_npy", c["canary_npy"]), ("marker", c["marker"]),
        ("tmp_marker", c["tmp_marker"]), ("cache_db", c["cache_db"]), ("pwn_name", c["pwn_name"]),
        ("numpy_dir", c["numpy_dir"]), ("repo", str(Path(__file__).resolve().parents[1])),
        ("ppid", os.getpid()), ("helper", c["helper"]), ("port", c["listener"].tcp.getsockname()[1]),
        ("udp_port", c["listener"].udp.getsockname()[1])))
    return header + PRELUDE + case_code


def violations(res, c: dict) -> list[str]:
    """Every sign that the program escaped (empty list: it did not)."""
    found = []
    texts = {"values": repr(res.values.tolist()), "extras": json.dumps(res.extras), "stdout": res.stdout,
             "error": res.error or "", "item error": res.first_item_error or ""}
    for where, text in texts.items():
        if c["secret"] in text:
            found.append(f"canary file content in {where}")
        if c["env_value"] in text:
            found.append(f"canary env var in {where}")
        if "ESCAPED" in text:
            found.append(f"program reports {text[text.find('ESCAPED'):][:80]!r} in {where}")
    tmp_path = c["tmp_path"]
    for path in [*tmp_path.glob(Path(c["marker"]).name + "*"), Path(c["tmp_marker"]), Path(c["cache_db"]),
                 Path(c["numpy_dir"]) / c["pwn_name"]]:
        if path.exists():
            found.append(f"file written: {path}")
    if os.path.exists(tmp_path / "copy.txt") or os.path.lexists(tmp_path / "link.txt"):
        found.append("file written in tmp_path")
    if c["listener"].received():
        found.append("the loopback server was contacted")
    if c["usr1"]:
        found.append("the test process got SIGUSR1")
    return found


def run(code: str, limits: SandboxLimits):
    return Sandbox(limits, static_check=False).evaluate(code, "potential", ITEMS)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_program_is_contained(case: Case, ctx):
    procs = _proc_count()
    res = run(program(case.code, ctx), HOSTILE)
    assert violations(res, ctx) == [], res
    assert res.duration < HOSTILE.timeout + 5
    assert _jailed_processes() == []
    assert _proc_count() < procs + 20          # (other engineers' processes come and go)


CONTROL = [c for c in CASES if c.control]


@pytest.mark.skipif(ISOLATION != "os", reason="the control already runs unjailed")
@pytest.mark.parametrize("case", CONTROL, ids=[c.id for c in CONTROL])
def test_detector_sees_escapes_without_the_jail(case: Case, ctx):
    """The same program, unjailed and unguarded, does escape — so the test above means something."""
    limits = SandboxLimits(timeout=10, python_guards=False, isolation="python", network_namespace=False)
    res = run(program(case.code, ctx), limits)
    assert violations(res, ctx) != [], res


# --- limits: disk, output, values, time, processes ------------------------------------------------
def test_disk_fill_stops_at_the_scratch_size(ctx):
    import shutil

    free = shutil.disk_usage("/").free
    code = ("total = 0\nchunk = b'x' * (1024 * 1024)\ntry:\n    for i in range(64):\n"
            "        with open(f'fill{i}.bin', 'wb') as f:\n            for _ in range(4):\n"
            "                f.write(chunk)\n                f.flush()\n                total += len(chunk)\n"
            "except OSError as err:\n    print('stopped', err)\n"
            "print('WROTE', total)\nif total > 20 * 1024 * 1024:\n    escaped(f'wrote {total} bytes')\n"
            "def potential(o, c):\n    return 1.0\n")
    res = run(program(code, ctx), SandboxLimits(timeout=20, python_guards=False, isolation=ISOLATION,
                                                scratch_mb=16, file_mb=4))
    assert violations(res, ctx) == [], res
    assert "No space left" in res.stdout or "File too large" in res.stdout, res.stdout
    assert abs(shutil.disk_usage("/").free - free) < 200 * MB


def test_one_big_file_hits_the_file_size_limit(ctx):
    res = run(program("open('big.bin', 'wb').write(b'x' * (8 * 1024 * 1024))\n", ctx), HOSTILE)
    assert not res.ok and "File too large" in res.error


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("code, ok", [
    ("for _ in range(100):\n    print('x' * 10 ** 6)\ndef potential(o, c):\n    return 1.0\n", True),
    ("for _ in range(100):\n    os.write(1, b'x' * 10 ** 6)\n    os.write(2, b'x' * 10 ** 6)\n"
     "def potential(o, c):\n    return 1.0\n", True),
    ("for _ in range(100):\n    for fd in range(3, 12):\n        try:\n            os.write(fd, b'x' * 10 ** 6)\n"
     "        except OSError:\n            pass\ndef potential(o, c):\n    return 1.0\n", False),
], ids=["print-100MB", "fd1-fd2-100MB", "every-fd-100MB"])
def test_output_floods_are_truncated(code, ok, ctx):
    before = _maxrss_mb()
    res = run(program(code, ctx), HOSTILE)
    assert violations(res, ctx) == []
    assert res.ok == ok and len(res.stdout) <= HOSTILE.max_output_chars
    if not ok:
        assert "more than 8 MB" in res.error
    assert _maxrss_mb() - before < 50


@pytest.mark.parametrize("expr", [
    "1e308 * 10", "float('nan')", "-float('inf')", "10 ** 10000", "[0.0] * 10 ** 8", "list(range(10 ** 6))",
    "(1.0, {'deep': deep()})", "(1.0, {str(i): 'x' * 10 ** 5 for i in range(1000)})", "Weird()",
], ids=["overflow", "nan", "-inf", "huge-int", "1e8-list", "1e6-list", "deep-extra", "huge-extra", "weird-float"])
def test_huge_or_non_finite_values_give_zero(expr, ctx):
    code = ("def deep():\n    x = []\n    for _ in range(100000):\n        x = [x]\n    return x\n"
            "class Weird:\n    def __float__(self):\n        return float('inf')\n"
            f"def potential(o, c):\n    return {expr}\n")
    before = _maxrss_mb()
    res = run(program(code, ctx), HOSTILE)
    assert violations(res, ctx) == []
    assert np.isfinite(res.values).all() and len(res.values) == len(ITEMS)
    if expr.startswith("(1.0, {str"):
        assert res.ok and res.values.tolist() == [1.0]
        assert len(json.dumps(res.extras)) < 5000
    else:                                    # (the deep extra cannot be printed: RecursionError)
        assert not res.ok and res.values.tolist() == [0.0]
    assert _maxrss_mb() - before < 50


@pytest.mark.parametrize("code", [
    "import time\ntime.sleep(600)\n",
    "while True:\n    pass\n",
    "open('slowmod.py', 'w').write('import time\\ntime.sleep(600)\\n')\nsys.path.insert(0, os.getcwd())\n"
    "import slowmod\n",
    "def potential(o, c):\n    import time\n    time.sleep(600)\n",
], ids=["sleep-at-import", "loop-at-import", "slow-module", "slow-call"])
def test_slow_programs_are_killed_by_the_wall_clock(code, ctx):
    res = run(program(code, ctx), QUICK)
    assert not res.ok and "timed out" in res.error
    assert res.duration < QUICK.timeout + 3
    assert _jailed_processes() == []


@pytest.mark.parametrize("code", [
    "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "import ctypes\nlibc = ctypes.CDLL(None)\nwhile True:\n    libc.fork()\n",
    "import multiprocessing\nwhile True:\n    try:\n        multiprocessing.get_context('fork').Process("
    "target=time.sleep, args=(60,)).start()\n    except OSError:\n        pass\n",
    "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
], ids=["os-fork", "ctypes-fork", "multiprocessing", "threads"])
def test_fork_bombs_stay_in_the_jail(code, ctx):
    if ISOLATION != "os":
        pytest.skip("fork bombs run only in the OS jail")
    procs = _proc_count()
    res = run(program("import time\n" + code, ctx), QUICK)
    assert not res.ok
    assert violations(res, ctx) == []
    assert _jailed_processes() == []
    assert _proc_count() < procs + 20


def test_jail_layout(ctx):
    if ISOLATION != "os":
        pytest.skip("OS jail only")
    env = {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONHASHSEED", "PWD", "PYTHONDONTWRITEBYTECODE",
           "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "LC_CTYPE"}
    code = (f"ENV = {env!r}\n"
            "def potential(o, c):\n    st = dict(ln.split(':', 1) for ln in open('/proc/self/status'))\n"
            "    return 1.0, {'uid': os.getuid(), 'gid': os.getgid(), 'pid': os.getpid(),\n"
            "        'procs': len([p for p in os.listdir('/proc') if p.isdigit()]),\n"
            "        'cap': st['CapEff'].strip(), 'bnd': st['CapBnd'].strip(), 'nnp': st['NoNewPrivs'].strip(),\n"
            "        'seccomp': st['Seccomp_filters'].strip(), 'env': ','.join(k for k in os.environ if k not in ENV),\n"
            "        'fds': len(os.listdir('/proc/self/fd')), 'root': ','.join(sorted(os.listdir('/'))),\n"
            "        'host': os.uname().nodename, 'writable_root': os.access('/', os.W_OK)}\n")
    res = run(program(code, ctx), HOSTILE)
    assert res.ok, res.error
    info = res.extras[0]
    assert info["uid"] == info["gid"] == 65534 and info["pid"] <= 3 and info["procs"] <= 3
    assert int(info["cap"], 16) == 0 and int(info["bnd"], 16) == 0 and info["nnp"] == "1"
    assert info["seccomp"] == "2" and info["host"] == "sandbox" and info["writable_root"] == 0
    assert info["env"] == ""                    # no variable beyond the minimal set
    assert info["fds"] <= 5                      # stdin/out/err, the result pipe, listdir's own fd
    prefix_top = Path(sys.base_prefix).resolve().parts[1]         # where the interpreter is bound
    assert set(info["root"].split(",")) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "opt",
                                            "proc", "sbin", "tmp", "usr", prefix_top}


def test_seccomp_filters(ctx):
    """Threads and Unix sockets work; ptrace, inet sockets, fork and exec fail with EPERM, clone3 with ENOSYS."""
    if ISOLATION != "os":
        pytest.skip("OS jail only")
    code = ("import ctypes, socket, threading\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def errno_of(nr, *args):\n    r = libc.syscall(nr, *args)\n    return 0 if r >= 0 else ctypes.get_errno()\n"
            "def potential(o, c):\n    t = threading.Thread(target=print)\n    t.start()\n    t.join()\n"
            "    a, b = socket.socketpair()\n"
            "    try:\n        socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n        inet = 0\n"
            "    except OSError as err:\n        inet = err.errno\n"
            "    return 1.0, {'ptrace': errno_of(101, 0, 0, 0, 0), 'fork': errno_of(57), 'execve': errno_of(59, 0, 0, 0),\n"
            "                 'clone3': errno_of(435, 0, 0), 'unshare': errno_of(272, 0x20000), 'inet': inet,\n"
            "                 'mount': errno_of(165, 0, 0, 0, 0, 0), 'bpf': errno_of(321, 0, 0, 0)}\n")
    res = run(program(code, ctx), HOSTILE)
    assert res.ok, res.error
    eperm, enosys = 1.0, 38.0
    assert res.extras[0] == {"ptrace": eperm, "fork": eperm, "execve": eperm, "clone3": enosys, "unshare": eperm,
                             "inet": eperm, "mount": eperm, "bpf": eperm}
