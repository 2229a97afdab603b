"""Reading a sandboxed call's result in the parent, where nothing the child wrote is trusted.

The runner writes ``marker + JSON`` once on the pipe that is its stdout, then closes it.  The
program runs in that same process, so it may write on that pipe too (before, after, or from an
``atexit`` hook) and, were it to learn the per-call marker, forge a whole result.  So here:

* the marker must appear exactly once; the JSON object after it must end the output (no byte
  after it, not even whitespace);
* every field is checked for type, range and consistency (``values``: ``n`` finite floats or
  ``null`` for an item that raised; ``item_errors`` = the number of ``null``\\ s; texts are
  strings) and capped in size; ``extras`` are capped (:data:`MAX_EXTRAS` dicts of
  :data:`MAX_EXTRA_KEYS` keys, :data:`MAX_EXTRA_CHARS` characters per key or text) and made
  finite (a NaN or infinite number becomes ``None``);
* any exception while decoding or checking (``RecursionError`` from deep nesting, ``ValueError``
  from a 5,000-digit number, ``MemoryError``...) becomes :class:`MalformedResult`.

:func:`read_result` returns either a :class:`ChildResult` or the reason (a string) the output
is no result; it never raises.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

MAX_EXTRAS = 32              # extras kept per call (one per item at most)
MAX_EXTRA_KEYS = 20          # keys kept per extra
MAX_EXTRA_CHARS = 100        # characters kept per extra key or text value
MAX_ERROR_CHARS = 3000       # characters kept of an error or traceback text


class MalformedResult(ValueError):
    """The child's output is not a well-formed result."""


@dataclass
class ChildResult:
    """A checked result: ``status`` "ok" (values, per-item errors) or "error" (``error`` says why)."""

    status: str
    values: list[float | None] = field(default_factory=list)
    error: str | None = None
    item_errors: int = 0
    first_item_error: str | None = None
    stdout: str = ""
    extras: list[dict[str, float | str | None]] = field(default_factory=list)
    batched: bool = False
    batch_error: str | None = None


def read_result(raw: bytes, marker: bytes, n: int, max_output_chars: int) -> ChildResult | str:
    """The checked result in ``raw`` (the child's whole output), or why there is none."""
    try:
        count = raw.count(marker)
        if count != 1:
            return ("the program ended the sandbox process before it returned its results" if count == 0 else
                    f"forged sandbox result: the result marker appears {count} times")
        return decode(raw.partition(marker)[2], n, max_output_chars)
    except Exception as err:                 # noqa: BLE001  (anything at all: the input is hostile)
        return f"unreadable sandbox result: {_describe(err)}"


def decode(body: bytes, n: int, max_output_chars: int) -> ChildResult:
    """Check the JSON after the marker (see the module docstring); raises on any deviation."""
    text = body.decode("utf-8")
    data, end = json.JSONDecoder().raw_decode(text)
    if end != len(text):
        raise MalformedResult(f"{len(text) - end} characters after the result")
    if type(data) is not dict:
        raise MalformedResult(f"a {type(data).__name__} instead of an object")
    stdout = _text(data.get("stdout", ""), "stdout", max_output_chars)
    status = data.get("status")
    if status == "error":
        return ChildResult("error", error=_text(data.get("error"), "error") or "(no error message)", stdout=stdout)
    if status != "ok":
        raise MalformedResult(f"status {_short(status)}")
    values = data.get("values")
    if type(values) is not list or len(values) != n:
        raise MalformedResult(f"'values' is not a list of {n} numbers")
    for v in values:
        if v is not None and not (type(v) is float and math.isfinite(v)):
            raise MalformedResult(f"value {_short(v)} is not a finite float")
    item_errors = data.get("item_errors", 0)
    if type(item_errors) is not int or item_errors != values.count(None):
        raise MalformedResult(f"item_errors {_short(item_errors)} does not count the failed items")
    batched = data.get("batched", False)
    if type(batched) is not bool:
        raise MalformedResult(f"batched {_short(batched)} is not a bool")
    return ChildResult("ok", values=values, item_errors=item_errors, stdout=stdout, batched=batched,
                       first_item_error=_text(data.get("first_item_error"), "first_item_error"),
                       batch_error=_text(data.get("batch_error"), "batch_error"),
                       extras=clean_extras(data.get("extras", [])))


def clean_extras(extras: Any) -> list[dict[str, float | str | None]]:
    """At most MAX_EXTRAS dicts of MAX_EXTRA_KEYS keys; numbers finite floats (else None), texts capped."""
    if type(extras) is not list:
        raise MalformedResult("'extras' is not a list")
    kept = []
    for extra in extras[:MAX_EXTRAS]:
        if type(extra) is not dict:
            raise MalformedResult("an extra is not an object")
        kept.append({str(k)[:MAX_EXTRA_CHARS]: _scalar(v) for k, v in list(extra.items())[:MAX_EXTRA_KEYS]})
    return kept


def _scalar(value: Any) -> float | str | None:
    if type(value) is str:
        return value[:MAX_EXTRA_CHARS]
    if type(value) in (int, float, bool):
        try:
            number = float(value)
        except OverflowError:
            return None
        return number if math.isfinite(number) else None
    return None


def _text(value: Any, name: str, limit: int = MAX_ERROR_CHARS) -> str | None:
    if value is None or type(value) is str:
        return value if value is None else value[:limit]
    raise MalformedResult(f"'{name}' is not a string")


def _short(value: Any) -> str:
    """A bounded description of a hostile value (repr of a huge or deep object could itself fail)."""
    if type(value) in (int, float, bool, type(None)):
        text = repr(value) if type(value) is not int or abs(value) < 10 ** 30 else "a very large int"
    elif type(value) is str:
        text = repr(value[:40])
    else:
        text = f"a {type(value).__name__}"
    return text[:60]


def _describe(err: BaseException) -> str:
    try:
        return f"{type(err).__name__}: {str(err)[:300]}"
    except Exception:                        # noqa: BLE001
        return type(err).__name__
