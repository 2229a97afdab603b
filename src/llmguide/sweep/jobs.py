"""One run of a sweep, shared by the local and the Ray launcher: its overrides per attempt, its child
process, the line that reports it, and the stop signal forwarded to every child (:class:`Children`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STOPPED = 130   # the exit status of a run stopped by Ctrl-C / SIGTERM (checkpoint saved): never retried


class Children:
    """The sweep's running ``llmguide train`` processes.  While :meth:`forwarding`, a Ctrl-C or SIGTERM to the
    launcher is sent on to each of them (each in its own session, so a terminal's Ctrl-C reaches it once, through
    here), and no run starts or is retried after it; ``signal`` names it (None: not stopped)."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def run(self, command: list[str], **kwargs: Any) -> int:
        """``command`` in its own session until it exits; its exit status (:data:`STOPPED` without starting it
        once the sweep was stopped)."""
        with self._lock:
            if self.signal is not None:
                return STOPPED
            proc = subprocess.Popen(command, start_new_session=True, **kwargs)
            self._procs.add(proc)
        try:
            return proc.wait()
        finally:
            with self._lock:
                self._procs.discard(proc)

    def _handle(self, signum: int, frame: Any) -> None:
        self.signal = self.signal or signal.Signals(signum).name   # a second one is forwarded too: stop at once
        with self._lock:
            for proc in self._procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signum)

    @contextlib.contextmanager
    def forwarding(self) -> Iterator[Children]:
        """Within: SIGINT and SIGTERM are forwarded to the children (main thread only); the previous handlers after."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


CHILDREN = Children()   # the sweep's children: one sweep per process


def attempt_args(args: list[str], run_path: Path, attempt: int) -> list[str]:
    """The overrides of attempt ``attempt`` (0: the first) of a run: a retry resumes from the run's last
    checkpoint when it wrote one, else starts it over."""
    if attempt == 0:
        return list(args)
    keep = [o for o in args if not o.startswith(("run.resume=", "run.overwrite="))]
    if (run_path / "checkpoints" / "latest.pt").exists():
        return [*keep, "run.resume=true"]
    return [*keep, "run.overwrite=true"]


def run_train(args: list[str], root: Path, name: str, attempt: int = 0, env: dict[str, str] | None = None) -> int:
    """One ``llmguide train`` of a sweep in its own process, output in ``<root>/<name>.log``; its exit code."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}.log", "a" if attempt else "w") as log:
        if attempt:
            log.write(f"\n--- sweep: attempt {attempt + 1} ---\n")
            log.flush()
        return CHILDREN.run([sys.executable, "-m", "llmguide.cli", "train",
                             *attempt_args(args, root / name, attempt), "progress=false"],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})


def retried(code: int, attempt: int, retries: int) -> bool:
    """Whether a run that exited ``code`` gets another attempt: a failure, with retries left, the sweep not stopped
    (a run stopped by a signal is never retried)."""
    return code not in (0, STOPPED) and attempt < retries and CHILDREN.signal is None


def print_outcome(root: Path, name: str, code: int, attempt: int, retries: int, where: str = "") -> None:
    log = root / f"{name}.log"
    if code == 0:
        print(f"  ok     {name}{where}" + (f" (attempt {attempt + 1})" if attempt else ""))
    elif code == STOPPED:
        print(f"  stopped {name}{where} (log {log})")
    elif retried(code, attempt, retries):
        print(f"  retry  {name}{where} (exit {code}; attempt {attempt + 2} of {retries + 1}; log {log})")
    else:
        print(f"  FAILED {name}{where} (exit {code} after {attempt + 1} attempt(s); log {log})")
