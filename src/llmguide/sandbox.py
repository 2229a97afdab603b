"""Run untrusted (LM-written) Python in a sandboxed subprocess, one process per batch.

Layers of defence, each enough to stop the hostile programs in ``tests/test_sandbox.py``:

1. **Static check** (:func:`check_code`): the code must parse; imports must be in an
   allow-list (``math``, ``numpy``, ``re`` ...); no name or attribute beginning with ``_``
   (closes ``().__class__.__subclasses__()`` escapes); no ``eval``/``exec``/``open``/
   ``getattr``/``__import__`` ...
2. **Restricted builtins** in the namespace the code runs in, with an importing function
   that enforces the same allow-list at run time.
3. **Audit hook** (``sys.addaudithook``) in the runner: process creation (fork, exec,
   spawn, ``os.system``, ``subprocess``), sockets, ``ctypes`` and any file write, delete
   or rename outside the scratch directory raise ``PermissionError``.
4. **Resource limits** (``setrlimit``): CPU seconds, address space, file size, open files,
   no core dumps; plus a wall-clock timeout that kills the whole process group.
5. **No network namespace** when ``unshare -n`` works on this machine (an extra layer, not
   relied on).

A program that fails to load, raises, loops, allocates too much or does something
forbidden gives a :class:`SandboxResult` with ``ok=False``, a clear ``error`` and all values
0.0 — it never raises into the caller.  Items that raise individually get 0.0 and are
counted in ``item_errors``.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_IMPORTS = ("math", "numpy", "re", "collections", "itertools", "functools", "statistics",
                   "random", "heapq", "operator", "string")
FORBIDDEN_NAMES = frozenset({
    "eval", "exec", "compile", "open", "input", "breakpoint", "globals", "locals", "vars", "getattr",
    "setattr", "delattr", "exit", "quit", "help", "memoryview", "__import__", "__builtins__", "__loader__",
    "__spec__", "classmethod", "staticmethod", "property", "super",
})


class SandboxError(ValueError):
    """The code was rejected before running (syntax error, forbidden import or name)."""


@dataclass
class SandboxLimits:
    """Resource limits of one sandbox call."""

    timeout: float = 20.0                  # wall-clock seconds per call (process start included)
    timeout_per_item: float = 0.01         # extra wall-clock seconds per batch item
    cpu_seconds: int = 30                  # RLIMIT_CPU
    memory_mb: int = 1024                  # RLIMIT_AS (numpy's import alone needs ~300 MB of address space)
    file_mb: int = 4                       # RLIMIT_FSIZE: largest file the code may write (in scratch)
    open_files: int = 64                   # RLIMIT_NOFILE
    max_output_chars: int = 4000           # captured print() output kept
    allowed_imports: tuple[str, ...] = DEFAULT_IMPORTS
    network_namespace: bool = True         # use `unshare -n` when available


@dataclass
class SandboxResult:
    """Outcome of one call: per-item values (0.0 where anything failed) and diagnostics."""

    values: np.ndarray
    ok: bool
    error: str | None = None
    item_errors: int = 0
    first_item_error: str | None = None
    stdout: str = ""
    duration: float = 0.0
    extras: list[dict] = field(default_factory=list)   # second element of (value, dict) returns


# --- static check ------------------------------------------------------------------------
def check_code(code: str, allowed_imports: Sequence[str] = DEFAULT_IMPORTS) -> None:
    """Raise :class:`SandboxError` if ``code`` does not parse or uses a forbidden construct."""
    try:
        tree = ast.parse(code)
    except SyntaxError as err:
        raise SandboxError(f"syntax error at line {err.lineno}: {err.msg}") from None
    allowed = set(allowed_imports)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level:
                raise SandboxError(f"line {node.lineno}: relative import is not allowed")
            for name in names:
                if name.split(".")[0] not in allowed:
                    raise SandboxError(f"line {node.lineno}: forbidden import '{name}' "
                                       f"(allowed: {', '.join(sorted(allowed))})")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise SandboxError(f"line {node.lineno}: access to private attribute '.{node.attr}' is not allowed")
        elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id.startswith("__")):
            raise SandboxError(f"line {node.lineno}: use of '{node.id}' is not allowed")
        elif isinstance(node, ast.alias) and node.name.startswith("_"):
            raise SandboxError(f"line {getattr(node, 'lineno', '?')}: import of private name '{node.name}'")


# --- the runner executed in the child process ----------------------------------------------
RUNNER = r'''
import resource, sys
_MB = 1024 * 1024
_cpu, _mem, _fsize = (int(a) for a in sys.argv[1:4])
resource.setrlimit(resource.RLIMIT_CPU, (_cpu, _cpu + 1))
resource.setrlimit(resource.RLIMIT_AS, (_mem * _MB, _mem * _MB))
resource.setrlimit(resource.RLIMIT_FSIZE, (_fsize * _MB, _fsize * _MB))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
import builtins, io, json, math, os, pickle, traceback
import numpy

SCRATCH = os.path.realpath(os.getcwd())
with open("job.pkl", "rb") as f:
    job = pickle.load(f)
_dump, _open, _realpath = json.dumps, open, os.path.realpath
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

def _inside(path):
    try:
        p = _realpath(os.fsdecode(path)) if not isinstance(path, int) else None
    except Exception:
        return False
    return p is not None and (p == SCRATCH or p.startswith(SCRATCH + os.sep))

_BLOCKED = ("os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.kill",
            "os.killpg", "subprocess.", "socket.", "ctypes.", "os.putenv", "os.unsetenv", "os.chdir",
            "os.setuid", "os.setgid", "resource.setrlimit", "sys.addaudithook", "shutil.", "pty.",
            "os.truncate", "mmap.", "signal.")
_PATH_EVENTS = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link",
                "os.symlink", "os.utime", "os.chflags", "os.lchmod", "os.lchown", "os.truncate")

def _hook(event, args):
    if event.startswith(_BLOCKED):
        raise PermissionError(f"sandbox: '{event}' is not allowed")
    if event == "open":
        path, mode, flags = args
        writing = (mode is not None and any(c in str(mode) for c in "wax+")) or (
            mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writing and not _inside(path):
            raise PermissionError(f"sandbox: writing {path!r} outside the scratch directory is not allowed")
    elif event.startswith(_PATH_EVENTS):
        for a in args[:2]:
            if isinstance(a, (str, bytes, os.PathLike)) and not _inside(a):
                raise PermissionError(f"sandbox: '{event}' on {a!r} outside the scratch directory")

ALLOWED = set(job["allowed_imports"])
_real_import = builtins.__import__

def _safe_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level or name.split(".")[0] not in ALLOWED:
        raise ImportError(f"sandbox: import of '{name}' is not allowed")
    return _real_import(name, globals, locals, fromlist, level)

SAFE = ["abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "complex", "dict",
        "divmod", "enumerate", "filter", "float", "format", "frozenset", "hasattr", "hash", "hex", "int",
        "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min", "next", "object", "oct",
        "ord", "pow", "print", "range", "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum",
        "tuple", "type", "zip", "__build_class__", "True", "False", "None", "NotImplemented", "Ellipsis"]
safe_builtins = {k: getattr(builtins, k) for k in SAFE}
safe_builtins.update({k: v for k, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)})
safe_builtins["__import__"] = _safe_import

out = io.StringIO()
sys.stdout = sys.stderr = out
result = {"status": "ok", "error": None, "values": [], "extras": [], "item_errors": 0, "first_item_error": None}

def _short_tb(exc):
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    keep = [ln for ln in lines if "runner.py" not in ln]
    return "".join(keep)[-1500:]

lim = job["limits"]
resource.setrlimit(resource.RLIMIT_NOFILE, (lim["open_files"], lim["open_files"]))
sys.addaudithook(_hook)
sys.setrecursionlimit(2000)
namespace = {"__builtins__": safe_builtins, "__name__": "lm_program"}
try:
    exec(compile(job["code"], "<lm_program>", "exec"), namespace)
    fn = namespace.get(job["function"])
    if not callable(fn):
        result.update(status="error", error=f"the program defines no function '{job['function']}'")
        fn = None
except BaseException as exc:
    result.update(status="error", error="the program failed to load:\n" + _short_tb(exc))
    fn = None
if fn is not None:
    for item in job["items"]:
        try:
            value = fn(*item)
            extra = None
            if isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[1], dict):
                value, extra = value
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"non-finite value {value}")
            result["values"].append(value)
            if extra is not None and len(result["extras"]) < 32:
                result["extras"].append({str(k): (float(v) if isinstance(v, (int, float)) else str(v)[:100])
                                         for k, v in list(extra.items())[:20]})
        except BaseException as exc:
            result["values"].append(None)
            result["item_errors"] += 1
            if result["first_item_error"] is None:
                result["first_item_error"] = _short_tb(exc)
result["stdout"] = out.getvalue()[: lim["max_output_chars"]]
payload = _dump(result)
with _open(os.path.join(SCRATCH, "result.json"), "w") as f:
    f.write(payload)
'''


@cache
def _unshare_available() -> bool:
    exe = shutil.which("unshare")
    if exe is None:
        return False
    try:
        return subprocess.run([exe, "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _describe_exit(code: int, limits: SandboxLimits) -> str:
    if code < 0:
        sig = -code
        if sig == signal.SIGXCPU:
            return f"CPU time limit exceeded ({limits.cpu_seconds} s)"
        if sig == signal.SIGXFSZ:
            return f"file size limit exceeded ({limits.file_mb} MB)"
        if sig == signal.SIGKILL:
            # SIGXCPU at the soft limit is not always delivered first; the hard limit (soft + 1) kills.
            return f"killed at the hard CPU time limit ({limits.cpu_seconds + 1} s) or the memory limit"
        return f"killed by signal {signal.Signals(sig).name}"
    if code == 0:
        return "the program ended the sandbox process before it returned its results"
    return f"the sandbox process exited with code {code}"


class Sandbox:
    """Evaluate one function of an untrusted program on a batch of argument tuples.

    ``Sandbox().evaluate(code, "potential", [(obs, caption), ...])`` starts one process,
    runs the program once and calls ``potential(*item)`` for every item.
    """

    def __init__(self, limits: SandboxLimits | None = None, scratch_root: str | Path | None = None,
                 static_check: bool = True):
        self.limits = limits or SandboxLimits()
        self.scratch_root = Path(scratch_root) if scratch_root else None
        self.static_check = static_check
        self.calls = 0
        self.failures = 0

    def evaluate(self, code: str, function: str, items: Sequence[tuple[Any, ...]]) -> SandboxResult:
        """Run ``function(*item)`` for each item; never raises for a bad program (see ``ok``/``error``)."""
        self.calls += 1
        start = time.perf_counter()
        zeros = np.zeros(len(items), dtype=np.float64)
        if self.static_check:
            try:
                check_code(code, self.limits.allowed_imports)
            except SandboxError as err:
                return self._fail(zeros, f"rejected: {err}", start)
        if self.scratch_root is not None:
            self.scratch_root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="sandbox-", dir=self.scratch_root))
        try:
            return self._run(code, function, items, scratch, zeros, start)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _run(self, code: str, function: str, items: Sequence[tuple], scratch: Path, zeros: np.ndarray,
             start: float) -> SandboxResult:
        lim = self.limits
        job = {"code": code, "function": function, "items": [tuple(i) for i in items],
               "allowed_imports": list(lim.allowed_imports),
               "limits": {"open_files": lim.open_files, "max_output_chars": lim.max_output_chars}}
        (scratch / "job.pkl").write_bytes(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL))
        (scratch / "runner.py").write_text(RUNNER)
        cmd = [sys.executable, "-I", str(scratch / "runner.py"), str(lim.cpu_seconds), str(lim.memory_mb),
               str(lim.file_mb)]
        if lim.network_namespace and _unshare_available():
            cmd = [shutil.which("unshare") or "unshare", "-n", *cmd]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch), "LANG": "C.UTF-8",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        timeout = lim.timeout + lim.timeout_per_item * len(items)
        proc = subprocess.Popen(cmd, cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            raw, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return self._fail(zeros, f"timed out after {timeout:.1f} s (wall clock); the process group was killed",
                              start)
        finally:
            self._kill(proc)
        result_file = scratch / "result.json"
        if proc.returncode != 0 or not result_file.exists():
            tail = raw.decode("utf-8", "replace")[-800:] if raw else ""
            reason = _describe_exit(proc.returncode, lim)
            if "MemoryError" in tail:
                reason = f"memory limit exceeded ({lim.memory_mb} MB)"
            return self._fail(zeros, reason + (f"\n{tail}" if tail else ""), start)
        try:
            data = json.loads(result_file.read_text()[: 50_000_000])
            raw_values = list(data["values"])
        except (ValueError, KeyError, TypeError) as err:
            return self._fail(zeros, f"unreadable sandbox result: {err}", start)
        if data.get("status") != "ok":
            return self._fail(zeros, str(data.get("error"))[:3000], start, stdout=str(data.get("stdout", "")))
        if len(raw_values) != len(items):
            return self._fail(zeros, f"sandbox returned {len(raw_values)} values for {len(items)} items", start)
        values = zeros.copy()
        bad = 0
        for i, v in enumerate(raw_values):
            if isinstance(v, int | float) and np.isfinite(v):
                values[i] = float(v)
            else:
                bad += 1
        item_errors = int(data.get("item_errors", 0))
        first = data.get("first_item_error")
        if items and item_errors >= len(items):
            return self._fail(zeros, f"every item raised; first error:\n{first}", start,
                              stdout=str(data.get("stdout", "")))
        if item_errors:
            log.warning("sandbox: %d of %d items raised; first error:\n%s", item_errors, len(items), first)
        return SandboxResult(values=values, ok=True, item_errors=max(item_errors, bad), first_item_error=first,
                             stdout=str(data.get("stdout", "")), duration=time.perf_counter() - start,
                             extras=list(data.get("extras", []))[:32])

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        """Kill the whole process group (the runner and anything it started)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def _fail(self, zeros: np.ndarray, error: str, start: float, stdout: str = "") -> SandboxResult:
        self.failures += 1
        lines = [ln for ln in error.splitlines() if ln.strip()] or ["?"]
        summary = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1].strip()}"
        log.warning("sandbox: program failed, using 0.0 for %d items: %s", len(zeros), summary)
        return SandboxResult(values=zeros, ok=False, error=error, stdout=stdout,
                             duration=time.perf_counter() - start)
