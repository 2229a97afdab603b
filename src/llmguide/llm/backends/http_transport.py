"""The HTTP layer under :class:`~llmguide.llm.backends.http.HTTPLM`: the SDK's ``httpx``, the capped transport,
faults, and decoding of echoed prompt log-probs.

- :class:`CappedTransport` bounds each response's size (``max_response_bytes``: :class:`ResponseTooLarge`
  while the body streams in) and total time (a :class:`httpx.ReadTimeout` past the deadline).
- :class:`Fault` is one failed attempt, named by the counter it bumps (http, decode, timeout,
  connection, oversize, nonfinite); :data:`FINAL_STATUS` are the HTTP statuses never retried;
  :func:`decode_faults` (:func:`reads_answer`) makes any failure to read an answer (JSON nested too deep
  for the parser, an unexpected shape) a decode fault.
- :func:`span_logprob` validates an echoed answer and sums the log-probs of a candidate's tokens.
"""

from __future__ import annotations

import functools
import importlib
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import openai

# the HTTP library the installed SDK is built on (``httpx2`` for openai >= 3, ``httpx`` before)
httpx: Any = importlib.import_module(openai.DefaultHttpxClient.__mro__[1].__module__.split(".")[0])

FINAL_STATUS = frozenset({403, 404, 405, 501})  # configuration errors: retrying cannot help


class ResponseTooLarge(httpx.TransportError):
    """The response body exceeded ``max_response_bytes`` (raised while it streams in)."""


class Fault(Exception):
    """One failed attempt: ``kind`` names the counter (http, decode, timeout, connection, oversize, nonfinite)."""

    def __init__(self, kind: str, message: str, retryable: bool = True):
        super().__init__(message)
        self.kind, self.message, self.retryable = kind, message, retryable


# what reading an answer can raise: bad or truncated JSON, a body nested deeper than the parser recurses
# (RecursionError), a value of an unexpected type or shape
PARSE_ERRORS = (ValueError, UnicodeDecodeError, RecursionError, TypeError, KeyError, IndexError, AttributeError)


@contextmanager
def decode_faults(where: str) -> Iterator[None]:
    """Within: a failure to read an answer (:data:`PARSE_ERRORS`) is a decode :class:`Fault` naming the server
    (``where``): counted, backed off and retried like any other, never a traceback."""
    try:
        yield
    except PARSE_ERRORS as err:
        detail = "nested too deeply to parse" if isinstance(err, RecursionError) else \
            f"{type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else '?'}"
        raise Fault("decode", f"{where} sent an answer that does not parse ({detail})") from None


def reads_answer(method: Callable[..., Any]) -> Callable[..., Any]:
    """An LM method that reads an answer (``self._where()`` names the server): any failure to read it is a decode
    fault (:func:`decode_faults`)."""

    @functools.wraps(method)
    def read(self: Any, *args: Any, **kwargs: Any) -> Any:
        with decode_faults(self._where()):
            return method(self, *args, **kwargs)

    return read


class CappedStream(httpx.SyncByteStream):
    """A response stream that raises once more than ``limit`` bytes or ``deadline`` seconds went by."""

    def __init__(self, inner: Any, limit: int, deadline: float, request: httpx.Request):
        self._inner, self._limit, self._deadline, self._request = inner, limit, deadline, request

    def __iter__(self) -> Iterator[bytes]:
        n = 0
        for chunk in self._inner:
            n += len(chunk)
            if n > self._limit:
                raise ResponseTooLarge(f"response body larger than {self._limit} bytes")
            if time.monotonic() > self._deadline:
                raise httpx.ReadTimeout("response took longer than its total deadline", request=self._request)
            yield chunk

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


class CappedTransport(httpx.BaseTransport):
    """httpx transport bounding each response's size (``max_bytes``) and total time (``total_timeout``)."""

    def __init__(self, max_bytes: int, total_timeout: float):
        self._inner = httpx.HTTPTransport()
        self.max_bytes, self.total_timeout = max_bytes, total_timeout

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = time.monotonic() + self.total_timeout
        response = self._inner.handle_request(request)
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            response.close()
            raise ResponseTooLarge(f"response body of {length} bytes, limit {self.max_bytes}")
        return httpx.Response(status_code=response.status_code, headers=response.headers,
                              stream=CappedStream(response.stream, self.max_bytes, deadline, request),
                              extensions=response.extensions)

    def close(self) -> None:
        self._inner.close()


def caused_by(err: BaseException, kind: type[BaseException] | tuple[type[BaseException], ...]) -> bool:
    """Whether ``err`` or one of its causes / contexts (ten deep) is a ``kind``."""
    seen = 0
    cur: BaseException | None = err
    while cur is not None and seen < 10:
        if isinstance(cur, kind):
            return True
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return False


def token_count(value: Any) -> int:
    """A token count from a server (non-negative int), 0 if absent or malformed."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def span_logprob(data: dict[str, Any], context: str, candidate: str, where: str,
                 message: Callable[[str], str]) -> tuple[float, int]:
    """(summed log-prob, token count) of the candidate span in one echoed answer; or a :class:`Fault`.

    ``where`` names the server in fault messages; ``message`` shortens and redacts server text.
    """
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    lp = choice.get("logprobs") if choice is not None else None
    if not isinstance(lp, dict) or not lp.get("token_logprobs") or not lp.get("text_offset"):
        raise Fault("decode",
                    f"{where} returned no prompt log-probs for echo=True, logprobs=1; scoring needs a "
                    "server that returns them (llama.cpp server: --logits_all true; vLLM: completions with echo)")
    tokens, logps, offsets = lp.get("tokens"), lp.get("token_logprobs"), lp.get("text_offset")
    if (not isinstance(tokens, list) or not isinstance(logps, list) or not isinstance(offsets, list)
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or not all(isinstance(t, str) for t in tokens)):
        raise Fault("decode", f"{where} sent malformed log-probs (tokens / token_logprobs / text_offset)")
    start, end = len(context), len(context) + len(candidate)
    total, count = 0.0, 0
    for i, (tok, logp, offset) in enumerate(zip(tokens, logps, offsets, strict=False)):
        tok_end = offsets[i + 1] if i + 1 < len(offsets) else offset + len(tok)
        if tok_end <= start or offset >= end:
            continue
        if isinstance(logp, bool) or not isinstance(logp, int | float) or not math.isfinite(logp):
            raise Fault("nonfinite", f"{where} gave a non-finite log-prob ({logp!r}) for candidate "
                                     f"token {message(repr(tok))}")
        if logp > 1e-4:
            raise Fault("decode", f"{where} gave a positive log-prob ({logp!r})")
        total += float(logp)
        count += 1
    if count == 0:
        raise Fault("decode", f"{where} did not echo the prompt (no token inside the candidate span)")
    return total, count
