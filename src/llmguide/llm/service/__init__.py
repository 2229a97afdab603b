"""The asynchronous LM service of the training loops (:mod:`.core`): its request queue (:mod:`.queue`), the
retries and circuit breaker around backend calls (:mod:`.resilience`) and its ``lm/*`` metrics (:mod:`.metrics`)."""

from llmguide.llm.service.core import LLMService, gather, poll

__all__ = ["LLMService", "gather", "poll"]
