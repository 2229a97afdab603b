"""One writer per run directory: an advisory ``flock`` on ``<run>/.lock`` held for the whole run."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from pathlib import Path

from llmguide.core.errors import UsageError, storage_errors


class RunInUseError(UsageError):
    """Another process holds the run directory's lock."""


class RunLock:
    """One writer per run directory: an advisory ``flock`` on ``<run>/.lock``, which names the holder's pid.

    The kernel drops the lock when its holder dies, so a killed run never blocks the next one; the file
    still names the killed pid, and the process that takes the lock over says so (one line)."""

    FILE = ".lock"

    def __init__(self, run_path: str | Path):
        self.path = Path(run_path) / self.FILE
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock, or raise :class:`RunInUseError` naming the pid that holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder(fd, wait=1.0)
            os.close(fd)
            raise RunInUseError(f"{self.path.parent} is in use by another llmguide process (pid {holder or '?'}): "
                                "wait for it to end or stop it, or choose another run.name") from None
        try:
            previous = self._holder(fd)
            if previous is not None and previous != os.getpid():
                gone = "is no longer running" if not _alive(previous) else "no longer holds it"
                print(f"llmguide: {self.path.parent}: taking over the lock left by pid {previous}, which {gone}",
                      file=sys.stderr, flush=True)
            with storage_errors(self.path):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        """Clear the holder's pid (a clean end leaves no stale name) and drop the lock."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = None

    @staticmethod
    def _holder(fd: int, wait: float = 0.0) -> int | None:
        """The pid the lock file names (a new holder writes it just after locking: wait up to ``wait`` s)."""
        deadline = time.monotonic() + wait
        while True:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            if text.isdigit() or time.monotonic() >= deadline:
                return int(text) if text.isdigit() else None
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # it exists, as another user's process
        pass
    return True
