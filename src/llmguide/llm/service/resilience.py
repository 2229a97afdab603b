"""Resilience of :class:`~llmguide.llm.service.core.LLMService`'s backend calls: retries, backoff, circuit breaker,
and a rate-limited console warning while the LM fails.

- **Retries**: :data:`RETRYABLE` errors (``LLMUnavailableError``, connection and timeout errors, the
  ``openai`` SDK's connection / timeout / rate-limit / server errors) are retried ``max_retries`` times
  with exponential backoff ``min(backoff_max, backoff_base * 2**attempt)`` times a jitter in [0.5, 1].
  The attempts of one batch are bounded by ``timeout`` seconds from its start; any other exception is
  not retried (a bad request or a backend bug).
- **Circuit breaker**: after a batch exhausted its retries the server is taken as down: batches get the
  fallback at once, except one probe call (no retries) every ~``backoff_max`` seconds; the first probe
  that succeeds closes the circuit.
- **Stop**: the ``stop`` event (set by ``LLMService.close``) cuts backoff waits short and ends the retries.
- **Warnings**: :class:`FailureWarnings` logs ``logging.WARNING`` at the first failure and then at most once
  per ``every`` seconds, with the counts since the last warning, so a failing LM is visible on the
  console without flooding it.
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from llmguide.core.errors import LLMUnavailableError

log = logging.getLogger("llmguide.llm.service.core")

T = TypeVar("T")


def _retryable_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [LLMUnavailableError, ConnectionError, TimeoutError, OSError]
    try:
        import openai

        errors += [openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
                   openai.InternalServerError]
    except ImportError:  # pragma: no cover - openai is an optional dependency
        pass
    return tuple(errors)


RETRYABLE = _retryable_errors()


def reason_name(reason: str) -> str:
    """The counter name (``fallback_<name>``) of a fallback reason the service wrote."""
    for prefix, name in (("service closed", "closed"), ("queue full", "queue_full"), ("timeout", "timeout"),
                         ("unavailable", "unavailable")):
        if reason.startswith(prefix):
            return name
    return "budget" if "budget exhausted" in reason else "error"


def answer_error(kind: str, value: Any, n_candidates: int) -> str | None:
    """Why a backend's answer is a failure (the backend's own, after its retries), or None for a real answer:
    a ``generate`` result with ``error`` set, a ``score`` row that is not ``n_candidates`` numbers, none NaN."""
    if kind == "generate":
        error = getattr(value, "error", None)
        return None if error is None else f"error: {error}"
    try:
        if len(value) == n_candidates and not any(v is None or math.isnan(float(v)) for v in value):
            return None
    except (TypeError, ValueError):
        pass
    return "error: the backend returned no finite scores"


def lower_thread_priority(nice: int) -> None:
    """Add ``nice`` to the OS niceness of the calling thread (Linux: per thread), so that on a busy CPU the
    learner and the envs run first and the LM worker takes what is left."""
    if nice <= 0:
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except (AttributeError, OSError) as err:  # not Linux / not allowed: run at normal priority
        log.info("LLMService: could not lower the worker's priority (%s)", err)


class CallFailed(Exception):
    """A batch got no answer: ``reason`` is the fallback's reason; ``traceback`` whether to log one."""

    def __init__(self, reason: str, traceback: bool = False):
        super().__init__(reason)
        self.reason, self.traceback = reason, traceback


