"""The :class:`Sandbox` (see :mod:`llmguide.sandbox` for the layers): one jailed process per call.

Per call: the job goes in on stdin behind a one-line random result marker (never in argv or the
environment); the output comes back on a pipe and is read by :func:`llmguide.sandbox.result.read_result`,
which trusts nothing in it.  ``evaluate`` / ``evaluate_batch`` never raise for anything the program
does; an unexpected error of the sandbox itself (a process that cannot start...) is a counted
failure too.  A program that times out ``limits.breaker_timeouts`` calls in a row is refused for
the rest of this Sandbox's life (``refused`` counts those calls; the opening is logged).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pickle
import secrets
import selectors
import shutil
import signal
import site
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from llmguide.sandbox import jail
from llmguide.sandbox.result import ChildResult, read_result
from llmguide.sandbox.static import DEFAULT_IMPORTS, SandboxError, check_code

log = logging.getLogger(__name__)
ISOLATIONS = ("os", "python")
PYTHON_FLAGS = ("-s", "-S", "-B", "-P")   # no user/site packages, no .pyc, no cwd on sys.path


@dataclass
class SandboxLimits:
    """Resource limits and isolation of one sandbox call."""

    timeout: float = 20.0                  # wall-clock seconds per call (process start included)
    timeout_per_item: float = 0.01         # extra wall-clock seconds per batch item
    cpu_seconds: int = 30                  # RLIMIT_CPU
    memory_mb: int = 1024                  # RLIMIT_AS (numpy's import alone needs ~300 MB of address space)
    file_mb: int = 4                       # RLIMIT_FSIZE: largest file the code may write (in scratch)
    open_files: int = 64                   # RLIMIT_NOFILE
    max_output_chars: int = 4000           # captured print() output kept
    allowed_imports: tuple[str, ...] = DEFAULT_IMPORTS
    network_namespace: bool = True         # isolation="python" only: use `unshare -n` when available
    isolation: str = "os"                  # "os": bubblewrap jail; "python": Python-level layers only (weaker)
    scratch_mb: int = 16                   # size of the jail's tmpfs /tmp (all files together)
    processes: int = 16                    # RLIMIT_NPROC in the jail (fork is refused by seccomp anyway)
    python_guards: bool = True             # audit hook + restricted builtins; False only to test the jail alone
    max_result_mb: int = 8                 # bytes read back from the child before it is killed as a flood
    breaker_timeouts: int = 3              # a program timing out this many calls in a row is refused (0: never)


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
    batched: bool = False                  # evaluate_batch: the program's batch function gave the values
    batch_error: str | None = None         # evaluate_batch: why the batch function was not used (per-row fallback)


@cache
def _unshare_available() -> bool:
    exe = shutil.which("unshare")
    if exe is None:
        return False
    try:
        return subprocess.run([exe, "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@cache
def _site_dirs() -> tuple[str, ...]:
    """isolation="python": the current environment's site-packages (``-S`` leaves them off sys.path)."""
    return tuple(dict.fromkeys(os.path.realpath(p) for p in site.getsitepackages()))


def _signal_of(code: int, isolation: str) -> int | None:
    """The signal that ended the program: Popen reports -sig; bwrap exits with 128 + sig."""
    if code < 0:
        return -code
    if isolation == "os" and 128 < code < 128 + 65:
        return code - 128
    return None


def _describe_exit(code: int, limits: SandboxLimits) -> str:
    sig = _signal_of(code, limits.isolation)
    if sig is not None:
        if sig == signal.SIGXCPU:
            return f"CPU time limit exceeded ({limits.cpu_seconds} s)"
        if sig == signal.SIGXFSZ:
            return f"file size limit exceeded ({limits.file_mb} MB)"
        if sig == signal.SIGKILL:
            # SIGXCPU at the soft limit is not always delivered first; the hard limit (soft + 1) kills.
            return f"killed at the hard CPU time limit ({limits.cpu_seconds + 1} s) or the memory limit"
        try:
            return f"killed by signal {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    if code == 0:
        return "the program ended the sandbox process before it returned its results"
    return f"the sandbox process exited with code {code}"


def _feed(stream, data: bytes) -> None:
    try:
        stream.write(data)
    except (OSError, ValueError):
        pass
    finally:
        try:
            stream.close()
        except (OSError, ValueError):
            pass


