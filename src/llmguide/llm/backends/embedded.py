"""Embedded default backend: Gemma 3 270M (GGUF Q4_K_M from PyPI) run in-process by llama-cpp-python.

No key, no server, no download.  ``score`` runs all contexts and all their candidates of one call in
one llama.cpp batch (a unified KV cache with one sequence per context and per candidate, candidates
sharing leading tokens as a trie) and keeps the calls' common prompt prefix evaluated between calls:
see :mod:`llmguide.llm.backends.embedded_batch`.  ``score_sequential`` is the previous one-candidate-at-a-time
path (each context once in the KV cache, then per candidate ``[last context token] + candidate``),
kept as a fallback and for measurement.

Tokenisation boundary: the context is tokenised on its own (with BOS) and every candidate on its own
(no BOS), and the two token lists are concatenated.  The context prefix is therefore identical for all
candidates, and a candidate's tokens never depend on the context.  Gemma's tokenizer adds no dummy
prefix, so put the separating space in the candidate (context ``"Action:"``, candidate ``" go forward"``);
for such boundaries the concatenation equals the joint tokenisation of ``context + candidate``
(tested), which is what an HTTP server scores.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmguide.core.errors import LLMUnavailableError
from llmguide.llm.base import Completion, LanguageModel, check_score_args

# llama.cpp log lines that are no news: the SWA note comes at every context Gemma 3 opens (issue 32)
_QUIET_LOG = (b"using full-size SWA cache",)
_LOG_HOOK: list[Any] = []      # the installed ctypes callback (kept alive while llama.cpp holds it)
_LOADED: set[str] = set()      # models this process loaded (the first load says what it waits for)


def _quiet_llama_log() -> None:
    """Route llama.cpp's log through llama-cpp-python's own printer, less :data:`_QUIET_LOG` lines."""
    if _LOG_HOOK:
        return
    import ctypes

    import llama_cpp
    from llama_cpp import _logger

    default = _logger.llama_log_callback

    @llama_cpp.llama_log_callback
    def hook(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        if text and any(line in text for line in _QUIET_LOG):
            return
        default(level, text, user_data)

    _LOG_HOOK.append(hook)
    llama_cpp.llama_log_set(hook, ctypes.c_void_p(0))


def _log_softmax_gather(logits: np.ndarray, targets: Sequence[int]) -> np.ndarray:
    """Log-probability of ``targets[t]`` under the row ``logits[t]`` (float64, over the whole vocabulary)."""
    rows = logits.astype(np.float64)
    peak = rows.max(axis=1, keepdims=True)
    log_z = peak[:, 0] + np.log(np.exp(rows - peak).sum(axis=1))
    return rows[np.arange(len(targets)), list(targets)] - log_z


def _chat_formatter(llm: Any) -> Any:
    """The GGUF's own chat template as a formatter (None for a base model, whose GGUF has none)."""
    template = (llm.metadata or {}).get("tokenizer.chat_template")
    if not template:
        return None
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    def token_text(token: int) -> str:
        return llm._model.token_get_text(token) if token >= 0 else ""

    eos = token_text(llm.token_eos())
    formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=token_text(llm.token_bos()),
                                    add_generation_prompt=True)
    formatter.stop_text = eos   # generation stops at the end of the assistant's turn
    return formatter


