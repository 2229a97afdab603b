"""The one language-model interface every backend implements (batch-first)."""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: Upper bound on the characters of a generated answer per requested token.  Real tokenisers average
#: 3-5 characters per token; an answer longer than ``max_tokens * MAX_CHARS_PER_TOKEN`` characters
#: did not respect ``max_tokens`` (a misbehaving server) and is cut there (HTTP) / never cached.
MAX_CHARS_PER_TOKEN = 8


def char_cap(max_tokens: int) -> int:
    """Most characters an answer of ``max_tokens`` tokens may have (see :data:`MAX_CHARS_PER_TOKEN`)."""
    return max(1, int(max_tokens)) * MAX_CHARS_PER_TOKEN


def _canonical(obj: Any) -> Any:
    """Make ``obj`` JSON-canonical: tuples -> lists, integral floats -> ints, sorted dict keys."""
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, list | tuple):
        return [_canonical(v) for v in obj]
    if isinstance(obj, float) and math.isfinite(obj) and obj.is_integer():
        return int(obj)
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _canonical(obj.item())
    return obj


def canonical_json(obj: Any) -> str:
    """Deterministic JSON of a request: the material of cache keys and of in-flight de-duplication."""
    return json.dumps(_canonical(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Completion:
    """One generated text plus accounting."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    cached: bool = False
    error: str | None = None          # set (and text == "") when a counted fallback was used
    meta: dict[str, Any] = field(default_factory=dict)


class LanguageModel(ABC):
    """Batch-first LM interface.

    ``generate(prompts)`` returns one :class:`Completion` per prompt.
    ``score(contexts, candidates)`` returns, for each context i, the summed token log-probability
    of every candidate string ``candidates[i][j]`` given ``contexts[i]`` (padding masked; with
    ``normalize=True`` divided by the candidate's token count).  The context prefix is evaluated
    once per context, not once per candidate.
    """

    backend: str = "base"
    model_id: str = "unknown"

    @abstractmethod
    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_tokens: int = 48,
        temperature: float = 0.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]: ...

    @abstractmethod
    def score(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: bool = False,
    ) -> list[list[float]]: ...

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release resources (processes, sockets)."""

    def interrupt(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Cut short the calls in progress (their retries and backoff waits): the caller is shutting down.

        Called from another thread than the one in the call; calls made afterwards are unaffected.  A call
        in progress still returns (or raises) normally, only sooner.  The default does nothing.
        """

    def io_stats(self) -> dict[str, float]:
        """Counters of this backend's I/O (HTTP requests, retries, errors by kind, truncations ...).

        Wrappers (the cache) merge their inner backend's counters with their own.  Read by
        :meth:`llmguide.llm.service.core.LLMService.lm_metrics`; the default backend has none.
        """
        return {}


def check_score_args(contexts: Sequence[str], candidates: Sequence[Sequence[str]]) -> None:
    """Raise ValueError unless there is one candidate list per context."""
    if len(contexts) != len(candidates):
        raise ValueError(f"{len(contexts)} contexts but {len(candidates)} candidate lists")
