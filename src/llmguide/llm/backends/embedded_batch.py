"""Many contexts' candidates in one llama.cpp batch, with the constant prompt prefix kept across calls.

:class:`MultiSeqScorer` is the scoring engine of :class:`~llmguide.llm.backends.embedded.EmbeddedLM`.  It owns a
second llama.cpp context on the same model weights, opened with a *unified* KV cache and up to 256
sequences, and scores ``score(contexts, candidates)`` like this:

1. **Prefix cache (sequence 0).**  The longest common token prefix of the call's contexts (the few-shot
   header, the goal vocabulary, ...) stays in sequence 0 after the call.  The next call evaluates only
   what differs from it: for the shipped ELLM template the header is evaluated once per process.
2. **All contexts in one batch.**  Each context's remaining tokens go on their own sequence (the prefix
   is shared by ``seq_cp``, which in a unified cache only tags cells, no copy), in one ``llama_decode``.
3. **All candidates of all contexts in one batch, as a token trie.**  Candidates of a context that start
   with the same tokens ("make wood pickaxe", "make wood sword") share those tokens: a trie node is
   decoded once, tagged with every candidate sequence that passes through it, so the attention of each
   candidate sees exactly ``context + its own tokens``.  A candidate's first token is scored from the
   context's last logits; every further token from the row of the trie node before it.

Calls are chunked to fit ``n_batch`` tokens per decode and 255 sequences per group.  The result equals
scoring ``context + candidate`` one at a time (tested against :meth:`EmbeddedLM.naive_score`).

llama-cpp-python's high-level ``Llama`` runs one sequence only; this uses its low-level
``_internals.LlamaContext`` / ``LlamaBatch`` wrappers and the C functions of ``llama_cpp`` (0.3.x).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _log_z(rows: np.ndarray) -> np.ndarray:
    """Row-wise log-sum-exp of float32 logits (float64 accumulation)."""
    peak = rows.max(axis=1, keepdims=True)
    return peak[:, 0].astype(np.float64) + np.log(np.exp(rows - peak).sum(axis=1, dtype=np.float64))


class MultiSeqScorer:
    """Batched, prefix-caching candidate scorer over a llama.cpp model (not thread-safe: lock outside)."""

    def __init__(self, model: Any, n_vocab: int, n_ctx: int = 4096, n_batch: int = 512, n_threads: int = 2,
                 n_seq_max: int = 256, base_params: Any = None):
        import llama_cpp
        from llama_cpp import _internals

        self._ll = llama_cpp
        n_seq_max = min(int(n_seq_max), int(llama_cpp.llama_max_parallel_sequences()))
        params = llama_cpp.llama_context_default_params()
        if base_params is not None:   # the generating context's settings (flash attention, KV types, ...)
            import ctypes

            ctypes.memmove(ctypes.addressof(params), ctypes.addressof(base_params), ctypes.sizeof(params))
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_seq_max, params.kv_unified, params.swa_full = n_seq_max, True, True
        params.n_threads = params.n_threads_batch = n_threads
        params.no_perf = True
        self.ctx = _internals.LlamaContext(model=model, params=params, verbose=False)
        self.batch = _internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=n_seq_max, verbose=False)
        self.n_vocab, self.n_ctx, self.n_batch, self.n_seq_max = n_vocab, n_ctx, n_batch, n_seq_max
        self.prefix: list[int] = []     # tokens held in sequence 0
        self.stats = {"calls": 0, "decodes": 0, "tokens_decoded": 0, "prefix_tokens_reused": 0}

    def close(self) -> None:
        self.batch.close()
        self.ctx.close()

    # -- low level ------------------------------------------------------------------------------
    def _rm(self, seq: int, p0: int = -1) -> None:
        self._ll.llama_memory_seq_rm(self.ctx.memory, seq, p0, -1)

    def _decode(self, items: list[tuple[int, int, Sequence[int], bool]]) -> list[np.ndarray | None]:
        """Decode ``(token, pos, seq_ids, want_logits)`` items in order (chunked); logits rows per item."""
        out: list[np.ndarray | None] = [None] * len(items)
        b = self.batch.batch
        for start in range(0, len(items), self.n_batch):
            chunk = items[start : start + self.n_batch]
            b.n_tokens = len(chunk)
            for k, (tok, pos, seqs, want) in enumerate(chunk):
                b.token[k], b.pos[k], b.n_seq_id[k], b.logits[k] = tok, pos, len(seqs), bool(want)
                for m, s in enumerate(seqs):
                    b.seq_id[k][m] = s
            self.ctx.decode(self.batch)
            self.stats["decodes"] += 1
            self.stats["tokens_decoded"] += len(chunk)
            for k, (_, _, _, want) in enumerate(chunk):
                if want:
                    ptr = self._ll.llama_get_logits_ith(self.ctx.ctx, k)
                    out[start + k] = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()
        return out

    def _set_prefix(self, target: list[int]) -> None:
        """Make sequence 0 hold ``target`` (reusing what it already holds)."""
        keep = _lcp(self.prefix, target)
        self.stats["prefix_tokens_reused"] += keep
        if keep < len(self.prefix):
            self._rm(0, keep)
        rest = target[keep:]
        if rest:
            self._decode([(t, keep + i, (0,), i == len(rest) - 1) for i, t in enumerate(rest)])
        self.prefix = list(target)

    # -- scoring --------------------------------------------------------------------------------
    def score(self, ctx_tokens: Sequence[Sequence[int]], cand_tokens: Sequence[Sequence[Sequence[int]]],
              normalize: bool = False) -> list[list[float]]:
        """Summed (or mean) log-probs of each candidate's tokens after its context's tokens (BOS included)."""
        self.stats["calls"] += 1
        results: list[list[float]] = []
        # the common prefix of this call (each context keeps >= 1 token of its own for its last logits)
        target = list(ctx_tokens[0][: len(ctx_tokens[0]) - 1])
        for toks in ctx_tokens[1:]:
            target = target[: min(_lcp(target, toks), len(toks) - 1)]
        self._set_prefix(target)
        group: list[int] = []
        seqs = 1
        for k, cands in enumerate(cand_tokens):
            need = 1 + len(cands)
            if group and seqs + need > self.n_seq_max:
                results += self._score_group(group, ctx_tokens, cand_tokens, normalize)
                group, seqs = [], 1
            group.append(k)
            seqs += need
        if group:
            results += self._score_group(group, ctx_tokens, cand_tokens, normalize)
        return results

    def _score_group(self, group: list[int], ctx_tokens: Sequence[Sequence[int]],
                     cand_tokens: Sequence[Sequence[Sequence[int]]], normalize: bool) -> list[list[float]]:
        p = len(self.prefix)
        next_seq = 1
        items: list[tuple[int, int, Sequence[int], bool]] = []
        last_item: dict[int, int] = {}
        # trie of every candidate's tokens but its last, per context; one node per distinct prefix
        nodes: dict[tuple[int, tuple[int, ...]], list[int]] = {}   # (context, token prefix) -> seq ids
        for k in group:
            seqs = [next_seq]   # the context's own sequence, then one per candidate of >= 2 tokens
            next_seq += 1
            for toks in cand_tokens[k]:
                if len(toks) < 2:
                    continue
                q = next_seq
                next_seq += 1
                seqs.append(q)
                for m in range(1, len(toks)):
                    nodes.setdefault((k, tuple(toks[:m])), []).append(q)
            if p:
                for q in seqs:
                    self._ll.llama_memory_seq_cp(self.ctx.memory, 0, q, 0, p)
            toks = ctx_tokens[k]
            for i in range(p, len(toks)):   # the context's own tokens belong to all its sequences
                items.append((toks[i], i, tuple(seqs), i == len(toks) - 1))
            last_item[k] = len(items) - 1
        node_item: dict[tuple[int, tuple[int, ...]], int] = {}
        for (k, pre), qs in sorted(nodes.items(), key=lambda kv: len(kv[0][1])):   # parents before children
            node_item[(k, pre)] = len(items)
            items.append((pre[-1], len(ctx_tokens[k]) + len(pre) - 1, qs, True))
        try:
            rows = self._decode(items)
        finally:
            for s in range(1, next_seq):
                self._rm(s)
        wanted = [i for i, r in enumerate(rows) if r is not None]
        if not wanted:
            return [[] for _ in group]
        matrix = np.stack([rows[i] for i in wanted])
        log_z = dict(zip(wanted, _log_z(matrix), strict=True))
        out = []
        for k in group:
            row = []
            for toks in cand_tokens[k]:
                if not toks:
                    row.append(0.0)
                    continue
                total = 0.0
                for m, tok in enumerate(toks):
                    i = last_item[k] if m == 0 else node_item[(k, tuple(toks[:m]))]
                    total += float(rows[i][tok]) - float(log_z[i])   # type: ignore[index]
                row.append(total / len(toks) if normalize else total)
            out.append(row)
        return out
