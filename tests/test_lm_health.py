"""Honest LM health (issue #31 point 5): ``lm/answered_fraction`` counts only what the LM or its cache
answered, a failing LM is reported on the console (rate-limited), and ``check_answered_fraction`` fails a
run that got too few answers."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from llmguide.core.errors import LLMGuideError, LLMUnavailableError
from llmguide.llm.cache.cached_lm import CachedLM
from llmguide.llm.cache.store import LLMCache
from llmguide.llm.service.core import LLMService
from llmguide.llm.service.metrics import AnsweredTooFewError, check_answered_fraction
from llmguide.llm.service.resilience import FailureWarnings
from test_llm_cache import NGramLM


def _gated() -> NGramLM:
    lm = NGramLM()
    lm.gate = threading.Event()
    return lm


def test_answered_fraction_counts_answers_not_joins_drops_or_failures():
    lm = _gated()
    with LLMService(lm, max_batch=1) as service:
        service.submit_generate("blocker", max_tokens=2)            # answered
        assert lm.entered.wait(10)
        shared = service.submit_generate("x", max_tokens=2, owner=0)
        assert service.submit_generate("x", max_tokens=2, owner=1) is shared   # joined: not a request of its own
        service.submit_generate("y", max_tokens=2, owner=0)        # answered
        service.release(1)                                          # "x": nobody wants it -> dropped, unanswered
        assert shared.cancelled()
        empty = service.submit_generate("", max_tokens=2)           # the backend answers with an error: a fallback
        free = service.submit_generate("z", max_tokens=2)           # answered
        lm.gate.set()
        assert empty.result(10).error and free.result(10).error is None
        deadline = time.monotonic() + 10
        while service.lm_metrics()["lm/inflight"] and time.monotonic() < deadline:
            time.sleep(0.01)
        m = service.lm_metrics()
    # 6 submissions, 1 joined: 5 distinct requests; answered: blocker, y, z
    assert (m["lm/requests"], m["lm/deduplicated"], m["lm/dropped_stale"]) == (6, 1, 1)
    assert m["lm/completed"] == 3 and m["lm/fallbacks"] == 1 and m["lm/fallbacks_error"] == 1
    assert m["lm/answered_fraction"] == pytest.approx(3 / 5)
    assert m["lm/hit_rate"] > 0   # the old health figure counts the join as a hit; the new one does not


def test_answered_fraction_counts_cache_answers_and_is_absent_before_any_request(tmp_path):
    cached = CachedLM(NGramLM(), LLMCache(tmp_path / "c.sqlite"))
    with LLMService(cached) as service:
        assert "lm/answered_fraction" not in service.lm_metrics()
        service.submit_generate("eat ", max_tokens=3).result(10)
        service.submit_generate("eat ", max_tokens=3).result(10)   # from the cache
        m = service.lm_metrics()
    assert m["lm/cache_hits"] == 1 and m["lm/answered_fraction"] == 1.0
    cached.close()


class DeadLM(NGramLM):
    """A backend whose server is down: every call raises like HTTPLM does after its own retries."""

    def generate(self, prompts, **kw):
        self._enter(prompts)
        raise LLMUnavailableError("cannot reach LM server http://127.0.0.1:9/v1: connection refused")

    score = generate


def test_a_failing_lm_is_reported_on_the_console_rate_limited_and_fails_the_check(caplog):
    with caplog.at_level(logging.WARNING, logger="llmguide"):
        with LLMService(DeadLM(), max_retries=1, backoff_base=0.001, backoff_max=0.01, warn_every=3600) as service:
            futures = [service.submit_generate(f"state {i}", max_tokens=2) for i in range(40)]
            results = [f.result(30) for f in futures]
            m = service.lm_metrics()
    assert all(r.text == "" and "unavailable" in r.error for r in results)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "LM requests are failing" in r.message]
    assert len(warnings) == 1                        # 40 failures, one console line (next at most an hour later)
    assert "unavailable" in warnings[0].message and "connection refused" in warnings[0].message
    assert "answered 0 of" in warnings[0].message
    assert m["lm/answered_fraction"] == 0.0 and m["lm/fallbacks_unavailable"] == 40
    with pytest.raises(AnsweredTooFewError) as err:
        check_answered_fraction(m, 0.5)
    message = str(err.value)
    assert isinstance(err.value, LLMGuideError) and "\n" not in message
    assert "0 of 40 requests" in message and "llm.require_fraction=0.5" in message and "unavailable 40" in message


def test_failure_warnings_are_rate_limited_and_sum_what_happened_between():
    now = [0.0]
    records: list[str] = []

    class Sink(logging.Logger):
        def warning(self, msg, *args, **kw):
            records.append(msg % args)

    warn = FailureWarnings(every=60.0, logger=Sink("sink"), clock=lambda: now[0])
    warn.failed(1, "unavailable", "unavailable after 6 attempt(s): refused")
    for t, n, name, reason in [(10, 3, "timeout", "timeout: waited"), (59, 2, "unavailable", "unavailable: down")]:
        now[0] = t
        warn.failed(n, name, reason)
    assert len(records) == 1 and "1 fell back (unavailable 1)" in records[0]
    now[0] = 61.0
    warn.failed(1, "error", "error: boom", context=lambda: "the LM answered 2 of 9 distinct requests so far")
    assert len(records) == 2
    assert "6 fell back (error 1, timeout 3, unavailable 2), last: error: boom" in records[1]
    assert "answered 2 of 9" in records[1]


def test_closing_with_queued_requests_is_not_reported_as_an_lm_failure(caplog):
    lm = _gated()
    service = LLMService(lm, max_batch=1)
    service.submit_generate("blocker", max_tokens=1)
    assert lm.entered.wait(10)
    queued = [service.submit_generate(f"q{i}", max_tokens=1) for i in range(5)]
    with caplog.at_level(logging.WARNING, logger="llmguide"):
        lm.gate.set()
        service.close()
    assert all(f.done() for f in queued)
    assert not [r for r in caplog.records if "LM requests are failing" in r.message]


def test_check_answered_fraction_passes_when_off_enough_or_nothing_was_asked():
    m = {"lm/requests": 10.0, "lm/deduplicated": 2.0, "lm/completed": 6.0, "lm/answered_fraction": 0.75}
    check_answered_fraction(m, None)
    check_answered_fraction(m, 0)
    check_answered_fraction(m, 0.75)
    with pytest.raises(AnsweredTooFewError, match="6 of 8 requests"):
        check_answered_fraction(m, 0.8)
    check_answered_fraction({"lm/requests": 0.0}, 0.9)      # no request made (e.g. all from a warm memo)
    check_answered_fraction({}, 0.9)                        # no LM in this run
    with pytest.raises(ValueError):
        check_answered_fraction(m, 1.5)


def test_a_slow_lm_is_reported_mid_run_before_anything_falls_back(caplog):
    """A server that stalls: requests wait (no fallback yet), and the next metrics log says the LM falls behind."""
    lm = _gated()   # answers nothing until the gate opens: a stalled server
    with caplog.at_level(logging.WARNING, logger="llmguide"):
        with LLMService(lm, max_batch=1, timeout=3600, warn_every=3600) as service:
            futures = [service.submit_generate(f"state {i}", max_tokens=2) for i in range(30)]
            service.lm_metrics()
            lagging = [r for r in caplog.records if "falling behind" in r.message]
            assert len(lagging) == 1 and "answered 0 of the last 30 requests" in lagging[0].message
            assert not any("failing" in r.message for r in caplog.records)   # nothing fell back
            lm.gate.set()
            [f.result(30) for f in futures]
            futures = [service.submit_generate(f"next {i}", max_tokens=2) for i in range(30)]
            [f.result(30) for f in futures]
            service.lm_metrics()
    assert len([r for r in caplog.records if "falling behind" in r.message]) == 1   # it caught up: no new line


def test_lag_warnings_need_enough_requests_and_are_rate_limited():
    from llmguide.llm.service.resilience import LagWarnings

    now = [0.0]
    lag = LagWarnings(threshold=0.5, min_requests=20, every=60, clock=lambda: now[0])
    assert not lag.check(10, 0)            # 10 asked: the window is too small yet
    assert lag.check(25, 5)                # 5 of 25 answered
    assert not lag.check(50, 5)            # still behind, but within the minute
    now[0] = 61
    assert not lag.check(75, 50)           # 45 of 25? caught up: the window answered enough
    assert lag.check(100, 50) and lag.warnings == 2
