"""LLMService: dedup, batching, backpressure, budget, timeouts, fallbacks, and a real server killed and restarted."""

from __future__ import annotations

import importlib.util
import logging
import time

import pytest

from llmguide.llm.base import Completion
from llmguide.llm.cache import LLMCache
from llmguide.llm.cached_lm import CachedLM
from llmguide.llm.service import LLMService, poll
from test_llm_cache import NGramLM  # the tiny real LM shared with the cache tests

needs_http = pytest.mark.skipif(importlib.util.find_spec("llmguide.llm.http") is None,
                                reason="llmguide.llm.http (HTTPLM, another engineer's file) is not written yet")


def _gated() -> NGramLM:
    import threading

    lm = NGramLM()
    lm.gate = threading.Event()
    return lm


def _wait_entered(lm: NGramLM) -> None:
    assert lm.entered.wait(10), "the worker never called the backend"


def test_identical_inflight_requests_share_one_call():
    lm = _gated()
    with LLMService(lm) as service:
        futures = [service.submit_generate("you see a ", max_tokens=5) for _ in range(10)]
        assert all(f is futures[0] for f in futures)
        assert not futures[0].done()  # the learner is not blocked while the backend works
        lm.gate.set()
        result = futures[0].result(timeout=10)
        assert result.text == NGramLM().generate(["you see a "], max_tokens=5)[0].text
        m = service.metrics()
        assert lm.calls == 1 and m["deduplicated"] == 9 and m["submitted"] == 10 and m["completed"] == 1
        # once answered, the same request is a new call (the cache, not the service, remembers answers)
        service.submit_generate("you see a ", max_tokens=5).result(timeout=10)
        assert lm.calls == 2
        # other params -> not a duplicate
        f1 = service.submit_generate("eat ", max_tokens=2)
        f2 = service.submit_generate("eat ", max_tokens=3)
        assert f1 is not f2 and f1.result(timeout=10).text != f2.result(timeout=10).text


def test_requests_are_batched():
    lm = _gated()
    prompts = [f"you see {w} " for w in ("a", "b", "c", "d", "e", "f")]
    with LLMService(lm, max_batch=4) as service:
        first = service.submit_generate("start ", max_tokens=3)
        _wait_entered(lm)  # the worker is busy with the first request
        futures = [service.submit_generate(p, max_tokens=3) for p in prompts]
        score = service.submit_score("you see a tree. ", [" collect wood", " eat cow"])
        assert service.metrics()["queue_depth"] == 7
        lm.gate.set()
        texts = [f.result(timeout=10).text for f in futures]
        assert first.result(timeout=10).error is None
        assert score.result(timeout=10) == NGramLM().score(["you see a tree. "], [[" collect wood", " eat cow"]])[0]
        assert texts == [c.text for c in NGramLM().generate(prompts, max_tokens=3)]
        # 1 (first) + 2 batches of generate (4 + 2) + 1 score batch
        assert lm.calls == 4
        assert service.metrics()["mean_batch_size"] == pytest.approx(8 / 4)
        assert poll([first, score])[1] == score.result()


def test_backpressure_bounded_queue_never_blocks():
    lm = _gated()
    with LLMService(lm, max_queue=2) as service:
        service.submit_generate("a ", max_tokens=2)
        _wait_entered(lm)
        b = service.submit_generate("b ", max_tokens=2)
        c = service.submit_generate("c ", max_tokens=2)
        d = service.submit_generate("d ", max_tokens=2)  # queue full: resolved at once with the fallback
        assert d.done() and d.result().text == "" and "queue full" in d.result().error
        e = service.submit_generate("e ", max_tokens=2, stop=None)
        assert e.done() and service.metrics()["fallback_queue_full"] == 2
        lm.gate.set()
        assert b.result(timeout=10).error is None and c.result(timeout=10).error is None
        again = service.submit_generate("d ", max_tokens=2)  # the rejected request was not lost
        assert again.result(timeout=10).error is None and again.result().text
        assert service.metrics()["fallbacks"] == 2


def test_backpressure_waits_up_to_submit_timeout():
    lm = _gated()
    with LLMService(lm, max_queue=1, submit_timeout=0.2) as service:
        service.submit_generate("a ", max_tokens=2)
        _wait_entered(lm)
        service.submit_generate("b ", max_tokens=2)
        late = service.submit_generate("c ", max_tokens=2)  # waits 0.2 s for room, then falls back
        assert late.done() and "queue full" in late.result().error
        lm.gate.set()


def test_token_and_dollar_budget_fall_back_without_raising():
    lm = NGramLM()
    prompt = "you see a tree. " * 3  # 48 prompt tokens (1 char = 1 token)
    with LLMService(lm, token_budget=100, price_per_1k_tokens=2.0) as service:
        a = service.submit_generate(prompt, max_tokens=20).result(timeout=10)
        assert a.error is None and a.prompt_tokens + a.completion_tokens == 68
        b = service.submit_generate(prompt + "x", max_tokens=20).result(timeout=10)  # 49 + 20: 137 > 100 after it
        assert b.error is None
        c = service.submit_generate("eat ", max_tokens=20).result(timeout=10)
        assert c.text == "" and "token budget" in c.error
        s = service.submit_score("x", [" a", " b"]).result(timeout=10)
        assert s == [None, None]
        m = service.metrics()
        assert m["tokens"] == 68 + 69 and m["dollars"] == pytest.approx(m["tokens"] / 1000 * 2.0)
        assert m["fallback_budget"] == 2 and lm.calls == 2
    with LLMService(NGramLM(), dollar_budget=0.01, price_per_1k_tokens=1.0) as service:
        service.submit_generate("y" * 30, max_tokens=5).result(timeout=10)  # 35 tokens = $0.035
        over = service.submit_generate("z ", max_tokens=5).result(timeout=10)
        assert "dollar budget" in over.error and service.metrics()["fallback_budget"] == 1


