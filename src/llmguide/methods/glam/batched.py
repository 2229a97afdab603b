"""Batched action scoring for GLAM on a causal :class:`~llmguide.llm.backends.hf.HFLM`: several prompts per forward.

:meth:`HFLM.score_with_hidden` encodes one context at a time.  :func:`score_with_hidden` here encodes
``batch`` contexts in one left-padded forward (explicit position ids, so each context sees the positions
it would alone), which gives the value head's context states and every candidate's first-token log-prob;
then one more forward runs every multi-token candidate of every context on top of the repeated cache
(the shared prefix is encoded once).  Same log-probs as the sequential path (float32: ~1e-5).
Seq2seq models and ``batch <= 1`` fall back to :meth:`HFLM.score_with_hidden`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch


def repeat_rows(past: Any, counts: torch.Tensor) -> Any:
    """A copy of a batched key/value cache with row ``i`` repeated ``counts[i]`` times (``past`` untouched)."""
    cache = copy.copy(past)
    cache.layers = [copy.copy(layer) for layer in past.layers]
    for layer in cache.layers:
        for name in ("keys", "values"):
            value = getattr(layer, name, None)
            if isinstance(value, torch.Tensor) and value.numel():
                setattr(layer, name, value.repeat_interleave(counts, dim=0))
    return cache


def _score_chunk(lm: Any, ctx_ids: list[list[int]], cand_ids: list[list[list[int]]]):
    n, dev = len(ctx_ids), lm.device
    width = max(map(len, ctx_ids))
    inputs = torch.full((n, width), lm.pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, ids in enumerate(ctx_ids):
        inputs[i, width - len(ids):] = torch.tensor(ids)
        mask[i, width - len(ids):] = 1
    inputs, mask = inputs.to(dev), mask.to(dev)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    res = lm.model(inputs, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                   output_hidden_states=True)
    hidden = res.hidden_states[-1][:, -1]
    first = torch.log_softmax(res.logits[:, -1].float(), dim=-1)
    heads = torch.tensor([[c[0] if c else 0 for c in cands] for cands in cand_ids], device=dev)
    real = torch.tensor([[1.0 if c else 0.0 for c in cands] for cands in cand_ids], device=dev)
    scores = first.gather(1, heads) * real                                   # (n, A)
    longer = [(i, j) for i, cands in enumerate(cand_ids) for j, c in enumerate(cands) if len(c) > 1]
    if longer:
        cand_in, targets, cand_mask = lm._shifted_batch([cand_ids[i][j] for i, j in longer])
        owner = torch.tensor([i for i, _ in longer], device=dev)
        cache = repeat_rows(res.past_key_values, torch.bincount(owner, minlength=n))
        lengths = torch.tensor([len(c) for c in ctx_ids], device=dev)[owner]
        cand_pos = lengths[:, None] + torch.arange(cand_in.shape[1], device=dev)[None, :]
        logits = lm.model(cand_in, attention_mask=torch.cat([mask[owner], cand_mask], 1), position_ids=cand_pos,
                          past_key_values=cache, use_cache=True).logits
        sums = (lm._gather(logits, targets) * cand_mask).sum(1)
        rows = torch.tensor([i for i, _ in longer], device=dev)
        cols = torch.tensor([j for _, j in longer], device=dev)
        scores = scores.index_put((rows, cols), sums, accumulate=True)
    return scores, hidden


def score_with_hidden(lm: Any, contexts: Sequence[str], candidates: Sequence[Sequence[str]], *,
                      normalize: bool = False, batch: int = 8) -> tuple[list[torch.Tensor], torch.Tensor]:
    """:meth:`HFLM.score_with_hidden`, ``batch`` contexts per forward (see the module doc)."""
    if lm.is_seq2seq or batch <= 1 or not contexts:
        return lm.score_with_hidden(contexts, candidates, normalize=normalize)
    if len(contexts) != len(candidates):
        raise ValueError(f"{len(contexts)} contexts but {len(candidates)} candidate lists")
    scores: list[torch.Tensor] = []
    hidden = []
    with lm._lock, torch.set_grad_enabled(lm.trainable and torch.is_grad_enabled()):
        for start in range(0, len(contexts), batch):
            ctx_ids = [lm._context_ids(c) for c in contexts[start:start + batch]]
            cand_ids = [[lm._candidate_ids(c) for c in cands] for cands in candidates[start:start + batch]]
            rows, h = _score_chunk(lm, ctx_ids, cand_ids)
            for row, ids in zip(rows, cand_ids, strict=True):
                if normalize:
                    row = row / torch.tensor([max(len(c), 1) for c in ids], device=row.device, dtype=row.dtype)
                scores.append(row)
            hidden.append(h)
    return scores, torch.cat(hidden)
