"""Ctrl-C and SIGTERM: while a run trains, the first asks it to stop at the next step boundary (the Runner then
saves a checkpoint and the metrics, prints how to resume and exits 130); a second stops at once.  Outside training
(setup, the final evaluation, the report, any other command) the first one stops at once with :class:`Stopped`, and
the caller saves what it can and says what it saved in one line.

:func:`stop_requests` installs the handlers (main thread only: elsewhere Python delivers no signals and the
handlers stay as they were): the command line holds one for the whole command (``at_boundary=False``), and the
Runner marks its span of training within it (``at_boundary=True``); the learner sees the request through
:class:`~llmguide.learners.callbacks.StopCallback`.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llmguide.core.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(Interrupted):
    """A stop signal outside training, raised at once where the program was; ``signal`` names it."""

    def __init__(self, signal_name: str):
        self.signal = signal_name
        super().__init__(f"{signal_name}: stopped")


class StopRequest:
    """Whether (and by which signal) the user asked the run to stop; ``at_boundary``: a first signal is noted
    (the learner stops at its next step boundary), else it raises :class:`Stopped` at once."""

    def __init__(self, at_boundary: bool = True) -> None:
        self.signal: str | None = None
        self.at_boundary = at_boundary

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def handle(self, signum: int, frame: Any) -> None:
        """The signal handler: the first signal is noted (or, outside training, stops at once), a second one stops
        at once (KeyboardInterrupt)."""
        if self.requested:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name
        if not self.at_boundary:
            raise Stopped(self.signal)
        # os.write, not print: a handler may run inside another write to stderr (the progress bar)
        os.write(2, f"llmguide: {self.signal}: stopping at the next step boundary to save a checkpoint "
                    "(Ctrl-C again stops at once)\n".encode())


_installed: StopRequest | None = None   # the request whose handler is installed now (None: the default handlers)


@contextmanager
def stop_requests(at_boundary: bool = True) -> Iterator[StopRequest]:
    """Within: SIGINT and SIGTERM ask the returned :class:`StopRequest` to stop (``at_boundary``: at the next step
    boundary, else at once).  Within another ``stop_requests`` the outer request is used, in this mode for the
    span; the previous handlers after."""
    global _installed
    if _installed is not None:
        outer, before = _installed, _installed.at_boundary
        outer.at_boundary = at_boundary
        try:
            yield outer
        finally:
            outer.at_boundary = before
        return
    request = StopRequest(at_boundary)
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {sig: signal.signal(sig, request.handle) for sig in SIGNALS}
    _installed = request
    try:
        yield request
    finally:
        _installed = None
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