def test_stale_requests_time_out_and_custom_fallback():
    lm = _gated()
    seen = []

    def fallback(kind, request, reason):
        seen.append((kind, reason))
        return Completion(text="- explore", error=reason) if kind == "generate" else [0.0] * len(request["candidates"])

    with LLMService(lm, timeout=0.2, fallback=fallback) as service:
        service.submit_generate("a ", max_tokens=2)
        _wait_entered(lm)
        queued = service.submit_generate("b ", max_tokens=2)
        queued_score = service.submit_score("c", [" x", " y"])
        time.sleep(0.4)  # they wait in the queue longer than `timeout`
        lm.gate.set()
        assert queued.result(timeout=10).text == "- explore" and "timeout" in queued.result().error
        assert queued_score.result(timeout=10) == [0.0, 0.0]
        assert service.metrics()["fallback_timeout"] == 2 and [k for k, _ in seen] == ["generate", "score"]


def test_backend_bug_becomes_counted_fallback(caplog):
    class Broken(NGramLM):
        def score(self, contexts, candidates, *, normalize=False):
            raise ValueError("cannot score an empty candidate")

    with LLMService(Broken()) as service, caplog.at_level(logging.WARNING, logger="llmguide.llm.service"):
        assert service.submit_score("ctx", ["", " a"]).result(timeout=10) == [None, None]
        assert service.submit_generate("eat ", max_tokens=2).result(timeout=10).error is None  # worker alive
        assert service.metrics()["fallback_error"] == 1 and service.metrics()["retries"] == 0
    assert "cannot score" in caplog.text


def test_close_resolves_pending_and_later_submits():
    lm = _gated()
    service = LLMService(lm)
    service.submit_generate("a ", max_tokens=2)
    _wait_entered(lm)
    pending = service.submit_generate("b ", max_tokens=2)
    lm.gate.set()
    service.close()
    assert pending.done()
    assert service.submit_generate("c ", max_tokens=2).result(timeout=1).error == "service closed"
    assert not service._thread.is_alive()


def test_service_over_cached_lm_counts_cache_hits(tmp_path):
    lm = NGramLM()
    cached = CachedLM(lm, LLMCache(tmp_path / "c.sqlite"))
    with LLMService(cached) as service:
        a = service.submit_generate("eat ", max_tokens=4).result(timeout=10)
        b = service.submit_generate("eat ", max_tokens=4).result(timeout=10)
        assert not a.cached and b.cached and a.text == b.text and lm.calls == 1
        m = service.metrics()
        assert m["cache_hits"] == 1 and m["cache_hit_rate"] == 0.5 and m["tokens"] == a.prompt_tokens + a.completion_tokens


@needs_http
def test_unreachable_server_retries_then_falls_back():
    from conftest import free_port
    from llmguide.llm import http

    lm = http.HTTPLM(f"http://127.0.0.1:{free_port()}/v1", "gemma-3-270m", max_retries=0, timeout=2.0)
    with LLMService(lm, max_retries=2, backoff_base=0.01, backoff_max=0.05) as service:
        out = service.submit_generate("hello", max_tokens=2).result(timeout=60)
        assert out.text == "" and "unavailable" in out.error
        m = service.metrics()
        assert m["retries"] == 2 and m["fallback_unavailable"] == 1 and m["circuit_open"]
        assert service.submit_score("a", [" b"]).result(timeout=60) == [None]
        assert service.metrics()["retries"] == 2  # circuit open: one probe, no more retries


@needs_http
def test_real_server_killed_and_restarted(fresh_llama_server):
    """The run goes on while the server is down (counted fallbacks) and picks up when it returns."""
    from llmguide.llm import http

    server = fresh_llama_server
    lm = http.HTTPLM(server.base_url, server.model_alias, max_retries=0, timeout=30.0)
    prompt = "Caption: You see tree.\n- collect wood\n\nCaption: You see water.\n"
    with LLMService(lm, max_retries=2, backoff_base=0.05, backoff_max=0.2, timeout=60.0) as service:
        before = service.submit_generate(prompt, max_tokens=4).result(timeout=120)
        assert before.error is None and (before.text or before.completion_tokens)

        server.stop()
        down = [service.submit_generate(f"{prompt}{i}", max_tokens=4) for i in range(3)]
        results = [f.result(timeout=120) for f in down]  # no exception reaches the caller
        assert all(r.text == "" and r.error for r in results)
        m = service.metrics()
        assert m["fallbacks"] >= 3 and m["retries"] >= 2 and m["inflight"] == 0

        server.start()
        after = service.submit_generate(f"{prompt}0", max_tokens=4).result(timeout=120)  # same request again
        assert after.error is None and (after.text or after.completion_tokens)
        assert not service.metrics()["circuit_open"]
        again = service.submit_generate(prompt, max_tokens=4).result(timeout=120)
        assert again.text == before.text  # deterministic at temperature 0, served by the new process