class Sandbox:
    """Evaluate one function of an untrusted program on a batch of argument tuples.

    ``isolation`` ("os" or "python") overrides ``limits.isolation``.  With "os" (the default)
    the constructor checks once per process that the bubblewrap jail starts, and raises
    :class:`SandboxUnavailable` if it does not.  ``scratch_root`` (where per-call scratch dirs
    go) is used by isolation="python" only; the jail's scratch is its own tmpfs.
    """

    def __init__(self, limits: SandboxLimits | None = None, scratch_root: str | Path | None = None,
                 static_check: bool = True, isolation: str | None = None):
        limits = limits or SandboxLimits()
        if isolation is not None:
            limits = dataclasses.replace(limits, isolation=str(isolation))
        if limits.isolation not in ISOLATIONS:
            raise ValueError(f"sandbox isolation must be one of {ISOLATIONS}, not {limits.isolation!r}")
        self.limits = limits
        self.scratch_root = Path(scratch_root) if scratch_root else None
        self.static_check = static_check
        self.calls = 0
        self.failures = 0
        self.timeouts = 0                   # calls that ran out of wall-clock time
        self.refused = 0                    # calls refused because the program's breaker is open
        self._timeouts_in_a_row: dict[str, int] = {}
        self._broken: set[str] = set()      # programs (sha256 of the code) refused for good
        self._bwrap: str | None = None
        if limits.isolation == "os":
            self._bwrap = jail.check_available(tuple(sorted(set(limits.allowed_imports))), limits.scratch_mb)
        else:
            log.warning("sandbox: isolation='python' — LM-written code runs WITHOUT the OS jail (Python-level "
                        "checks and rlimits only; known escapes exist). Use isolation='os' (bubblewrap: "
                        "`apt-get install bubblewrap` or `make setup`) for anything but debugging.")
        if not limits.python_guards:
            log.warning("sandbox: python_guards=False — no audit hook or restricted builtins inside the sandbox "
                        "(meant for testing the OS jail alone)")

    def evaluate(self, code: str, function: str, items: Sequence[tuple[Any, ...]]) -> SandboxResult:
        """Run ``function(*item)`` for each item; never raises for a bad program (see ``ok``/``error``)."""
        start = time.perf_counter()
        zeros = np.zeros(len(items), dtype=np.float64)
        return self._call(code, lambda: {"code": code, "function": function, "items": [tuple(i) for i in items]},
                          zeros, start)

    def evaluate_batch(self, code: str, function: str, columns: Sequence[Any],
                       batch_function: str | None = "potential_batch") -> SandboxResult:
        """One call for a whole batch given as ``columns`` (each a dict of arrays with a leading batch
        dim, or a sequence); row ``i`` is ``function(*(column[i] ...))`` (a dict column gives
        ``{k: v[i]}``).  If the program defines ``batch_function``, it is called once as
        ``batch_function(*columns)`` and must return one finite number per row; otherwise (or if it
        raises, see ``batch_error``) ``function`` runs on each row.  Same failure rules as :meth:`evaluate`;
        columns of different lengths (the caller's error) raise ValueError."""
        start = time.perf_counter()
        columns = tuple(columns)
        sizes = {len(next(iter(c.values()))) if isinstance(c, dict) else len(c) for c in columns}
        if len(sizes) != 1:
            raise ValueError(f"evaluate_batch: columns of different lengths {sorted(sizes)}")
        zeros = np.zeros(sizes.pop(), dtype=np.float64)
        return self._call(code, lambda: {"code": code, "function": function, "items": [], "columns": columns,
                                         "n": len(zeros), "batch_function": batch_function}, zeros, start)

    def _call(self, code: str, make_job, zeros: np.ndarray, start: float) -> SandboxResult:
        """Static check, breaker, run; any exception of the sandbox itself becomes a counted failure."""
        self.calls += 1
        try:
            key = hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
            if key in self._broken:
                self.refused += 1
                return self._fail(zeros, f"refused: this program timed out {self.limits.breaker_timeouts} calls "
                                  "in a row, so it is not run again", start, quiet=True)
            if self.static_check:
                try:
                    check_code(code, self.limits.allowed_imports)
                except SandboxError as err:
                    return self._fail(zeros, f"rejected: {err}", start)
            result, timed_out = self._start(make_job(), zeros, start)
            self._count_timeout(key, timed_out)
            return result
        except Exception as err:                 # noqa: BLE001  (evaluate never raises)
            log.exception("sandbox: internal error")
            return self._fail(zeros, f"sandbox internal error: {type(err).__name__}: {err}", start)

    def _count_timeout(self, key: str, timed_out: bool) -> None:
        if not timed_out:
            self._timeouts_in_a_row.pop(key, None)
            return
        self.timeouts += 1
        row = self._timeouts_in_a_row[key] = self._timeouts_in_a_row.get(key, 0) + 1
        limit = self.limits.breaker_timeouts
        if limit and row >= limit:
            self._broken.add(key)
            del self._timeouts_in_a_row[key]
            log.warning("sandbox: program %s timed out %d calls in a row; it is refused for the rest of the run "
                        "(%d program(s) refused so far)", key[:12], row, len(self._broken))

    def _start(self, job: dict, zeros: np.ndarray, start: float) -> tuple[SandboxResult, bool]:
        if self.limits.isolation == "os":
            return self._run(job, None, zeros, start)
        if self.scratch_root is not None:
            self.scratch_root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="sandbox-", dir=self.scratch_root))
        try:
            return self._run(job, scratch, zeros, start)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _command(self, settings: dict, scratch: Path | None) -> tuple[list[str], list[int], int | None]:
        """The child's argv, the fds it inherits (closed here after the start) and the read end of
        bwrap's info pipe (None for isolation="python")."""
        lim = self.limits
        python = jail.interpreter()
        if lim.isolation == "python":
            settings.update(scratch=str(scratch), site=list(_site_dirs()), processes=0, seccomp=None)
            prefix = [python]
            if lim.network_namespace and _unshare_available():
                prefix = [shutil.which("unshare") or "unshare", "-n", python]
            return [*prefix, *PYTHON_FLAGS, "-c", jail.runner_source(), json.dumps(settings)], [], None
        assert self._bwrap is not None
        seccomp = jail.seccomp_supported()
        seccomp_fd = jail.seccomp_memfd(jail.kernel_filter()) if seccomp else None
        info_r, info_w = os.pipe()
        os.set_blocking(info_r, False)
        settings.update(scratch=jail.SCRATCH, site=[jail.SITE], processes=lim.processes,
                        seccomp=jail.process_filter().hex() if seccomp else None)
        prefix = jail.bwrap_command(self._bwrap, python, tuple(sorted(set(lim.allowed_imports))),
                                    lim.scratch_mb, seccomp_fd, info_w)
        fds = [info_w] if seccomp_fd is None else [seccomp_fd, info_w]
        return [*prefix, *PYTHON_FLAGS, "-c", jail.runner_source(), json.dumps(settings)], fds, info_r

    def _run(self, job: dict, scratch: Path | None, zeros: np.ndarray, start: float) -> tuple[SandboxResult, bool]:
        """One jailed process; the result and whether it ran out of time."""
        lim = self.limits
        marker = f"\n@@llmguide-sandbox-result-{secrets.token_hex(8)}@@\n".encode()
        call_id = f"llmguide-sandbox-call-{secrets.token_hex(8)}"     # in argv: names our jail, grants nothing
        settings = {"cpu": lim.cpu_seconds, "memory_mb": lim.memory_mb, "file_mb": lim.file_mb,
                    "open_files": lim.open_files, "max_output_chars": lim.max_output_chars,
                    "guards": lim.python_guards, "call": call_id}
        n = len(zeros)
        stdin = marker.hex().encode() + b"\n" + pickle.dumps({**job, "allowed_imports": list(lim.allowed_imports)},
                                                             protocol=pickle.HIGHEST_PROTOCOL)
        cmd, fds, info_r = self._command(settings, scratch)
        timeout = lim.timeout + lim.timeout_per_item * n
        jail_pid = jail.JailPid(info_r, call_id)
        try:
            proc = subprocess.Popen(cmd, cwd=scratch or "/", env=dict(jail.JAIL_ENV, HOME=str(scratch or "/"),
                                                                       TMPDIR=str(scratch or "/tmp")),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    close_fds=True, pass_fds=fds, start_new_session=True)
        except BaseException:
            jail_pid.close()
            raise
        finally:
            for fd in fds:
                os.close(fd)
        feeder = threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True)
        feeder.start()
        try:
            raw, problem = self._collect(proc, timeout, lim.max_result_mb * 1024 * 1024, jail_pid)
        finally:
            self._kill(proc, jail_pid)
            feeder.join(timeout=5)
        if problem == "timeout":
            return self._fail(zeros, f"timed out after {timeout:.1f} s (wall clock); the sandbox was killed",
                              start), True
        if problem == "flood":
            return self._fail(zeros, f"the program wrote more than {lim.max_result_mb} MB to its output; "
                              "the sandbox was killed", start), False
        return self._result(raw, marker, proc.returncode, zeros, start), False

    def _result(self, raw: bytes, marker: bytes, returncode: int, zeros: np.ndarray, start: float) -> SandboxResult:
        lim = self.limits
        n = len(zeros)
        if returncode != 0 or marker not in raw:
            tail = raw.partition(marker)[0].decode("utf-8", "replace")[-800:].strip()
            reason = _describe_exit(returncode, lim)
            if "MemoryError" in tail:
                reason = f"memory limit exceeded ({lim.memory_mb} MB)"
            return self._fail(zeros, reason + (f"\n{tail}" if tail else ""), start)
        res = read_result(raw, marker, n, lim.max_output_chars)
        if not isinstance(res, ChildResult):
            return self._fail(zeros, res, start)
        if res.status != "ok":
            return self._fail(zeros, res.error or "?", start, stdout=res.stdout)
        values = np.array([0.0 if v is None else v for v in res.values], dtype=np.float64)
        if n and res.item_errors >= n:
            return self._fail(zeros, f"every item raised; first error:\n{res.first_item_error}", start,
                              stdout=res.stdout)
        if res.item_errors:
            log.warning("sandbox: %d of %d items raised; first error:\n%s", res.item_errors, n, res.first_item_error)
        return SandboxResult(values=values.reshape(n), ok=True, item_errors=res.item_errors,
                             first_item_error=res.first_item_error, stdout=res.stdout,
                             duration=time.perf_counter() - start, extras=res.extras, batched=res.batched,
                             batch_error=res.batch_error)

    @staticmethod
    def _collect(proc: subprocess.Popen, timeout: float, cap: int, jail_pid: jail.JailPid) -> tuple[bytes, str | None]:
        """Read the child's output until it exits, the deadline passes ("timeout") or ``cap`` bytes ("flood")."""
        deadline = time.monotonic() + timeout
        chunks: list[bytes] = []
        total = 0
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            if jail_pid.info_r is not None:
                sel.register(jail_pid.info_r, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return b"".join(chunks), "timeout"
                ready = [key.fd for key, _ in sel.select(min(left, 1.0))]
                if jail_pid.info_r is not None and jail_pid.info_r in ready:
                    info_r = jail_pid.info_r
                    if jail_pid.read():
                        sel.unregister(info_r)
                if fd not in ready:
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                total += len(chunk)
                if total > cap:
                    return b"".join(chunks), "flood"
                chunks.append(chunk)
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.05))
        except subprocess.TimeoutExpired:
            return b"".join(chunks), "timeout"
        return b"".join(chunks), None

    @staticmethod
    def _kill(proc: subprocess.Popen, jail_pid: jail.JailPid) -> None:
        """Kill the process group (bwrap, or the python-isolation child and its children) and the
        jail's PID 1, and wait until that is gone: the kernel kills everything else in the PID
        namespace before its PID 1 finishes dying."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        jail_pid.kill_and_wait(2.0)
        if proc.stdout is not None:
            proc.stdout.close()

    def _fail(self, zeros: np.ndarray, error: str, start: float, stdout: str = "", quiet: bool = False) -> SandboxResult:
        self.failures += 1
        lines = [ln for ln in error.splitlines() if ln.strip()] or ["?"]
        summary = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1].strip()}"
        (log.debug if quiet else log.warning)("sandbox: program failed, using 0.0 for %d items: %s", len(zeros),
                                              summary)
        return SandboxResult(values=zeros, ok=False, error=error, stdout=stdout,
                             duration=time.perf_counter() - start)
