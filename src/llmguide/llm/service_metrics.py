"""The ``lm/*`` metrics of :class:`~llmguide.llm.service.LLMService`: their definition and computation.

The service snapshots its counters (:class:`ServiceState`) and the functions here turn a snapshot
into :meth:`~llmguide.llm.service.LLMService.metrics` (the older, unprefixed counters) and
:meth:`~llmguide.llm.service.LLMService.lm_metrics` (the canonical ``lm/*`` metrics below).

The ``lm/*`` metrics
--------------------
:meth:`LLMService.lm_metrics` is the one definition of the ``lm/*`` metrics every method logs
(cumulative over the service's life, this process only; floats):

=========================  ===================================================================================
key                        meaning
=========================  ===================================================================================
``lm/requests``            requests submitted to the service (``submit_generate`` + ``submit_score``)
``lm/deduplicated``        submissions that joined an identical request already in flight (no new work)
``lm/cache_hits``          requests answered from the persistent cache (no backend call)
``lm/calls``               requests sent to the real backend: cache misses, once per distinct request in a
                           backend call (a request re-sent after a failed call counts again)
``lm/hit_rate``            answered without a backend call / answered: ``(cache_hits + deduplicated) /
                           (cache_hits + deduplicated + calls)``; callers add their own memo hits if any
``lm/completed``           requests resolved with a real answer (not a fallback)
``lm/fallbacks``           requests resolved with the fallback (server down, timeout, queue full, budget, a
                           request that failed after its retries, a score row with a NaN / missing value)
``lm/retries``             re-sent HTTP requests (backend) + re-tried backend calls (service)
``lm/errors``              failed HTTP attempts of every kind (the five below + ``rejected_nonfinite``)
``lm/errors_http``         HTTP 4xx/5xx answers
``lm/errors_decode``       undecodable answers: invalid or truncated JSON, not an object, missing or mistyped
                           fields, no echoed log-probs, positive log-probs
``lm/errors_timeout``      requests cut by the read timeout (a stalled server) or the total response deadline
``lm/errors_connection``   connection refused / reset
``lm/errors_oversize``     bodies larger than ``max_response_bytes`` (dropped while streaming)
``lm/rejected_nonfinite``  answers rejected for a null / NaN / infinite log-prob of a candidate token
``lm/truncated``           answers longer than the requested ``max_tokens``, cut to it (never cached)
``lm/errors_backend``      backend calls that raised into the service (after the backend's own retries)
``lm/cache_rejected``      answers returned but not cached: malformed (control characters, over the
                           length cap, truncated) or larger than the cache's entry limit
``lm/cache_evictions``     cache entries this process evicted to keep the cache under ``max_bytes``
``lm/cache_bytes``         total size of the cache entries (bytes) after this process's last write
``lm/http_requests``       HTTP requests sent (retries included)
``lm/redacted``            server answers or messages in which the API key was found and removed
``lm/tokens``              prompt + completion tokens spent on backend calls (cache hits cost none)
``lm/latency_p50``         median seconds from submit to resolved (fallbacks included)
``lm/latency_p95``         95th percentile of the same
``lm/queue_depth``         requests waiting for the worker now
``lm/inflight``            distinct requests submitted and not yet resolved now
``lm/circuit_open``        1 while the service takes the server as down, else 0
``lm/dropped_stale``       queued requests dropped (future cancelled, no backend call) because no owner
                           wanted them any more: every env that asked has moved to another state
``lm/fresh_fraction``      share of the steps reported with :meth:`LLMService.record_fresh` whose current state
                           already had an answer (ELLM: the env's state signature was answered when the
                           agent acted; only present once a caller reported steps)
``lm/parse_errors``        only when the caller passes ``parse_errors=`` (answers its parser rejected)
=========================  ===================================================================================

Counters a backend does not have (e.g. HTTP errors of the embedded model) are 0.  :meth:`LLMService.metrics`
keeps the older, unprefixed service counters for existing callers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

SERVICE_COUNTERS = ("submitted", "completed", "deduplicated", "dropped_stale", "fallbacks", "retries", "backend_calls",
                    "cache_hits",
                    "backend_errors", "fallback_queue_full", "fallback_budget", "fallback_unavailable",
                    "fallback_timeout", "fallback_error", "fallback_closed")
HTTP_ERROR_KINDS = ("http", "decode", "timeout", "connection", "oversize")


@dataclass
class ServiceState:
    """A snapshot of an :class:`~llmguide.llm.service.LLMService`'s bookkeeping."""

    counts: dict[str, int]
    latencies: np.ndarray       # seconds from submit to resolved, the last ``latency_window`` requests
    queue_depth: int
    inflight: int
    batch_sizes: dict[int, int]  # backend-call batch size -> number of calls
    circuit_open: bool
    tokens: int
    fresh: tuple[int, int] = (0, 0)   # steps that had an answer for their current state, steps reported


