"""Asynchronous LM service for training loops: submit now, read the answer when it is ready.

One worker thread drains a bounded queue, batches compatible requests (same kind and sampling
parameters, up to ``max_batch``) into one backend call, and resolves a
:class:`concurrent.futures.Future` per request.  The learner never blocks and never sees an
exception from the LM:

- **Queue** (:mod:`llmguide.llm.service.queue`): a request identical to one in flight gets the *same*
  future; a request may name an ``owner`` (e.g. ``("ellm", env_index)``) and a ``priority`` -- a queued
  request no owner wants any more (:meth:`LLMService.release`, or a newer request of the same owner) is
  dropped, its future **cancelled** (not a fallback; ``dropped_stale``), and the worker answers the
  highest priority first (:meth:`LLMService.reprioritize`).  When ``max_queue`` requests wait,
  ``submit_*`` waits up to ``submit_timeout`` seconds (default 0) for room, then falls back (``queue_full``).
- **Resilience** (:mod:`llmguide.llm.service.resilience`): retries with exponential backoff and jitter, a
  ``timeout`` per batch (requests that waited longer than ``timeout`` in the queue fall back too), a
  circuit breaker with one probe every ~``backoff_max`` seconds while the server is down, and a
  rate-limited ``logging.WARNING`` while requests fail (the first at once, then at most one per
  ``warn_every`` seconds; closing is not a failure).
- **Fallback**: ``Completion(text="", error=reason)`` for ``generate`` and ``[None] * n`` for ``score`` (or
  what ``fallback(kind, request, reason)`` returns), counted by reason, never cached; the request leaves
  the in-flight table, so submitting it again later makes a fresh call.  A backend answer that carries
  an error (a ``Completion`` with ``error``, a score row with a missing or NaN value) is a fallback too.
- **Budget**: once ``token_budget`` tokens or ``dollar_budget`` dollars (``tokens / 1000 *
  price_per_1k_tokens``) are spent, requests fall back (``budget``).
- **Worker priority**: ``worker_nice > 0`` adds that much to the OS niceness (Linux, per thread) of the
  worker thread and of the threads an in-process backend (llama.cpp) starts from it.
- **Freshness**: callers report per step how many envs had an answer for their current state
  (:meth:`LLMService.record_fresh`); ``lm/fresh_fraction`` is their ratio.
- **Shutdown** (issue #32): :meth:`LLMService.close` refuses new requests (they resolve at once with the
  fallback ``"service closed"``, no backend call), resolves the queued ones with it, asks the backend to
  cut the retries of the call in progress (:meth:`LanguageModel.interrupt`) and joins the worker: once it
  returns the service never touches the backend again, so the caller may close the backend.  Closing
  twice is harmless.

Reading results without blocking: ``fut.done()`` then ``fut.result()``, or :func:`poll`.  The ``lm/*``
metrics (:meth:`LLMService.lm_metrics`, among them ``lm/answered_fraction``) and the budget are
:mod:`llmguide.llm.service.metrics`; :meth:`LLMService.metrics` is a deprecated unprefixed alias.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any

import numpy as np

from llmguide.llm.base import Completion, LanguageModel, canonical_json
from llmguide.llm.service.metrics import Budget, ServiceState, lm_metrics
from llmguide.llm.service.queue import Request, RequestQueue
from llmguide.llm.service.resilience import (
    CallFailed,
    FailureWarnings,
    LagWarnings,
    Resilience,
    answer_error,
    lower_thread_priority,
    reason_name,
)

log = logging.getLogger(__name__)

FallbackFn = Callable[[str, dict[str, Any], str], Any]


def poll(futures: Sequence[Future]) -> list[Any | None]:
    """Results of the futures that are done, ``None`` for those still pending or dropped (never blocks)."""
    return [f.result() if f.done() and not f.cancelled() else None for f in futures]


def gather(futures: Sequence[Future], combine: Callable[[list[Any]], Any]) -> Future:
    """One future for several: once all are done it holds ``combine(their results)``, or the first exception.
    Never blocks; safe when the futures finish on different threads at once."""
    joined: Future = Future()
    once = threading.Lock()

    def done(_: Future) -> None:
        with once:
            if joined.done() or not all(f.done() for f in futures):
                return
            try:
                joined.set_result(combine([f.result() for f in futures]))
            except Exception as err:   # a failed future, or combine's own error, reaches the caller
                joined.set_exception(err)

    for f in futures:
        f.add_done_callback(done)
    return joined


class LLMService:
    """Non-blocking, de-duplicating, batching front of a :class:`LanguageModel` (one worker thread)."""

    def __init__(self, lm: LanguageModel, max_batch: int = 8, max_queue: int = 1024, max_retries: int = 5,
                 backoff_base: float = 0.5, backoff_max: float = 30.0, timeout: float = 60.0,
                 token_budget: int | None = None, dollar_budget: float | None = None,
                 price_per_1k_tokens: float = 0.0, fallback: FallbackFn | None = None,
                 submit_timeout: float = 0.0, latency_window: int = 10_000, worker_nice: int = 0,
                 warn_every: float = 60.0):
        if max_batch < 1 or max_queue < 1:
            raise ValueError("max_batch and max_queue must be >= 1")
        self.lm = lm
        self.max_batch, self.max_queue = max_batch, max_queue
        self.max_retries, self.backoff_base, self.backoff_max = max_retries, backoff_base, backoff_max
        self.timeout = timeout
        self.token_budget, self.dollar_budget = token_budget, dollar_budget
        self.price_per_1k_tokens = price_per_1k_tokens
        self.fallback = fallback
        self.submit_timeout = submit_timeout
        self.worker_nice = int(worker_nice)

        self._lock = threading.Lock()                    # counts, latencies, fresh
        self._queue = RequestQueue(max_queue)
        self._stop = threading.Event()
        self._resilience = Resilience(max_retries, backoff_base, backoff_max, timeout, self._stop)
        self._budget = Budget(token_budget, dollar_budget, price_per_1k_tokens)
        self._warnings = FailureWarnings(warn_every)
        self._lag = LagWarnings(every=warn_every)
        self._fresh = [0, 0]                             # steps with an answer for the current state, steps
        self._latencies: deque[float] = deque(maxlen=latency_window)
        self._counts: Counter[str] = Counter()
        self._thread = threading.Thread(target=self._worker, name="llm-service", daemon=True)
        self._thread.start()

    # -- submitting -------------------------------------------------------------------------------
    def submit_generate(self, prompt: str, *, owner: Any = None, priority: float = 0.0, **params: Any) -> Future:
        """Future of a :class:`Completion` for ``prompt`` (params: max_tokens, temperature, stop, seed).

        ``owner`` / ``priority``: see the module docstring (stale requests and priority)."""
        if "stop" in params and params["stop"] is not None:
            params["stop"] = list(params["stop"])
        group = canonical_json({"kind": "generate", "params": params})
        key = canonical_json({"kind": "generate", "prompt": prompt, "params": params})
        return self._submit(Request("generate", key, group, {"prompt": prompt, "params": params},
                                    priority=float(priority)), owner)

    def submit_score(self, context: str, candidates: Sequence[str], normalize: bool = False, *,
                     owner: Any = None, priority: float = 0.0) -> Future:
        """Future of the log-probabilities of ``candidates`` given ``context`` (``None`` entries on fallback)."""
        candidates = [str(c) for c in candidates]
        group = canonical_json({"kind": "score", "normalize": bool(normalize)})
        key = canonical_json({"kind": "score", "context": context, "candidates": candidates,
                              "normalize": bool(normalize)})
        payload = {"context": context, "candidates": candidates, "normalize": bool(normalize)}
        return self._submit(Request("score", key, group, payload, priority=float(priority)), owner)

    def _submit(self, req: Request, owner: Any = None) -> Future:
        with self._lock:
            self._counts["submitted"] += 1
        future, reason = self._queue.put(req, owner, time.monotonic() + self.submit_timeout, self._budget.exhausted)
        if future is not None:
            return future
        self._resolve_fallback([req], reason or "error")
        return req.future

    # -- stale requests, priority, freshness ------------------------------------------------------
    def release(self, owner: Any) -> None:
        """``owner`` no longer needs its queued request (e.g. its env left that state); drop it if unowned."""
        self._queue.release(owner)

    def reprioritize(self, future: Future, priority: float) -> bool:
        """Set the priority of the queued request behind ``future``; False when it is not queued any more."""
        return self._queue.reprioritize(future, priority)

    def record_fresh(self, fresh: int, total: int) -> None:
        """Add ``fresh`` of ``total`` steps that acted on an answer for their current state (``lm/fresh_fraction``)."""
        with self._lock:
            self._fresh[0] += int(fresh)
            self._fresh[1] += int(total)

    # -- resolving --------------------------------------------------------------------------------
    @property
    def dollars(self) -> float:
        return self._budget.dollars

    def _fallback_value(self, req: Request, reason: str) -> Any:
        if self.fallback is not None:
            try:
                return self.fallback(req.kind, dict(req.payload), reason)
            except Exception:  # a broken user fallback must not break training either
                log.exception("LLMService: user fallback raised; using the default fallback")
        if req.kind == "generate":
            return Completion(text="", error=reason)
        return [None] * len(req.payload["candidates"])

    def _answered(self) -> str:
        with self._lock:
            done, asked = self._counts["completed"], self._counts["submitted"]
        asked -= self._queue.counts["deduplicated"]
        return f"the LM answered {done} of {asked} distinct requests so far"

    def _resolve_fallback(self, reqs: Sequence[Request], reason: str) -> None:
        if not reqs:
            return
        name = reason_name(reason)
        self._queue.finish(list(reqs))
        with self._lock:
            self._counts["fallbacks"] += len(reqs)
            self._counts[f"fallback_{name}"] += len(reqs)
        log.debug("LLMService fallback for %d %s request(s): %s", len(reqs), reqs[0].kind, reason)
        if name != "closed":   # shutting down is not a failure of the LM
            self._warnings.failed(len(reqs), name, reason, self._answered)
        for req in reqs:
            self._set(req, self._fallback_value(req, reason))

    def _set(self, req: Request, value: Any) -> None:
        with self._lock:
            self._latencies.append(time.monotonic() - req.submitted)
        try:
            req.future.set_result(value)
        except InvalidStateError:   # already resolved or cancelled
            pass

    def _account(self, batch: list[Request], results: list[Any]) -> None:
        """Resolve a backend call's results: answers, or fallbacks for answers that carry an error."""
        answered, failed = [], []
        for req, value in zip(batch, results, strict=True):
            if isinstance(value, Completion):
                with self._lock:
                    self._counts["cache_hits"] += int(value.cached)
                self._budget.spend(0 if value.cached else value.prompt_tokens + value.completion_tokens)
            error = answer_error(req.kind, value, len(req.payload.get("candidates", ())))
            (failed if error else answered).append((req, error or value))
        self._queue.finish([req for req, _ in answered])
        with self._lock:
            self._counts["completed"] += len(answered)
        for req, value in answered:
            self._set(req, value)
        for req, reason in failed:
            self._resolve_fallback([req], reason)

    # -- worker -----------------------------------------------------------------------------------
    def _worker(self) -> None:
        lower_thread_priority(self.worker_nice)   # threads an in-process backend starts inherit it
        while True:
            batch = self._queue.next_batch(self.max_batch)
            if not batch:
                if self._queue.closed:
                    return
                continue
            try:
                self._run_batch(batch)
            except Exception as err:  # never let the worker die: everything else becomes a fallback
                log.exception("LLMService: unexpected error in a batch")
                self._resolve_fallback([r for r in batch if not r.future.done()], f"error: {err!r}")

    def _call(self, batch: list[Request]) -> list[Any]:
        first = batch[0]
        if first.kind == "generate":
            out = self.lm.generate([r.payload["prompt"] for r in batch], **first.payload["params"])
        else:
            out = self.lm.score([r.payload["context"] for r in batch], [r.payload["candidates"] for r in batch],
                                normalize=first.payload["normalize"])
        if len(out) != len(batch):
            raise ValueError(f"backend returned {len(out)} results for {len(batch)} requests")
        return list(out)

    def _run_batch(self, batch: list[Request]) -> None:
        now = time.monotonic()
        stale = [r for r in batch if now - r.submitted > self.timeout]
        self._resolve_fallback(stale, f"timeout: waited more than {self.timeout}s in the queue")
        batch = [r for r in batch if r not in stale]
        if not batch:
            return
        if (reason := self._budget.exhausted()) is not None:
            self._resolve_fallback(batch, reason)
            return
        try:
            results = self._resilience.call(lambda: self._call(batch), len(batch))
        except CallFailed as err:
            if err.traceback:
                log.error("LLMService: backend call failed (not retried)", exc_info=err.__cause__)
            self._resolve_fallback(batch, err.reason)
            return
        self._account(batch, results)

    # -- metrics and lifecycle ----------------------------------------------------------------------
    def _state(self) -> ServiceState:
        calls, sizes = self._resilience.snapshot()
        with self._queue.cond:
            queued = dict(self._queue.counts)
            depth, inflight = self._queue.depth, self._queue.inflight
        with self._lock:
            counts = {**self._counts, **queued, **calls}
            lat = np.array(self._latencies, dtype=np.float64)
            fresh = (self._fresh[0], self._fresh[1])
        return ServiceState(counts, lat, depth, inflight, sizes, self._resilience.circuit_open, self._budget.tokens,
                            fresh)

    def lm_metrics(self, parse_errors: float | None = None) -> dict[str, float]:
        """The canonical ``lm/*`` metrics (see :mod:`llmguide.llm.service.metrics`); all values floats.  Each call
        also checks that the LM keeps up (:class:`LagWarnings`: one rate-limited line when it answers too little)."""
        state = self._state()
        counts = state.counts
        self._lag.check(counts.get("submitted", 0) - counts.get("deduplicated", 0), counts.get("completed", 0))
        try:
            io = dict(self.lm.io_stats())
        except Exception:  # a backend's counters must never break logging
            log.exception("LLMService: io_stats() of the backend failed")
            io = {}
        return lm_metrics(state, io, parse_errors)

    @property
    def closed(self) -> bool:
        return self._queue.closed

    def close(self, timeout: float | None = None) -> bool:
        """Stop the service; True once its worker has exited (then the backend is never used again).

        New and queued requests get the fallback ``"service closed"``; the backend is asked to cut the
        retries of the call in progress (:meth:`LanguageModel.interrupt`), which then finishes or fails;
        the worker is joined (``timeout`` seconds at most; None: until it exits).  Does not close the LM:
        the caller closes it after this returns.  Closing again is a no-op."""
        pending = self._queue.close()
        self._stop.set()
        self._resolve_fallback(pending, "service closed")
        if threading.current_thread() is self._thread:   # closed from a callback on the worker
            return False
        if self._thread.is_alive():
            try:
                getattr(self.lm, "interrupt", lambda: None)()
            except Exception:  # interrupting is a courtesy: joining is what makes closing safe
                log.exception("LLMService: interrupting the backend failed")
            self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("LLMService.close: the worker is still in a backend call after %ss; closing the backend "
                        "now is unsafe", timeout)
            return False
        return True

    def __enter__(self) -> LLMService:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
