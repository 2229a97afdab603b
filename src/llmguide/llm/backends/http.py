"""Any OpenAI-compatible server (vLLM, SGLang, llama.cpp server, Ollama, FastChat, OpenAI, Azure)
through the official ``openai`` SDK, with N concurrent requests.

The API key is read from the environment variable named by ``api_key_env`` at every call and sent as
the bearer token of that request; it is never stored on the object, in config or in logs, and it is
redacted from anything the server sends back (error messages, answers) before that text goes anywhere.

``score`` asks the completions endpoint to echo the prompt ``context + candidate`` with its token
log-probs (``echo=True, logprobs=1, max_tokens=1``) and sums the log-probs of the tokens whose text
offset lies inside the candidate (a token straddling the boundary counts as a candidate token).  The
server tokenises the joint string, so keep the boundary clean (candidate starting with a space).
Servers keep the context in their prefix cache between candidates (llama.cpp slot reuse, vLLM
automatic prefix caching); the llama.cpp server needs ``--logits_all true`` for prompt log-probs.

A misbehaving server cannot crash a run, stall it, flood it or poison the cache:

- **Retries** (``max_retries``, backoff ``min(backoff_max, backoff_base * 2**attempt)`` times a jitter
  in [0.5, 1]) for every fault of one request: HTTP errors, connection errors, timeouts, over-long
  bodies and *decode* faults (invalid, truncated or too deeply nested JSON, a non-object body, missing
  or mistyped fields, no echoed log-probs, any failure to read an answer).  Only HTTP 403/404/405/501
  (forbidden, no such model or endpoint: configuration errors) are not retried; a 401 is, since the key
  is read anew at every attempt (rotation).  Retries are per request, so one bad answer does not fail its batch.
- **Timeouts**: ``timeout`` seconds per read (a stalled server) and ``3 * timeout`` for a whole response
  (a server trickling bytes); both are ``timeout`` faults.
- **Size**: a body larger than ``max_response_bytes`` is dropped while it streams in (``oversize``).  A
  completion longer than the requested ``max_tokens`` -- by the server's own ``usage`` count or, failing
  that, by :data:`~llmguide.llm.base.MAX_CHARS_PER_TOKEN` characters per token -- is cut to it and
  counted (``truncated``; ``finish_reason="length"``, ``meta["truncated"]=True``, never cached).
- **Log-probs**: a null, NaN or infinite log-prob of a candidate token rejects the answer
  (``rejected_nonfinite``) and the request is retried like any transient fault.
- **After the retries**: a prompt gets ``Completion(text="", error=reason)`` and a context's scores are
  ``nan`` (the service turns both into its counted fallback and the cache never stores them); only when
  *every* request of a call failed does the call raise :class:`LLMUnavailableError` (server down: the
  service's retries and circuit breaker take over).

Counters (:meth:`HTTPLM.io_stats`): ``http_requests`` (HTTP requests sent, retries included),
``retries``, ``errors_http``, ``errors_decode``, ``errors_timeout``, ``errors_connection``,
``errors_oversize``, ``rejected_nonfinite``, ``truncated``, ``failed`` (requests that exhausted their
retries), ``redacted`` (answers or messages in which the key was found and removed), ``cancelled``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import openai

from llmguide.core.errors import LLMUnavailableError
from llmguide.llm.backends.http_transport import (
    FINAL_STATUS,
    CappedTransport,
    Fault,
    ResponseTooLarge,
    caused_by,
    httpx,
    reads_answer,
    span_logprob,
    token_count,
)
from llmguide.llm.base import Completion, LanguageModel, char_cap, check_score_args

T = TypeVar("T")
log = logging.getLogger(__name__)

_MESSAGE_CHARS = 300


class HTTPLM(LanguageModel):
    """OpenAI-compatible HTTP backend; ``concurrency`` requests in flight at once."""

    backend = "http"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 4,
        timeout: float = 30.0,
        max_retries: int = 5,
        chat: bool = False,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        max_response_bytes: int = 8 * 2**20,
    ):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if timeout <= 0 or max_response_bytes < 1 or max_retries < 0:
            raise ValueError("timeout and max_response_bytes must be > 0 and max_retries >= 0")
        self.base_url = base_url
        self.model_id = model
        self.cache_identity = f"{model}@{self.base_url}"   # the same name on another server is another model
        self.api_key_env = api_key_env
        self.concurrency = concurrency
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.chat = chat
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.max_response_bytes = int(max_response_bytes)
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._idle = threading.Condition()   # guards _active (requests being sent) and _epoch (interrupts)
        self._active = 0
        self._epoch = 0
        http_client = openai.DefaultHttpxClient(
            transport=CappedTransport(self.max_response_bytes, 3 * self.timeout),
            timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)))
        # The client holds a placeholder; the real key goes into each request's Authorization header.
        # The SDK does not retry: this class does (per request, counted, with decode faults too).
        self._client = openai.OpenAI(base_url=base_url, api_key="EMPTY", timeout=self.timeout, max_retries=0,
                                     http_client=http_client)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="llmguide-http")

    def __repr__(self) -> str:
        return (f"HTTPLM(base_url={self.base_url!r}, model={self.model_id!r}, api_key_env={self.api_key_env!r}, "
                f"concurrency={self.concurrency}, chat={self.chat})")

    # --- plumbing ------------------------------------------------------------------------------
    def _key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key() or 'EMPTY'}"}

    def _redact(self, text: str) -> str:
        """``text`` without the API key (servers may echo it back in errors or answers)."""
        key = self._key()
        if key and len(key) >= 4 and key in text:
            self._bump("redacted")
            text = text.replace(key, "[redacted]")
        return text

    def _message(self, text: str) -> str:
        text = self._redact(str(text))
        return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS] + "..."

    def _bump(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def io_stats(self) -> dict[str, float]:
        """HTTP counters (see the module docstring)."""
        with self._lock:
            return {name: float(v) for name, v in self._counts.items()}

    def _where(self) -> str:
        return f"LM server {self.base_url} (model {self.model_id!r})"

    def _closed_fault(self) -> Fault:
        return Fault("connection", f"{self._where()}: the backend was closed", retryable=False)

    def _post(self, chat: bool, **kwargs: Any) -> dict[str, Any]:
        """One HTTP request; the decoded JSON object, or a :class:`Fault` (never sent once closing)."""
        with self._idle:
            if self._closing.is_set():
                raise self._closed_fault()
            self._active += 1
        try:
            return self._send(chat, **kwargs)
        except RuntimeError as err:   # httpx: "Cannot send a request, as the client has been closed"
            if self._closing.is_set():
                raise self._closed_fault() from err
            raise
        finally:
            with self._idle:
                self._active -= 1
                self._idle.notify_all()

    def _send(self, chat: bool, **kwargs: Any) -> dict[str, Any]:
        resource = self._client.chat.completions if chat else self._client.completions
        self._bump("http_requests")
        try:
            raw = resource.with_raw_response.create(model=self.model_id, extra_headers=self._auth(), **kwargs)
            body = raw.http_response.content
        except openai.APITimeoutError as err:
            raise Fault("timeout", f"{self._where()} timed out after {self.timeout}s") from err
        except openai.APIConnectionError as err:
            if caused_by(err, ResponseTooLarge):
                raise Fault("oversize", f"{self._where()} sent more than {self.max_response_bytes} bytes") from err
            if caused_by(err, httpx.TimeoutException):
                raise Fault("timeout", f"{self._where()} timed out (response slower than "
                                       f"{3 * self.timeout}s)") from err
            raise Fault("connection", f"cannot reach {self._where()}: {type(err).__name__}: "
                                      f"{self._message(str(err))}") from err
        except openai.APIStatusError as err:
            status = int(err.status_code)
            raise Fault("http", f"{self._where()} answered HTTP {status}: {self._message(err.message)}",
                        retryable=status not in FINAL_STATUS) from err
        except openai.APIError as err:  # response validation and anything else the SDK reports
            raise Fault("decode", f"{self._where()}: {self._message(str(err))}") from err
        except (httpx.HTTPError, ResponseTooLarge) as err:  # raised outside the SDK's wrapping
            kind = "oversize" if isinstance(err, ResponseTooLarge) else (
                "timeout" if isinstance(err, httpx.TimeoutException) else "connection")
            raise Fault(kind, f"{self._where()}: {type(err).__name__}: {self._message(str(err))}") from err
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as err:  # invalid, truncated, nested too deeply
            raise Fault("decode", f"{self._where()} sent a body that does not parse as JSON ({len(body)} bytes: "
                                  f"{self._message(repr(body[:80]))})") from err
        if not isinstance(data, dict):
            raise Fault("decode", f"{self._where()} sent JSON that is not an object ({type(data).__name__})")
        return data

    def _attempts(self, attempt: Callable[[], T], epoch: int | None = None) -> T:
        """``attempt()`` until it succeeds, at most ``1 + max_retries`` times; counted faults, backoff.
        :meth:`interrupt` and :meth:`close` end the retries (and the wait before the next one); a request of
        a call interrupted before it was sent is not sent (``cancelled``).  ``epoch``: the call's start."""
        epoch = self._epoch if epoch is None else epoch
        cut = lambda: self._closing.is_set() or self._epoch != epoch  # noqa: E731
        for i in range(self.max_retries + 1):
            if i == 0 and self._epoch != epoch and not self._closing.is_set():
                self._bump("cancelled")
                raise LLMUnavailableError(f"{self._where()}: the call was interrupted before this request was sent")
            try:
                return attempt()
            except Fault as fault:
                self._bump("rejected_nonfinite" if fault.kind == "nonfinite" else f"errors_{fault.kind}")
                if not fault.retryable or i >= self.max_retries or cut():
                    self._bump("failed")
                    tries = f" after {i} retries" if i else ""
                    raise LLMUnavailableError(f"{fault.message}{tries}") from None
                self._bump("retries")
                delay = min(self.backoff_max, self.backoff_base * 2**i) * random.uniform(0.5, 1.0)
                with self._idle:
                    self._idle.wait_for(cut, delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _map(self, fn: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
        """``fn`` over ``items`` with up to ``concurrency`` in flight, results in input order."""
        if len(items) <= 1:
            return [fn(x) for x in items]
        try:
            return list(self._pool.map(fn, items))
        except RuntimeError as err:   # "cannot schedule new futures after shutdown": closed meanwhile
            if self._closing.is_set():
                raise LLMUnavailableError(self._closed_fault().message) from err
            raise

    @staticmethod
    def _settle(fn: Callable[[Any], T]) -> Callable[[Any], T | LLMUnavailableError]:
        def run(item: Any) -> T | LLMUnavailableError:
            try:
                return fn(item)
            except LLMUnavailableError as err:
                return err
        return run

    # --- generation ----------------------------------------------------------------------------
    @reads_answer
    def _completion(self, data: dict[str, Any], max_tokens: int) -> Completion:
        """A :class:`Completion` from one decoded answer, capped at ``max_tokens``; or a decode fault."""
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise Fault("decode", f"{self._where()} sent an answer without choices")
        choice = choices[0]
        if self.chat:
            message = choice.get("message")
            text = message.get("content", None) if isinstance(message, dict) else message
            if message is None or not isinstance(text, str | None):
                raise Fault("decode", f"{self._where()} sent a chat answer without a message content")
            text = text or ""
        else:
            text = choice.get("text")
            if not isinstance(text, str):
                raise Fault("decode", f"{self._where()} sent a completion without text")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        prompt_tokens = token_count(usage.get("prompt_tokens"))
        completion_tokens = token_count(usage.get("completion_tokens"))
        finish = choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None
        meta: dict[str, Any] = {}
        cap, truncated = char_cap(max_tokens), False
        if completion_tokens > max_tokens:  # the server's own count says it ignored max_tokens
            text = text[:len(text) * max_tokens // completion_tokens]
            completion_tokens, truncated = max_tokens, True
        if len(text) > cap:
            text, truncated = text[:cap], True
            completion_tokens = min(completion_tokens, max_tokens) or max_tokens
        if truncated:
            self._bump("truncated")
            finish, meta["truncated"] = "length", True
        return Completion(text=self._redact(text), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                          finish_reason=finish, meta=meta)

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_tokens: int = 48,
        temperature: float = 0.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """One completion per prompt via the completions endpoint (chat endpoint when ``chat=True``).

        A prompt whose request failed after its retries gets ``Completion(text="", error=reason)``;
        when every prompt failed, raises :class:`LLMUnavailableError`.
        """
        params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature}
        if stop:
            params["stop"] = list(stop)
        if seed is not None:
            params["seed"] = seed

        epoch = self._epoch

        def one(prompt: str) -> Completion:
            if self.chat:
                send = lambda: self._post(True, messages=[{"role": "user", "content": prompt}], **params)  # noqa: E731
            else:
                send = lambda: self._post(False, prompt=prompt, **params)  # noqa: E731
            return self._attempts(lambda: self._completion(send(), max_tokens), epoch)

        out = self._map(self._settle(one), list(prompts))
        errors = [r for r in out if isinstance(r, LLMUnavailableError)]
        if errors and len(errors) == len(out):
            raise errors[0]
        return [Completion(text="", error=str(r)) if isinstance(r, LLMUnavailableError) else r for r in out]

    # --- scoring -------------------------------------------------------------------------------
    @reads_answer
    def _span_logprob(self, data: dict[str, Any], context: str, candidate: str) -> tuple[float, int]:
        """(summed log-prob, token count) of the candidate span in one echoed answer; or a fault."""
        return span_logprob(data, context, candidate, self._where(), self._message)

    def _score_pair(self, pair: tuple[str, str], epoch: int | None = None) -> tuple[float, int]:
        """(summed log-prob, token count) of the candidate given the context, from echoed prompt log-probs."""
        context, candidate = pair
        if not candidate:
            return 0.0, 0
        if not context:
            raise ValueError("HTTP scoring needs a non-empty context (the first prompt token has no log-prob)")

        def attempt() -> tuple[float, int]:
            data = self._post(False, prompt=context + candidate, echo=True, logprobs=1, max_tokens=1,
                              temperature=0.0)
            return self._span_logprob(data, context, candidate)

        return self._attempts(attempt, epoch)

    def score(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: bool = False,
    ) -> list[list[float]]:
        """Summed candidate token log-probs from the server's echoed prompt log-probs.

        A context with a candidate whose request failed after its retries gets ``nan`` for every
        candidate; when every context failed, raises :class:`LLMUnavailableError`.
        """
        check_score_args(contexts, candidates)
        pairs = [(ctx, cand) for ctx, cands in zip(contexts, candidates, strict=True) for cand in cands]
        epoch = self._epoch
        flat = self._map(self._settle(lambda pair: self._score_pair(pair, epoch)), pairs)
        out: list[list[float]] = []
        errors: list[LLMUnavailableError] = []
        k = 0
        for cands in candidates:
            got = flat[k:k + len(cands)]
            k += len(cands)
            failed = [r for r in got if isinstance(r, LLMUnavailableError)]
            if failed:
                errors.append(failed[0])
                out.append([math.nan] * len(cands))
                continue
            out.append([total / count if normalize and count else total for total, count in got])  # type: ignore[misc]
        if errors and len(errors) == sum(1 for c in candidates if c):
            raise errors[0]
        return out

    def interrupt(self) -> None:
        """End the retries of the calls in progress and drop their requests not yet sent (see
        :meth:`LanguageModel.interrupt`): closing waits for at most the requests already on the wire."""
        with self._idle:
            self._epoch += 1
            self._idle.notify_all()

    def close(self) -> None:
        """Refuse new requests, end retries, wait for the requests being sent (from any thread; bounded by
        their response deadline), then close the HTTP connection pool.  A call made after or during close
        fails with :class:`LLMUnavailableError` ("the backend was closed"), never with a traceback."""
        with self._idle:
            self._closing.set()
            self._idle.notify_all()
        self._pool.shutdown(wait=True)
        with self._idle:
            if not self._idle.wait_for(lambda: self._active == 0, 3 * self.timeout + 5.0):
                log.warning("%s: %d request(s) still running at close", self._where(), self._active)
        self._client.close()
