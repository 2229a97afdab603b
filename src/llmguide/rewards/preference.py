"""Bradley-Terry preference fitting: a scorer ``r`` trained on labelled pairs with
``P(first preferred) = sigmoid(r(first) - r(second))``.

What a pair is (two segments, two messages) and how its sides are scored stays with the caller.  Pairs
are named by their index; the caller gives ``score(idx) -> (r_first, r_second)`` for a batch of indices
and ``targets``, the label ``P(first preferred)`` of every pair (1, 0, or 0.5 for a tie) as a float
tensor indexed the same way.  Ties are soft targets; a caller that drops them leaves them out of the
pairs it passes.

- :func:`bradley_terry_loss`: the negative log-likelihood of a batch;
- :func:`preference_accuracy`: the share of decided pairs (label != 0.5) whose preferred side scores higher;
- :func:`fit_bradley_terry`: epochs of shuffled minibatches with gradient clipping, an evaluation on
  held-out pairs after each epoch, and optionally the best held-out epoch kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

Form = Literal["sigmoid", "softmax"]
PairScorer = Callable[[Any], tuple[torch.Tensor, torch.Tensor]]   # a batch of pair indices -> (r_first, r_second)


def bradley_terry_loss(r_first: torch.Tensor, r_second: torch.Tensor, p_first: torch.Tensor,
                       form: Form = "sigmoid") -> torch.Tensor:
    """Mean negative log-likelihood of the labels ``p_first`` under ``sigmoid(r_first - r_second)``.

    ``form`` only chooses how it is computed: ``"sigmoid"`` as a binary cross-entropy on the score
    difference, ``"softmax"`` as a soft 2-way cross-entropy on ``(r_first, r_second)``.  The two are the
    same function and differ in rounding only; each caller keeps the one it was fitted with, so that a
    seed still gives the same weights.
    """
    if form == "sigmoid":
        return nn.functional.binary_cross_entropy_with_logits(r_first - r_second, p_first)
    if form == "softmax":
        logits = torch.stack([r_first, r_second], dim=1)
        target = torch.stack([p_first, 1.0 - p_first], dim=1)
        return -(target * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
    raise ValueError(f"Bradley-Terry loss form must be 'sigmoid' or 'softmax', got {form!r}")


def preference_accuracy(r_first: torch.Tensor, r_second: torch.Tensor, p_first: torch.Tensor) -> torch.Tensor:
    """Share of the decided pairs (``p_first != 0.5``) where the preferred side scores strictly higher
    (equal scores count as the second side preferred); nan when no pair is decided."""
    decided = p_first != 0.5
    correct = (r_first > r_second) == (p_first > 0.5)
    return correct[decided].float().mean() if decided.any() else torch.tensor(float("nan"))


def decided_accuracy(score: PairScorer, targets: torch.Tensor, idx: Sequence[int] | np.ndarray) -> float:
    """:func:`preference_accuracy` over the pairs ``idx``, scoring only the decided ones (no gradient)."""
    decided = np.asarray([i for i in idx if float(targets[i]) != 0.5], dtype=np.int64)
    if len(decided) == 0:
        return float("nan")
    with torch.no_grad():
        r_first, r_second = score(decided)
    return float(preference_accuracy(r_first, r_second, targets[decided]))


def fit_bradley_terry(model: nn.Module, score: PairScorer, targets: torch.Tensor, train: Any,
                      holdout: Sequence[int] | np.ndarray = (), *, optimizer: torch.optim.Optimizer, epochs: int,
                      batch_size: int, shuffle: Callable[[Any], None], clip_norm: float, form: Form = "sigmoid",
                      holdout_loss: bool = True, keep_best: bool = False) -> list[dict[str, Any]]:
    """Fit ``model`` (whose parameters ``optimizer`` holds and ``score`` uses) on the pairs ``train``.

    Each epoch ``shuffle(train)`` reorders the training indices in place (the caller's generator, so its
    seed fixes the order; ``train`` is a list or a 1-D array), then minibatches of ``batch_size`` take a
    gradient step on :func:`bradley_terry_loss` with the gradient norm clipped to ``clip_norm``.  After
    each epoch the pairs ``holdout`` (if any) are evaluated without gradient: loss and accuracy from one
    scoring of all of them (``holdout_loss``), or the accuracy alone, scoring only the decided pairs.
    ``keep_best``: the model ends with the weights of the epoch of best held-out accuracy (the first
    epoch's, unless a later one is finite and higher).  The model is left in eval mode.

    Returns one record per epoch: ``epoch``, ``loss`` and ``accuracy`` of its last minibatch, and
    ``holdout_loss`` (when measured) and ``holdout_accuracy`` when ``holdout`` has pairs.
    """
    if keep_best and not len(holdout):
        raise ValueError("keep_best needs held-out pairs to choose the epoch")
    history: list[dict[str, Any]] = []
    best, best_state = -1.0, None
    for epoch in range(epochs):
        shuffle(train)
        model.train()
        record: dict[str, Any] = {"epoch": epoch, "loss": float("nan"), "accuracy": float("nan")}
        for start in range(0, len(train), batch_size):
            idx = train[start:start + batch_size]
            r_first, r_second = score(idx)
            loss = bradley_terry_loss(r_first, r_second, targets[idx], form)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            optimizer.step()
            record["loss"] = float(loss.detach())
            record["accuracy"] = float(preference_accuracy(r_first.detach(), r_second.detach(), targets[idx]))
        if len(holdout):
            model.eval()
            record.update(_evaluate(score, targets, holdout, form) if holdout_loss
                          else {"holdout_accuracy": decided_accuracy(score, targets, holdout)})
        history.append(record)
        if keep_best:
            acc = record["holdout_accuracy"]
            if best_state is None or (math.isfinite(acc) and acc > best):
                best = acc if math.isfinite(acc) else best
                best_state = {k: v.clone() for k, v in model.state_dict().items()}
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return history


def _evaluate(score: PairScorer, targets: torch.Tensor, idx: Sequence[int] | np.ndarray,
              form: Form) -> dict[str, float]:
    """Loss over every pair of ``idx`` and accuracy over its decided ones, from one scoring (no gradient)."""
    with torch.no_grad():
        r_first, r_second = score(idx)
        target = targets[idx]
        loss = bradley_terry_loss(r_first, r_second, target, form)
        return {"holdout_loss": float(loss), "holdout_accuracy": float(preference_accuracy(r_first, r_second, target))}


__all__ = ["Form", "PairScorer", "bradley_terry_loss", "decided_accuracy", "fit_bradley_terry",
           "preference_accuracy"]