class EmbeddedLM(LanguageModel):
    """In-process llama.cpp model (default: the embedded Gemma 3 270M GGUF).  Thread-safe."""

    backend = "embedded"

    def __init__(self, model_path: str | Path | None = None, n_ctx: int = 2048, n_threads: int = 2, seed: int = 0,
                 batched_score: bool = True, score_n_ctx: int = 4096, model: str | None = None,
                 chat: bool | str = "auto"):
        import llama_cpp

        from llmguide.llm.assets import model_gguf_path

        path = Path(model_path).expanduser() if model_path else model_gguf_path(model)
        if not path.is_file():
            raise FileNotFoundError(f"GGUF model not found: {path}")
        self.model_path = path
        self.model_id = path.stem
        from llmguide.core.provenance import gguf_sha256

        self.cache_identity = f"{path.stem}#{gguf_sha256(path)[:16]}"   # the file's weights, not its name
        self.seed = seed
        self._lock = threading.Lock()
        _quiet_llama_log()
        if str(path) not in _LOADED:
            _LOADED.add(str(path))
            print(f"LM: loading {path.name} ({path.stat().st_size / 2**20:.0f} MiB) with llama.cpp ...",
                  file=sys.stderr, flush=True)
        self._llm = llama_cpp.Llama(
            model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, seed=seed, verbose=False, logits_all=False
        )
        self.n_ctx = n_ctx
        self.n_vocab = self._llm.n_vocab()
        self.n_threads = n_threads
        self.batched_score = batched_score
        self.score_n_ctx = score_n_ctx
        self._scorer: Any = None
        self._score_stats = {"batched_calls": 0, "sequential_calls": 0, "batch_failures": 0}
        self._chat = _chat_formatter(self._llm) if chat in ("auto", True) else None
        if chat is True and self._chat is None:
            raise LLMUnavailableError(f"llm.chat=true but {path.name} has no chat template (a base model)")
        self.chat = self._chat is not None

    def format_prompt(self, prompt: str) -> str:
        """``prompt`` as the model expects it: one user turn through its own chat template, ending where the
        assistant's answer starts (an instruct model), or unchanged (a base model: completion-style)."""
        if self._chat is None:
            return prompt
        return self._chat(messages=[{"role": "user", "content": prompt}]).prompt

    def __repr__(self) -> str:
        return f"EmbeddedLM(model_path={str(self.model_path)!r}, n_ctx={self.n_ctx})"

    # --- tokens ------------------------------------------------------------------------------
    def tokenize(self, text: str, *, bos: bool, special: bool = False) -> list[int]:
        """Token ids of ``text`` (with the BOS token when ``bos``; ``special``: control tokens such as
        ``<|im_start|>`` written in the text are parsed as such, as in a chat-formatted context)."""
        return self._model().tokenize(text.encode("utf-8"), add_bos=bos, special=special)

    def _chat_stops(self) -> list[str]:
        return [self._chat.stop_text] if self._chat is not None and self._chat.stop_text else []

    def _context_tokens(self, context: str) -> list[int]:
        """A scoring context's tokens: chat-formatted for an instruct model (the candidates are then the
        assistant's answer), else as given with BOS."""
        return self.tokenize(self.format_prompt(context), bos=True, special=self._chat is not None)

    def _candidate_tokens(self, candidate: str) -> list[int]:
        """A candidate's tokens; an instruct model's answer starts the assistant turn, so no leading space."""
        return self.tokenize(candidate.lstrip() if self._chat is not None else candidate, bos=False)

    def _model(self) -> Any:
        """The llama.cpp model; a clear error (a counted fallback in the service) once closed."""
        llm = self._llm
        if llm is None:
            raise LLMUnavailableError("the embedded LM was closed")
        return llm

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
        """One completion per prompt (greedy at ``temperature=0``)."""
        out = []
        stops = [*(stop or []), *self._chat_stops()]
        for prompt in prompts:
            with self._lock:
                llm = self._model()
                llm._requires_eval = True   # logits may come from a scoring batch: re-decode one token
                res = llm.create_completion(
                    self.format_prompt(prompt), max_tokens=max_tokens, temperature=temperature,
                    stop=stops or None, seed=self.seed if seed is None else seed,
                )
            choice, usage = res["choices"][0], res["usage"]
            out.append(Completion(
                text=choice["text"], prompt_tokens=usage["prompt_tokens"],
                completion_tokens=usage["completion_tokens"], finish_reason=choice["finish_reason"],
            ))
        return out

    # --- scoring -------------------------------------------------------------------------------
    def _keep_prefix(self, tokens: Sequence[int]) -> None:
        """Make the KV cache hold exactly ``tokens``, reusing the longest prefix already evaluated."""
        llm = self._model()
        common = 0
        for a, b in zip(llm.input_ids[: llm.n_tokens], tokens, strict=False):
            if a != b:
                break
            common += 1
        if common < llm.n_tokens and not llm._ctx.kv_cache_seq_rm(-1, common, -1):
            llm.reset()
            common = 0
        llm.n_tokens = common
        if common < len(tokens):
            llm.eval(list(tokens[common:]))

    def _decode(self, tokens: Sequence[int], n_out: int) -> np.ndarray:
        """Append ``tokens`` to the KV cache; return the logits at their last ``n_out`` positions."""
        llm = self._llm
        llm._ctx.kv_cache_seq_rm(-1, llm.n_tokens, -1)
        first_out = len(tokens) - n_out
        rows = []
        for i in range(0, len(tokens), llm.n_batch):
            chunk = list(tokens[i : i + llm.n_batch])
            flags = [i + k >= first_out for k in range(len(chunk))]
            llm._batch.set_batch(batch=chunk, n_past=llm.n_tokens, logits_all=False)
            for k, flag in enumerate(flags):
                llm._batch.batch.logits[k] = flag
            llm._batch.batch.logits[len(chunk) - 1] = True   # llama.cpp wants the last one anyway
            llm._ctx.decode(llm._batch)
            n_rows = sum(flags[:-1]) + 1
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_rows * self.n_vocab,))
            logits = logits.reshape(n_rows, self.n_vocab)
            if not flags[-1]:
                logits = logits[:-1]
            rows.append(logits.copy())
            llm.input_ids[llm.n_tokens : llm.n_tokens + len(chunk)] = chunk
            llm.n_tokens += len(chunk)
        llm._requires_eval = True
        return np.concatenate(rows)

    def _check_length(self, n_context: int, n_candidate: int) -> None:
        if n_context + n_candidate > self.n_ctx:
            raise ValueError(
                f"context ({n_context} tokens) + candidate ({n_candidate} tokens) exceed n_ctx={self.n_ctx}"
            )

    def score(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: bool = False,
    ) -> list[list[float]]:
        """Summed candidate token log-probs given each context: one batched llama.cpp pass (see module doc)."""
        check_score_args(contexts, candidates)
        if not self.batched_score or not contexts:
            return self.score_sequential(contexts, candidates, normalize=normalize)
        ctx_tokens = [self._context_tokens(c) for c in contexts]
        cand_tokens = [[self._candidate_tokens(c) for c in cands] for cands in candidates]
        for ctx, cands in zip(ctx_tokens, cand_tokens, strict=True):
            self._check_length(len(ctx), max((len(t) for t in cands), default=0))
        fits = all(len(ctx) + sum(map(len, cands)) + 1 < self.score_n_ctx // 2 and len(cands) < 250
                   for ctx, cands in zip(ctx_tokens, cand_tokens, strict=True))
        if fits:
            with self._lock:
                self._model()
                try:
                    if self._scorer is None:
                        from llmguide.llm.backends.embedded_batch import MultiSeqScorer

                        self._scorer = MultiSeqScorer(self._llm._model, self.n_vocab, n_ctx=self.score_n_ctx,
                                                      n_threads=self.n_threads,
                                                      base_params=self._llm.context_params)
                    out = self._scorer.score(ctx_tokens, cand_tokens, normalize=normalize)
                    self._score_stats["batched_calls"] += 1
                    return out
                except RuntimeError:   # e.g. no KV slot for an unusually large call: the sequential path
                    self._score_stats["batch_failures"] += 1
                    self._scorer.prefix = []
                    self._scorer.ctx.kv_cache_clear()
        return self.score_sequential(contexts, candidates, normalize=normalize)

    def score_sequential(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: bool = False,
    ) -> list[list[float]]:
        """Summed candidate token log-probs given each context; the context is evaluated once, candidates
        one at a time (the path before batching; used when a call does not fit the batched scorer)."""
        check_score_args(contexts, candidates)
        self._score_stats["sequential_calls"] += 1
        results = []
        for context, cands in zip(contexts, candidates, strict=True):
            ctx_tokens = self._context_tokens(context)
            cand_tokens = [self._candidate_tokens(c) for c in cands]
            row = []
            with self._lock:
                for toks in cand_tokens:
                    if not toks:
                        row.append(0.0)
                        continue
                    self._check_length(len(ctx_tokens), len(toks))
                    self._keep_prefix(ctx_tokens[:-1])
                    logits = self._decode([ctx_tokens[-1], *toks[:-1]], n_out=len(toks))
                    total = float(_log_softmax_gather(logits, toks).sum())
                    row.append(total / len(toks) if normalize else total)
            results.append(row)
        return results

    def naive_score(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: bool = False,
    ) -> list[list[float]]:
        """Reference scorer: one full forward of ``context + candidate`` tokens per candidate, no reuse."""
        results = []
        for context, cands in zip(contexts, candidates, strict=True):
            ctx_tokens = self._context_tokens(context)
            row = []
            for cand in cands:
                toks = self._candidate_tokens(cand)
                if not toks:
                    row.append(0.0)
                    continue
                self._check_length(len(ctx_tokens), len(toks))
                with self._lock:
                    llm = self._model()
                    llm.reset()
                    llm._ctx.kv_cache_clear()
                    logits = self._decode([*ctx_tokens, *toks[:-1]], n_out=len(toks))
                total = float(_log_softmax_gather(logits, toks).sum())
                row.append(total / len(toks) if normalize else total)
            results.append(row)
        return results

    def io_stats(self) -> dict[str, float]:
        """Scoring counters: batched / sequential calls, llama.cpp decodes, tokens decoded, prefix tokens reused."""
        out = {k: float(v) for k, v in self._score_stats.items()}
        if self._scorer is not None:
            out.update({f"score_{k}": float(v) for k, v in self._scorer.stats.items()})
        return out

    def close(self) -> None:
        """Free the llama.cpp model."""
        with self._lock:
            if self._scorer is not None:
                self._scorer.close()
                self._scorer = None
            if self._llm is not None:
                self._llm.close()
                self._llm = None  # type: ignore[assignment]
