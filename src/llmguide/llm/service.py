"""Asynchronous LM service for training loops: submit now, read the answer when it is ready.

One worker thread drains a bounded queue, batches compatible requests (same kind and sampling
parameters, up to ``max_batch``) into one backend call, and resolves a
:class:`concurrent.futures.Future` per request.  The learner never blocks and never sees an
exception from the LM:

- **De-duplication**: a request identical to one still in flight (same kind, text and parameters --
  the material of the cache key) gets the *same* future; no second backend call.
- **Backpressure**: when ``max_queue`` requests are waiting, ``submit_*`` waits up to
  ``submit_timeout`` seconds (default 0: not at all) for room, then returns a future already resolved
  with the fallback (counted as ``fallback_queue_full``).  It never blocks longer.
- **Retries**: ``LLMUnavailableError`` and connection/timeout errors are retried ``max_retries`` times
  with exponential backoff ``min(backoff_max, backoff_base * 2**attempt)`` times a jitter in [0.5, 1].
  The whole attempt for a batch is bounded by ``timeout`` seconds, and requests that waited longer
  than ``timeout`` in the queue get the fallback.
- **Circuit breaker**: after a batch exhausted its retries the server is taken as down: batches
  resolve at once with the fallback, except one probe call (no retries) every ~``backoff_max``
  seconds; the first probe that succeeds closes the circuit and normal service resumes.
- **Fallback**: ``Completion(text="", error=reason)`` for ``generate`` and ``[None] * n`` for
  ``score`` (or what ``fallback(kind, request, reason)`` returns).  Fallbacks are counted by reason,
  logged, never cached, and the request leaves the in-flight table, so submitting it again later
  (e.g. when the server is back) makes a fresh call.
- **Budget**: once ``token_budget`` tokens or ``dollar_budget`` dollars
  (``tokens / 1000 * price_per_1k_tokens``) are spent, requests resolve with the fallback (counted).

- **Failed answers**: a ``Completion`` with ``error`` set and a score row with a missing or NaN value
  (the HTTP backend's per-request failure after its own retries) resolve as the fallback too.

- **Stale requests and priority** (optional, for training loops; issue #19): a request may name an
  ``owner`` (e.g. ``("ellm", env_index)``) and a ``priority``.  A newer submission by the same owner, or
  :meth:`LLMService.release` of it, takes the owner off its older *queued* requests; a queued request
  left with no owner is dropped -- its future is **cancelled** (``fut.cancelled()``; not a fallback),
  counted ``dropped_stale``.  So a slow LM keeps at most the newest request per env waiting.  Requests
  without an owner are never dropped.  The worker takes the highest-priority queued request first (ties:
  first come) and fills the batch with the highest-priority compatible ones; joining an identical request
  raises its priority to the larger one, and :meth:`LLMService.reprioritize` changes it while queued (the
  ELLM suggester passes each state's visit count: the most-visited states are answered first).
- **Worker priority**: ``worker_nice > 0`` adds that much to the OS niceness (Linux, per thread) of the worker
  thread and of the threads an in-process backend (llama.cpp) starts from it, so that on a busy CPU the
  learner and the envs run first and the LM takes what is left.
- **Freshness**: a caller that acts on LM answers reports, per step, how many of its envs had an answer
  for their current state (:meth:`LLMService.record_fresh`); ``lm/fresh_fraction`` is their ratio.

Reading results without blocking: ``fut.done()`` then ``fut.result()``, or :func:`poll` (a cancelled
future polls as ``None``).

The ``lm/*`` metrics every method logs (:meth:`LLMService.lm_metrics`) are defined and computed in
:mod:`llmguide.llm.service_metrics`; :meth:`LLMService.metrics` keeps the older, unprefixed service
counters for existing callers.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmguide.core.errors import LLMUnavailableError
from llmguide.llm.base import Completion, LanguageModel
from llmguide.llm.cache import canonical_json
from llmguide.llm.cached_lm import CachedLM
from llmguide.llm.service_metrics import ServiceState, lm_metrics, service_metrics

log = logging.getLogger(__name__)

FallbackFn = Callable[[str, dict[str, Any], str], Any]


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


@dataclass(eq=False)
class _Request:
    kind: str                      # "generate" | "score"
    key: str                       # de-duplication key (canonical JSON of kind + text + params)
    group: str                     # requests with the same group can share one backend call
    payload: dict[str, Any]
    future: Future = field(default_factory=Future)
    submitted: float = field(default_factory=time.monotonic)
    owners: set = field(default_factory=set)   # who still wants the answer (empty: nobody said, never dropped)
    owned: bool = False                         # submitted with an owner: droppable once no owner is left
    priority: float = 0.0
    seq: int = 0                                # arrival order (ties in priority: first come first served)


def poll(futures: Sequence[Future]) -> list[Any | None]:
    """Results of the futures that are done, ``None`` for those still pending or dropped (never blocks)."""
    return [f.result() if f.done() and not f.cancelled() else None for f in futures]


class LLMService:
    """Non-blocking, de-duplicating, batching front of a :class:`LanguageModel` (one worker thread)."""

    def __init__(self, lm: LanguageModel, max_batch: int = 8, max_queue: int = 1024, max_retries: int = 5,
                 backoff_base: float = 0.5, backoff_max: float = 30.0, timeout: float = 60.0,
                 token_budget: int | None = None, dollar_budget: float | None = None,
                 price_per_1k_tokens: float = 0.0, fallback: FallbackFn | None = None,
                 submit_timeout: float = 0.0, latency_window: int = 10_000, worker_nice: int = 0):
        if max_batch < 1 or max_queue < 1:
            raise ValueError("max_batch and max_queue must be >= 1")
        self.lm = lm
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.timeout = timeout
        self.token_budget = token_budget
        self.dollar_budget = dollar_budget
        self.price_per_1k_tokens = price_per_1k_tokens
        self.fallback = fallback
        self.submit_timeout = submit_timeout
        self.worker_nice = int(worker_nice)

        self._cond = threading.Condition()
        self._queue: deque[_Request] = deque()
        self._inflight: dict[str, _Request] = {}
        self._by_future: dict[Future, _Request] = {}   # queued requests by their future (reprioritize)
        self._owned: dict[Any, _Request] = {}           # owner -> its newest queued request
        self._seq = 0
        self._fresh = [0, 0]                             # steps with an answer for the current state, steps
        self._closed = False
        self._stop = threading.Event()
        self._circuit_open = False
        self._next_probe = 0.0
        self._latencies: deque[float] = deque(maxlen=latency_window)
        self._counts: Counter[str] = Counter()
        self._tokens = 0
        self._batch_sizes: Counter[int] = Counter()
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
        return self._submit(_Request("generate", key, group, {"prompt": prompt, "params": params},
                                     priority=float(priority)), owner)

    def submit_score(self, context: str, candidates: Sequence[str], normalize: bool = False, *,
                     owner: Any = None, priority: float = 0.0) -> Future:
        """Future of the log-probabilities of ``candidates`` given ``context`` (``None`` entries on fallback)."""
        candidates = [str(c) for c in candidates]
        group = canonical_json({"kind": "score", "normalize": bool(normalize)})
        key = canonical_json({"kind": "score", "context": context, "candidates": candidates,
                              "normalize": bool(normalize)})
        return self._submit(_Request("score", key, group, {"context": context, "candidates": candidates,
                                                            "normalize": bool(normalize)}, priority=float(priority)),
                            owner)

    # -- stale requests, priority, freshness ------------------------------------------------------
    def _take_owner(self, owner: Any, keep: _Request | None = None) -> list[_Request]:
        """Take ``owner`` off its queued request (unless it is ``keep``); return requests left ownerless."""
        old = self._owned.pop(owner, None)
        if old is None or old is keep:
            return []
        old.owners.discard(owner)
        if old.owners or old.future.done() or self._by_future.get(old.future) is not old:
            return []
        return [old]

    def _drop(self, reqs: list[_Request]) -> None:
        """Remove queued, ownerless requests; cancel their futures (called with the lock held)."""
        for req in reqs:
            try:
                self._queue.remove(req)
            except ValueError:   # already taken by the worker: it will be answered
                continue
            self._by_future.pop(req.future, None)
            if self._inflight.get(req.key) is req:
                del self._inflight[req.key]
            self._counts["dropped_stale"] += 1
            req.future.cancel()
        if reqs:
            self._cond.notify_all()

    def release(self, owner: Any) -> None:
        """``owner`` no longer needs its queued request (e.g. its env left that state); drop it if unowned."""
        with self._cond:
            self._drop(self._take_owner(owner))

    def reprioritize(self, future: Future, priority: float) -> bool:
        """Set the priority of the queued request behind ``future``; False when it is not queued any more."""
        with self._cond:
            req = self._by_future.get(future)
            if req is None:
                return False
            req.priority = float(priority)
            return True

    def record_fresh(self, fresh: int, total: int) -> None:
        """Add ``fresh`` of ``total`` steps that acted on an answer for their current state (``lm/fresh_fraction``)."""
        with self._cond:
            self._fresh[0] += int(fresh)
            self._fresh[1] += int(total)

    def _submit(self, req: _Request, owner: Any = None) -> Future:
        deadline = time.monotonic() + self.submit_timeout
        with self._cond:
            self._counts["submitted"] += 1
            while True:
                if self._closed:
                    reason = "service closed"
                    break
                if (reason := self._budget_exhausted()) is not None:
                    break
                same = self._inflight.get(req.key)
                if same is not None:
                    self._counts["deduplicated"] += 1
                    same.priority = max(same.priority, req.priority)
                    if owner is not None and self._by_future.get(same.future) is same:
                        self._drop(self._take_owner(owner, keep=same))
                        same.owners.add(owner)
                        same.owned = True
                        self._owned[owner] = same
                    return same.future
                if owner is not None:   # the owner's older queued request is stale now
                    self._drop(self._take_owner(owner))
                if len(self._queue) < self.max_queue:
                    self._seq += 1
                    req.seq = self._seq
                    if owner is not None:
                        req.owners.add(owner)
                        req.owned = True
                        self._owned[owner] = req
                    self._inflight[req.key] = req
                    self._by_future[req.future] = req
                    self._queue.append(req)
                    self._cond.notify_all()
                    return req.future
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    reason = f"queue full ({self.max_queue} waiting)"
                    break
                self._cond.wait(remaining)
        self._resolve_fallback([req], reason)
        return req.future

    # -- accounting -------------------------------------------------------------------------------
    @property
    def dollars(self) -> float:
        return self._tokens / 1000.0 * self.price_per_1k_tokens

    def _budget_exhausted(self) -> str | None:
        if self.token_budget is not None and self._tokens >= self.token_budget:
            return f"token budget exhausted ({self._tokens} >= {self.token_budget})"
        if self.dollar_budget is not None and self.price_per_1k_tokens > 0 and self.dollars >= self.dollar_budget:
            return f"dollar budget exhausted (${self.dollars:.4f} >= ${self.dollar_budget})"
        return None

    def _fallback_value(self, req: _Request, reason: str) -> Any:
        if self.fallback is not None:
            try:
                return self.fallback(req.kind, dict(req.payload), reason)
            except Exception:  # a broken user fallback must not break training either
                log.exception("LLMService: user fallback raised; using the default fallback")
        if req.kind == "generate":
            return Completion(text="", error=reason)
        return [None] * len(req.payload["candidates"])

    @staticmethod
    def _reason_name(reason: str) -> str:
        for name in ("budget", "queue full", "closed", "timeout", "unavailable"):
            if name in reason:
                return name.replace(" ", "_")
        return "error"

    def _resolve_fallback(self, reqs: Sequence[_Request], reason: str) -> None:
        name = self._reason_name(reason)
        with self._cond:
            self._counts["fallbacks"] += len(reqs)
            self._counts[f"fallback_{name}"] += len(reqs)
            n = self._counts["fallbacks"]
            for req in reqs:
                if self._inflight.get(req.key) is req:
                    del self._inflight[req.key]
        level = logging.WARNING if n <= 20 or n % 1000 == 0 else logging.DEBUG
        log.log(level, "LLMService fallback for %d %s request(s) (%s); %d fallbacks so far",
                len(reqs), reqs[0].kind if reqs else "?", reason, n)
        now = time.monotonic()
        for req in reqs:
            if not req.future.done():
                self._latencies.append(now - req.submitted)
                req.future.set_result(self._fallback_value(req, reason))

    def _resolve(self, req: _Request, value: Any) -> None:
        with self._cond:
            self._counts["completed"] += 1
            if self._inflight.get(req.key) is req:
                del self._inflight[req.key]
        self._latencies.append(time.monotonic() - req.submitted)
        if not req.future.done():
            req.future.set_result(value)

    # -- worker -----------------------------------------------------------------------------------
    def _next_batch(self) -> list[_Request]:
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait(0.5)
            if not self._queue:
                return []
            # highest priority first, then first come; the batch: the best of the same group
            order = sorted(self._queue, key=lambda r: (-r.priority, r.seq))
            first = order[0]
            batch = [first] + [r for r in order[1:] if r.group == first.group][: self.max_batch - 1]
            taken = {id(r) for r in batch}
            self._queue = deque(r for r in self._queue if id(r) not in taken)
            for req in batch:
                self._by_future.pop(req.future, None)
                for owner in req.owners:
                    if self._owned.get(owner) is req:
                        del self._owned[owner]
            self._cond.notify_all()  # room in the queue for blocked submitters
            return batch

    def _worker(self) -> None:
        if self.worker_nice > 0:   # the LM yields the CPU to the learner (threads the backend starts inherit it)
            import os

            try:
                tid = threading.get_native_id()
                os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + self.worker_nice))
            except (AttributeError, OSError) as err:  # not Linux / not allowed: run at normal priority
                log.info("LLMService: could not lower the worker's priority (%s)", err)
        while True:
            batch = self._next_batch()
            if not batch:
                if self._closed:
                    return
                continue
            try:
                self._run_batch(batch)
            except Exception as err:  # never let the worker die: everything else becomes a fallback
                log.exception("LLMService: unexpected error in a batch")
                self._resolve_fallback([r for r in batch if not r.future.done()], f"error: {err!r}")

    def _call(self, batch: list[_Request]) -> list[Any]:
        first = batch[0]
        if first.kind == "generate":
            out = self.lm.generate([r.payload["prompt"] for r in batch], **first.payload["params"])
        else:
            out = self.lm.score([r.payload["context"] for r in batch], [r.payload["candidates"] for r in batch],
                                normalize=first.payload["normalize"])
        if len(out) != len(batch):
            raise ValueError(f"backend returned {len(out)} results for {len(batch)} requests")
        return list(out)

    @staticmethod
    def _failed_scores(value: Any, n: int) -> bool:
        try:
            return len(value) != n or any(v is None or math.isnan(float(v)) for v in value)
        except (TypeError, ValueError):
            return True

    def _run_batch(self, batch: list[_Request]) -> None:
        now = time.monotonic()
        stale = [r for r in batch if now - r.submitted > self.timeout]
        if stale:
            self._resolve_fallback(stale, f"timeout: waited more than {self.timeout}s in the queue")
            batch = [r for r in batch if r not in stale]
        if not batch:
            return
        if (reason := self._budget_exhausted()) is not None:
            self._resolve_fallback(batch, reason)
            return
        if self._circuit_open and time.monotonic() < self._next_probe:
            self._resolve_fallback(batch, "unavailable: server down, next probe in "
                                          f"{self._next_probe - time.monotonic():.2f}s")
            return
        attempts = 1 if self._circuit_open else self.max_retries + 1
        deadline = now + self.timeout
        last_error: BaseException | None = None
        for attempt in range(attempts):
            if self._stop.is_set():
                self._resolve_fallback(batch, "service closed")
                return
            try:
                with self._cond:
                    self._counts["backend_calls"] += 1
                    self._counts["sent"] += len(batch)
                    self._batch_sizes[len(batch)] += 1
                results = self._call(batch)
            except RETRYABLE as err:
                last_error = err
                with self._cond:
                    self._counts["backend_failures"] += 1
                delay = min(self.backoff_max, self.backoff_base * 2**attempt) * random.uniform(0.5, 1.0)
                if attempt + 1 >= attempts or time.monotonic() + delay > deadline:
                    break
                with self._cond:
                    self._counts["retries"] += 1
                log.info("LLMService: %s; retry %d/%d in %.2fs", err, attempt + 1, attempts - 1, delay)
                self._stop.wait(delay)
                continue
            except Exception as err:  # a bad request or a backend bug: not retried
                with self._cond:
                    self._counts["backend_failures"] += 1
                log.exception("LLMService: backend call failed (not retried)")
                self._resolve_fallback(batch, f"error: {err!r}")
                return
            self._circuit_open = False
            self._account(batch, results)
            return
        self._circuit_open = True
        self._next_probe = time.monotonic() + self.backoff_max * random.uniform(0.5, 1.0)
        self._resolve_fallback(batch, f"unavailable after {attempt + 1} attempt(s): {last_error!r}")

    def _account(self, batch: list[_Request], results: list[Any]) -> None:
        failed = [(req, value) for req, value in zip(batch, results, strict=True)
                  if req.kind == "score" and self._failed_scores(value, len(req.payload["candidates"]))]
        if failed:  # a context the backend could not score (after its own retries): counted fallback
            self._resolve_fallback([req for req, _ in failed], "error: the backend returned no finite scores")
            done = {id(req) for req, _ in failed}
            pairs = [(r, v) for r, v in zip(batch, results, strict=True) if id(r) not in done]
            batch, results = [r for r, _ in pairs], [v for _, v in pairs]
        for req, value in zip(batch, results, strict=True):
            if req.kind == "generate" and isinstance(value, Completion):
                if value.cached:
                    with self._cond:
                        self._counts["cache_hits"] += 1
                else:
                    with self._cond:
                        self._tokens += value.prompt_tokens + value.completion_tokens
                if value.error is not None:  # the backend itself returned a fallback
                    with self._cond:
                        self._counts["backend_errors"] += 1
                        self._counts["fallbacks"] += 1
            self._resolve(req, value)


    # -- metrics and lifecycle ----------------------------------------------------------------------
    def _state(self) -> ServiceState:
        with self._cond:
            counts = dict(self._counts)
            lat = np.array(self._latencies, dtype=np.float64)
            depth, inflight = len(self._queue), len(self._inflight)
            sizes = dict(self._batch_sizes)
            fresh = tuple(self._fresh)
        return ServiceState(counts, lat, depth, inflight, sizes, self._circuit_open, self._tokens, fresh)

    def metrics(self) -> dict[str, Any]:
        """Counters, queue depth, latency percentiles (seconds, submit -> resolved), tokens, dollars."""
        cache_stats = self.lm.stats if isinstance(self.lm, CachedLM) else None
        return service_metrics(self._state(), self.dollars, cache_stats)

    def lm_metrics(self, parse_errors: float | None = None) -> dict[str, float]:
        """The canonical ``lm/*`` metrics (see :mod:`llmguide.llm.service_metrics`); all values floats."""
        state = self._state()
        try:
            io = dict(self.lm.io_stats())
        except Exception:  # a backend's counters must never break logging
            log.exception("LLMService: io_stats() of the backend failed")
            io = {}
        return lm_metrics(state, io, parse_errors)

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop the worker; requests still queued resolve with the fallback. Does not close the LM."""
        with self._cond:
            self._closed = True
            pending = list(self._queue)
            self._queue.clear()
            self._by_future.clear()
            self._owned.clear()
            self._cond.notify_all()
        self._stop.set()
        if pending:
            self._resolve_fallback(pending, "service closed")
        self._thread.join(timeout)

    def __enter__(self) -> LLMService:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