class Resilience:
    """Retries with backoff and a circuit breaker around one callable per batch (one worker thread)."""

    def __init__(self, max_retries: int, backoff_base: float, backoff_max: float, timeout: float,
                 stop: threading.Event):
        self.max_retries, self.backoff_base, self.backoff_max = max_retries, backoff_base, backoff_max
        self.timeout = timeout
        self.stop = stop
        self.circuit_open = False
        self.next_probe = 0.0
        self.counts: Counter[str] = Counter()        # backend_calls, sent, backend_failures, retries
        self.batch_sizes: Counter[int] = Counter()   # batch size -> backend calls
        self._lock = threading.Lock()

    def _count(self, **deltas: int) -> None:
        with self._lock:
            self.counts.update(deltas)

    def snapshot(self) -> tuple[dict[str, int], dict[int, int]]:
        with self._lock:
            return dict(self.counts), dict(self.batch_sizes)

    def delay(self, attempt: int) -> float:
        """Backoff before retry ``attempt + 1``: exponential, capped, jittered in [0.5, 1]."""
        return min(self.backoff_max, self.backoff_base * 2**attempt) * random.uniform(0.5, 1.0)

    def call(self, fn: Callable[[], T], size: int) -> T:
        """``fn()`` (one backend call answering ``size`` requests) with retries; :class:`CallFailed` if none
        succeeded (circuit open and no probe due, retries exhausted, deadline, stop, a non-retryable error)."""
        now = time.monotonic()
        if self.circuit_open and now < self.next_probe:
            raise CallFailed(f"unavailable: server down, next probe in {self.next_probe - now:.2f}s")
        attempts = 1 if self.circuit_open else self.max_retries + 1
        deadline = now + self.timeout
        last_error: BaseException | None = None
        attempt = 0
        for attempt in range(attempts):
            if self.stop.is_set():
                raise CallFailed("service closed")
            self._count(backend_calls=1, sent=size)
            with self._lock:
                self.batch_sizes[size] += 1
            try:
                result = fn()
            except RETRYABLE as err:
                last_error = err
                self._count(backend_failures=1)
                delay = self.delay(attempt)
                if attempt + 1 >= attempts or time.monotonic() + delay > deadline or self.stop.is_set():
                    break
                self._count(retries=1)
                log.info("LLMService: %s; retry %d/%d in %.2fs", err, attempt + 1, attempts - 1, delay)
                self.stop.wait(delay)
                continue
            except Exception as err:  # a bad request or a backend bug: not retried
                self._count(backend_failures=1)
                if self.stop.is_set():   # the backend was shut down under the call: no traceback
                    raise CallFailed("service closed") from err
                raise CallFailed(f"error: {err!r}", traceback=True) from err
            self.circuit_open = False
            return result
        if self.stop.is_set():
            raise CallFailed("service closed")
        self.circuit_open = True
        self.next_probe = time.monotonic() + self.backoff_max * random.uniform(0.5, 1.0)
        raise CallFailed(f"unavailable after {attempt + 1} attempt(s): {last_error!r}")


class FailureWarnings:
    """``logging.WARNING`` about failed LM requests: at the first, then at most once per ``every`` seconds."""

    def __init__(self, every: float = 60.0, logger: logging.Logger | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.every = every
        self.log = logger or log
        self.clock = clock
        self._lock = threading.Lock()
        self._since: Counter[str] = Counter()   # reason name -> failed requests since the last warning
        self._last_reason = ""
        self._next = float("-inf")
        self.warnings = 0

    def failed(self, n: int, name: str, reason: str, context: Callable[[], str] | None = None) -> None:
        """``n`` requests failed (``name``: the reason's counter name); warn now if the last warning is old."""
        with self._lock:
            self._since[name] += n
            self._last_reason = reason
            now = self.clock()
            if now < self._next:
                return
            since, self._since = dict(self._since), Counter()
            self._next = now + self.every
            self.warnings += 1
            last = self._last_reason
        counts = ", ".join(f"{k} {v}" for k, v in sorted(since.items()))
        extra = f"; {context()}" if context is not None else ""
        self.log.warning("LM requests are failing: %d fell back (%s), last: %s%s; next warning in %.0fs at the "
                         "earliest", sum(since.values()), counts, _short(last), extra, self.every)


class LagWarnings:
    """``logging.WARNING`` when the LM answers less than ``threshold`` of the requests asked since the last check
    (at least ``min_requests`` of them): a server that died or slowed down mid-run, whether or not any request has
    fallen back yet.  At most once per ``every`` seconds."""

    def __init__(self, threshold: float = 0.5, min_requests: int = 20, every: float = 60.0,
                 logger: logging.Logger | None = None, clock: Callable[[], float] = time.monotonic):
        self.threshold, self.min_requests, self.every = threshold, min_requests, every
        self.log = logger or log
        self.clock = clock
        self._lock = threading.Lock()
        self._last = (0, 0)                     # (asked, answered) at the last window's end
        self._next = float("-inf")
        self.warnings = 0

    def check(self, asked: int, answered: int) -> bool:
        """Cumulative ``asked`` / ``answered`` request counts now; warns (and returns True) when the window since
        the last check is large enough and answered too little."""
        with self._lock:
            d_asked, d_answered = asked - self._last[0], answered - self._last[1]
            if d_asked < self.min_requests:
                return False                    # too few requests yet: the window grows
            self._last = (asked, answered)
            if d_answered >= self.threshold * d_asked or self.clock() < self._next:
                return False
            self._next = self.clock() + self.every
            self.warnings += 1
        self.log.warning("the LM is falling behind: it answered %d of the last %d requests (%.0f %%, below %.0f %%); "
                         "the rest wait or fall back to no answer. A server that died or slowed down, or a model too "
                         "slow for online use (build an answer table: llmguide answers)", max(d_answered, 0), d_asked,
                         100 * max(d_answered, 0) / d_asked, 100 * self.threshold)
        return True


def _short(text: Any, limit: int = 200) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."