def _percentile(lat: np.ndarray, q: float) -> float:
    return float(np.percentile(lat, q)) if lat.size else 0.0


def service_metrics(state: ServiceState, dollars: float, cache_stats: dict[str, Any] | None) -> dict[str, Any]:
    """Counters, queue depth, latency percentiles, tokens, dollars (and ``cache_stats``' hits and hit rate)."""
    counts, sizes = state.counts, state.batch_sizes
    calls = sum(sizes.values())
    out: dict[str, Any] = {name: counts.get(name, 0) for name in SERVICE_COUNTERS}
    out.update({
        "queue_depth": state.queue_depth, "inflight": state.inflight, "circuit_open": state.circuit_open,
        "mean_batch_size": sum(k * v for k, v in sizes.items()) / calls if calls else 0.0,
        "latency_p50": _percentile(state.latencies, 50),
        "latency_p95": _percentile(state.latencies, 95),
        "tokens": state.tokens, "dollars": dollars,
    })
    if cache_stats is not None:
        out["cache_hits"] = cache_stats["hits"]
        out["cache_hit_rate"] = cache_stats["hit_rate"]
    return out


def lm_metrics(state: ServiceState, io: dict[str, Any], parse_errors: float | None = None) -> dict[str, float]:
    """The canonical ``lm/*`` metrics (the table above) from a snapshot and the backend's ``io_stats()``."""
    counts = state.counts
    cache_hits = float(io.get("cache_hits", counts.get("cache_hits", 0)))
    calls = float(io.get("sent", counts.get("sent", 0)))
    dedup = float(counts.get("deduplicated", 0))
    without = cache_hits + dedup
    out: dict[str, float] = {
        "lm/requests": float(counts.get("submitted", 0)),
        "lm/deduplicated": dedup,
        "lm/cache_hits": cache_hits,
        "lm/calls": calls,
        "lm/hit_rate": without / (without + calls) if without + calls else 0.0,
        "lm/completed": float(counts.get("completed", 0)),
        "lm/fallbacks": float(counts.get("fallbacks", 0)),
        "lm/retries": float(counts.get("retries", 0)) + float(io.get("retries", 0)),
    }
    errors = {f"lm/errors_{k}": float(io.get(f"errors_{k}", 0)) for k in HTTP_ERROR_KINDS}
    nonfinite = float(io.get("rejected_nonfinite", 0))
    out["lm/errors"] = sum(errors.values()) + nonfinite
    out.update(errors)
    out.update({
        "lm/rejected_nonfinite": nonfinite,
        "lm/truncated": float(io.get("truncated", 0)),
        "lm/errors_backend": float(counts.get("backend_failures", 0)),
        "lm/cache_rejected": float(io.get("rejected", 0)),
        "lm/cache_evictions": float(io.get("cache_evictions", 0)),
        "lm/cache_bytes": float(io.get("cache_bytes", 0)),
        "lm/http_requests": float(io.get("http_requests", 0)),
        "lm/redacted": float(io.get("redacted", 0)),
        "lm/tokens": float(state.tokens),
        "lm/latency_p50": _percentile(state.latencies, 50),
        "lm/latency_p95": _percentile(state.latencies, 95),
        "lm/queue_depth": float(state.queue_depth),
        "lm/inflight": float(state.inflight),
        "lm/circuit_open": 1.0 if state.circuit_open else 0.0,
        "lm/dropped_stale": float(counts.get("dropped_stale", 0)),
    })
    if state.fresh[1]:
        out["lm/fresh_fraction"] = state.fresh[0] / state.fresh[1]
    if parse_errors is not None:
        out["lm/parse_errors"] = float(parse_errors)
    return out
