"""ELLM's warm start: the persistent LM cache keeps a ledger of the state signatures earlier runs had
answered (per prompt namespace), so a new run preloads their answers instead of asking again.  The
bookkeeping never breaks training: a failure is logged and skipped."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from llmguide.llm.cache.cached_lm import CachedLM
from llmguide.methods.ellm.signature import StateSignature, state_signature

log = logging.getLogger(__name__)


def _cached_lm(service: Any) -> CachedLM | None:
    """The persistent cache behind the service's LM, or None (no service, or an uncached LM)."""
    lm = service.lm if service is not None else None
    return lm if isinstance(lm, CachedLM) else None


def record_seen(service: Any, namespace: str, captions: list[str]) -> None:
    """Add answered signature captions to the cache's ledger for ``namespace``."""
    cached = _cached_lm(service)
    if cached is None or not captions:
        return
    try:
        cached.cache.add_seen(namespace, captions)
    except Exception as err:  # noqa: BLE001 - warm-start bookkeeping must never break training
        log.warning("could not record answered signatures for warm start (%s)", err)


def cached_answers(service: Any, namespace: str, limit: int,
                   request: Callable[[StateSignature], tuple[str, dict[str, Any]]]) -> dict[StateSignature, tuple[str, Any]]:
    """``{signature: (kind, cached value)}`` for the ledger's signatures whose request (``request(sig)``) is cached."""
    cached = _cached_lm(service)
    if cached is None:
        return {}
    try:
        captions = cached.cache.seen(namespace, limit=limit)
    except Exception as err:  # noqa: BLE001
        log.warning("warm start skipped: %s", err)
        return {}
    out: dict[StateSignature, tuple[str, Any]] = {}
    for caption in captions:
        sig = state_signature(caption)
        if sig.caption() != caption or sig in out:
            continue
        kind, req = request(sig)
        payload = {**req, "seed": None} if kind == "generate" else req
        try:
            value = cached.cache.get(cached.key(kind, payload))
        except Exception:  # noqa: BLE001
            value = None
        if value is not None:
            out[sig] = (kind, value)
    return out
