"""The one language-model interface every backend implements (batch-first)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


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


def check_score_args(contexts: Sequence[str], candidates: Sequence[Sequence[str]]) -> None:
    """Raise ValueError unless there is one candidate list per context."""
    if len(contexts) != len(candidates):
        raise ValueError(f"{len(contexts)} contexts but {len(candidates)} candidate lists")
