"""Ctrl-C and SIGTERM while a run trains: the first asks it to stop at the next step boundary (the Runner then
saves a checkpoint and the metrics, prints how to resume and exits 130); a second stops at once.

:func:`stop_requests` installs the handlers for the span of training (main thread only: elsewhere Python
delivers no signals and the handlers stay as they were); the learner sees the request through
:class:`~llmguide.learners.callbacks.StopCallback`.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Whether (and by which signal) the user asked the run to stop."""

    def __init__(self) -> None:
        self.signal: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def handle(self, signum: int, frame: Any) -> None:
        """The signal handler: the first signal is noted, a second one stops at once (KeyboardInterrupt)."""
        if self.requested:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name
        # os.write, not print: a handler may run inside another write to stderr (the progress bar)
        os.write(2, f"llmguide: {self.signal}: stopping at the next step boundary to save a checkpoint "
                    "(Ctrl-C again stops at once)\n".encode())


@contextmanager
def stop_requests() -> Iterator[StopRequest]:
    """Within: SIGINT and SIGTERM ask the returned :class:`StopRequest` to stop; the previous handlers after."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {sig: signal.signal(sig, request.handle) for sig in SIGNALS}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
