"""The ``lm/*`` metrics of :class:`~llmguide.llm.service.core.LLMService` (definition and computation), its
token / dollar :class:`Budget`, and :func:`check_answered_fraction` (``llm.require_fraction``).

The service snapshots its counters (:class:`ServiceState`) and :func:`lm_metrics` turns a snapshot
into :meth:`~llmguide.llm.service.core.LLMService.lm_metrics` (the canonical ``lm/*`` metrics below).


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
``lm/completed``           distinct requests answered by the backend or the cache (not a fallback, not a
                           backend answer with an error, not an answer table's miss)
``lm/answered_fraction``   ``completed / (requests - deduplicated)``: the share of distinct requests the LM or
                           its cache answered.  A submission that joined an identical request is neither
                           answered nor counted; dropped-stale requests and fallbacks count as not answered.
                           Only present once a request was made (:func:`check_answered_fraction`)
``lm/fallbacks``           requests resolved with the fallback (server down, timeout, queue full, budget, a
                           request that failed after its retries, a score row with a NaN / missing value)
``lm/fallbacks_REASON``    fallbacks by reason (only those that happened): ``unavailable`` (server down),
                           ``timeout`` (waited too long in the queue), ``queue_full``, ``budget``, ``error``
                           (a backend bug or an answer with an error), ``closed`` (service closed)
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
``lm/mean_batch_size``     requests per backend call of the service (0 before the first call)
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
``lm/table_hits``,         an answer table only (``llm.table``): requests answered from the table, requests
``lm/table_misses``,       not in it (answered as "nothing"), and misses asked of the LM (``llm.table_online``)
``lm/table_online``,
``lm/table_nearest``       and misses answered by the table's nearest state (``llm.table_fallback=nearest``)
``lm/table_coverage``      an answer table only: the share of the reported steps whose query the table answered
                           (exactly or, with the nearest fallback, by its nearest state: the method's own
                           exact share is apart, e.g. ``ellm/table_exact_fraction``)
                           (= ``lm/fresh_fraction``: a method that reports steps counts a miss as not fresh),
                           or, when the method reports no steps, the share of its requests found in the table
``lm/answer_*``,           a knowledge control only (``llm=random|shuffled|constant``): its answers' rates
``lm/oracle_*``            (yes, tie, goals per list, agreement with the oracle) and the oracle's own yes and
                           tie rates on the same queries
=========================  ===================================================================================

Counters a backend does not have (e.g. HTTP errors of the embedded model) are 0.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmguide.core.errors import LLMGuideError

FALLBACK_REASONS = ("unavailable", "timeout", "queue_full", "budget", "error", "closed")
HTTP_ERROR_KINDS = ("http", "decode", "timeout", "connection", "oversize")


@dataclass
class ServiceState:
    """A snapshot of an :class:`~llmguide.llm.service.core.LLMService`'s bookkeeping."""

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


def lm_metrics(state: ServiceState, io: dict[str, Any], parse_errors: float | None = None) -> dict[str, float]:
    """The canonical ``lm/*`` metrics (the table above) from a snapshot and the backend's ``io_stats()``."""
    counts, sizes = state.counts, state.batch_sizes
    n_calls = sum(sizes.values())
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
        **{f"lm/fallbacks_{r}": float(counts[f"fallback_{r}"]) for r in FALLBACK_REASONS
           if counts.get(f"fallback_{r}")},
        "lm/retries": float(counts.get("retries", 0)) + float(io.get("retries", 0)),
        # a knowledge control's answer rates beside the oracle's on the same queries (llm/backends/counterfactual.py)
        **{f"lm/{k}": float(v) for k, v in io.items() if k.startswith(("answer_", "oracle_"))},
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
        "lm/mean_batch_size": sum(k * v for k, v in sizes.items()) / n_calls if n_calls else 0.0,
        "lm/tokens": float(state.tokens),
        "lm/latency_p50": _percentile(state.latencies, 50),
        "lm/latency_p95": _percentile(state.latencies, 95),
        "lm/queue_depth": float(state.queue_depth),
        "lm/inflight": float(state.inflight),
        "lm/circuit_open": 1.0 if state.circuit_open else 0.0,
        "lm/dropped_stale": float(counts.get("dropped_stale", 0)),
    })
    if "table_hits" in io:   # a table's miss is answered as "nothing": never an answer of the LM's
        out["lm/completed"] = max(0.0, out["lm/completed"] - float(io.get("table_misses", 0)))
    distinct = out["lm/requests"] - dedup
    if distinct > 0:
        out["lm/answered_fraction"] = min(1.0, out["lm/completed"] / distinct)
    if state.fresh[1]:
        out["lm/fresh_fraction"] = state.fresh[0] / state.fresh[1]
    if parse_errors is not None:
        out["lm/parse_errors"] = float(parse_errors)
    if "table_hits" in io:   # an answer table (llm.table): its hits, misses and coverage
        hits, misses = float(io["table_hits"]), float(io.get("table_misses", 0))
        out["lm/table_hits"], out["lm/table_misses"] = hits, misses
        out["lm/table_online"] = float(io.get("table_online", 0))
        out["lm/table_nearest"] = float(io.get("table_nearest", 0))   # misses answered by the nearest state's
        if state.fresh[1]:
            out["lm/table_coverage"] = out["lm/fresh_fraction"]
        elif hits + misses:
            nearest = out["lm/table_nearest"]
            out["lm/table_coverage"] = (hits + nearest) / (hits + misses + nearest)
    return out


