"""Any OpenAI-compatible server (vLLM, SGLang, llama.cpp server, Ollama, FastChat, OpenAI, Azure)
through the official ``openai`` SDK, with N concurrent requests.

The API key is read from the environment variable named by ``api_key_env`` at every call and sent as
the bearer token of that request; it is never stored on the object, in config or in logs.

``score`` asks the completions endpoint to echo the prompt ``context + candidate`` with its token
log-probs (``echo=True, logprobs=1, max_tokens=1``) and sums the log-probs of the tokens whose text
offset lies inside the candidate (a token straddling the boundary counts as a candidate token).  The
server tokenises the joint string, so keep the boundary clean (candidate starting with a space).
Servers keep the context in their prefix cache between candidates (llama.cpp slot reuse, vLLM
automatic prefix caching); the llama.cpp server needs ``--logits_all true`` for prompt log-probs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import openai

from llmguide.core.errors import LLMUnavailableError
from llmguide.llm.base import Completion, LanguageModel, check_score_args

T = TypeVar("T")


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
    ):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.base_url = base_url
        self.model_id = model
        self.api_key_env = api_key_env
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.chat = chat
        # The client holds a placeholder; the real key goes into each request's Authorization header.
        self._client = openai.OpenAI(base_url=base_url, api_key="EMPTY", timeout=timeout, max_retries=max_retries)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="llmguide-http")

    def __repr__(self) -> str:
        return (f"HTTPLM(base_url={self.base_url!r}, model={self.model_id!r}, api_key_env={self.api_key_env!r}, "
                f"concurrency={self.concurrency}, chat={self.chat})")

    # --- plumbing ------------------------------------------------------------------------------
    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {os.environ.get(self.api_key_env) or 'EMPTY'}"}

    def _call(self, fn: Callable[..., T], **kwargs: Any) -> T:
        """One request; SDK errors (after the SDK's own retries) become LLMUnavailableError."""
        try:
            return fn(model=self.model_id, extra_headers=self._auth(), **kwargs)
        except openai.APIConnectionError as err:
            raise LLMUnavailableError(
                f"cannot reach LM server {self.base_url} (model {self.model_id!r}) after "
                f"{self.max_retries} retries: {type(err).__name__}: {err}"
            ) from err
        except openai.APIStatusError as err:
            raise LLMUnavailableError(
                f"LM server {self.base_url} (model {self.model_id!r}) answered HTTP {err.status_code}: {err.message}"
            ) from err
        except openai.APIError as err:
            raise LLMUnavailableError(f"LM server {self.base_url} (model {self.model_id!r}): {err}") from err

    def _map(self, fn: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
        """``fn`` over ``items`` with up to ``concurrency`` in flight, results in input order."""
        if len(items) <= 1:
            return [fn(x) for x in items]
        return list(self._pool.map(fn, items))

    # --- generation ----------------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_tokens: int = 48,
        temperature: float = 0.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """One completion per prompt via the completions endpoint (chat endpoint when ``chat=True``)."""
        params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature}
        if stop:
            params["stop"] = list(stop)
        if seed is not None:
            params["seed"] = seed

        def one(prompt: str) -> Completion:
            if self.chat:
                res = self._call(self._client.chat.completions.create,
                                 messages=[{"role": "user", "content": prompt}], **params)
                choice = res.choices[0]
                text = choice.message.content or ""
            else:
                res = self._call(self._client.completions.create, prompt=prompt, **params)
                choice = res.choices[0]
                text = choice.text or ""
            usage = res.usage
            return Completion(
                text=text,
                prompt_tokens=usage.prompt_tokens if usage else 0,
                completion_tokens=usage.completion_tokens if usage else 0,
                finish_reason=choice.finish_reason,
            )

        return self._map(one, list(prompts))

    # --- scoring -------------------------------------------------------------------------------
    def _score_pair(self, pair: tuple[str, str]) -> tuple[float, int]:
        """(summed log-prob, token count) of the candidate given the context, from echoed prompt log-probs."""
        context, candidate = pair
        if not candidate:
            return 0.0, 0
        if not context:
            raise ValueError("HTTP scoring needs a non-empty context (the first prompt token has no log-prob)")
        res = self._call(self._client.completions.create, prompt=context + candidate, echo=True, logprobs=1,
                         max_tokens=1, temperature=0.0)
        lp = res.choices[0].logprobs if res.choices else None
        if lp is None or not lp.token_logprobs or not lp.text_offset:
            raise LLMUnavailableError(
                f"LM server {self.base_url} (model {self.model_id!r}) returned no prompt log-probs for "
                "echo=True, logprobs=1; scoring needs a server that returns them (llama.cpp server: "
                "--logits_all true; vLLM: completions with echo)"
            )
        start, end = len(context), len(context) + len(candidate)
        total, count = 0.0, 0
        for i, (tok, logp, offset) in enumerate(zip(lp.tokens, lp.token_logprobs, lp.text_offset, strict=False)):
            tok_end = lp.text_offset[i + 1] if i + 1 < len(lp.text_offset) else offset + len(tok)
            if tok_end <= start or offset >= end:
                continue
            if logp is None:
                raise LLMUnavailableError(f"LM server {self.base_url} gave no log-prob for candidate token {tok!r}")
            total += logp
            count += 1
        if count == 0:
            raise LLMUnavailableError(
                f"LM server {self.base_url} did not echo the prompt (no token inside the candidate span)"
            )
        return total, count

    def score(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: bool = False,
    ) -> list[list[float]]:
        """Summed candidate token log-probs from the server's echoed prompt log-probs."""
        check_score_args(contexts, candidates)
        pairs = [(ctx, cand) for ctx, cands in zip(contexts, candidates, strict=True) for cand in cands]
        flat = self._map(self._score_pair, pairs)
        out, k = [], 0
        for cands in candidates:
            row = []
            for _ in cands:
                total, count = flat[k]
                row.append(total / count if normalize and count else total)
                k += 1
            out.append(row)
        return out

    def close(self) -> None:
        """Stop the worker threads and close the HTTP connection pool."""
        self._pool.shutdown(wait=True)
        self._client.close()