class AnsweredTooFewError(LLMGuideError):
    """Too few LM requests were answered (``llm.require_fraction``)."""


def check_answered_fraction(metrics: Mapping[str, Any], required: float | None) -> None:
    """Raise :class:`AnsweredTooFewError` when ``metrics`` (an ``lm_metrics()`` dict) says that less than
    ``required`` of the distinct LM requests were answered by the LM or its cache.

    ``required`` None or 0: no check.  Metrics without ``lm/answered_fraction`` (no LM service, or no request
    made yet -- e.g. every state answered from a warm-started memo) pass: nothing went unanswered.
    """
    if required is None or float(required) <= 0:
        return
    if not float(required) <= 1.0:
        raise ValueError(f"required answered fraction must be in [0, 1], got {required}")
    fraction = metrics.get("lm/answered_fraction")
    if fraction is None or float(fraction) >= float(required):
        return
    distinct = float(metrics.get("lm/requests", 0)) - float(metrics.get("lm/deduplicated", 0))
    reasons = ", ".join(f"{r} {int(metrics[f'lm/fallbacks_{r}'])}" for r in FALLBACK_REASONS
                        if metrics.get(f"lm/fallbacks_{r}"))
    raise AnsweredTooFewError(
        f"the LM answered {int(metrics.get('lm/completed', 0))} of {int(distinct)} requests ({float(fraction):.1%}), "
        f"llm.require_fraction={float(required):g} requires more; fallbacks {int(metrics.get('lm/fallbacks', 0))}"
        f"{f' ({reasons})' if reasons else ''}, dropped as stale {int(metrics.get('lm/dropped_stale', 0))}. "
        "Check that the LM server answers (llm.base_url, llm.timeout) or lower llm.require_fraction")


class Budget:
    """Token and dollar budget of a service: ``tokens`` spent so far (``tokens / 1000 * price_per_1k_tokens``
    dollars); :meth:`exhausted` names the limit reached, if any (then requests get the fallback)."""

    def __init__(self, tokens: int | None = None, dollars: float | None = None, price_per_1k_tokens: float = 0.0):
        self.token_limit, self.dollar_limit, self.price_per_1k_tokens = tokens, dollars, price_per_1k_tokens
        self.tokens = 0
        self._lock = threading.Lock()

    def spend(self, tokens: int) -> None:
        with self._lock:
            self.tokens += int(tokens)

    @property
    def dollars(self) -> float:
        return self.tokens / 1000.0 * self.price_per_1k_tokens

    def exhausted(self) -> str | None:
        """Why no more requests may be sent (a fallback reason containing "budget"), or None."""
        if self.token_limit is not None and self.tokens >= self.token_limit:
            return f"token budget exhausted ({self.tokens} >= {self.token_limit})"
        if self.dollar_limit is not None and self.price_per_1k_tokens > 0 and self.dollars >= self.dollar_limit:
            return f"dollar budget exhausted (${self.dollars:.4f} >= ${self.dollar_limit})"
        return None
