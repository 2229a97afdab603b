"""Behaviour cloning of an :class:`~llmguide.learners.networks.ActorCritic` from recorded steps, with or without
memory: the policy half of the net is trained on the cross-entropy of the demonstrator's action.

The steps are one array per observation key plus ``actions`` and ``first`` (True where an episode, or a recorded
stream, starts), in the order they were played: a feed-forward net learns from single steps, a recurrent one from
chunks of ``seq_len`` consecutive steps, its state zero at each chunk's start and reset where an episode starts
inside it (truncated backpropagation through time, as recurrent PPO trains its core).  Held out: every
``val_every``-th block of ``block`` steps, never trained on; :func:`action_accuracy` replays those blocks in order
(the recurrent state carried through each block) and scores the argmax action.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from llmguide.learners.networks import ActorCritic

ObsFn = Callable[[np.ndarray], dict[str, torch.Tensor]]   # step indices -> the net's observation batch


def held_out(n: int, block: int = 2048, val_every: int = 20) -> np.ndarray:
    """(n,) bool: the held-out steps, every ``val_every``-th block of ``block`` consecutive steps (the blocks
    ``val_every // 2``, ``val_every // 2 + val_every``, ...); blocks shrink so that a short dataset holds out
    about one step in ``val_every`` as well."""
    block = max(1, min(block, n // (2 * val_every)))
    return (np.arange(n) // block) % val_every == val_every // 2


def _chunk_starts(train: np.ndarray, seq_len: int) -> np.ndarray:
    """Every index ``s`` whose ``seq_len`` steps ``s .. s + seq_len - 1`` are all training steps."""
    ok = train.astype(np.int64)
    window = np.convolve(ok, np.ones(seq_len, np.int64), "valid") if len(ok) >= seq_len else np.zeros(0, np.int64)
    return np.flatnonzero(window == seq_len)


def clone(net: ActorCritic, obs_fn: ObsFn, actions: np.ndarray, first: np.ndarray, *, seq_len: int = 1,
          batch_steps: int = 2048, updates: int = 1000, lr: float = 3e-4, seed: int = 0,
          val: np.ndarray | None = None, log_every: int = 100, max_grad_norm: float = 1.0) -> dict[str, Any]:
    """Train ``net``'s policy on ``actions``; returns the loss history and the held-out accuracy at the end.

    ``seq_len`` > 1 needs a recurrent net (chunks of that many steps, ``batch_steps // seq_len`` chunks a batch);
    a feed-forward net takes ``seq_len`` 1 (single steps)."""
    if net.recurrent is None and seq_len != 1:
        raise ValueError("a feed-forward net clones single steps: seq_len=1")
    n = len(actions)
    val = held_out(n) if val is None else val
    starts = _chunk_starts(~val, seq_len)
    if not len(starts):
        raise ValueError(f"no {seq_len}-step chunk of training steps in {n} steps")
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr, eps=1e-5)
    chunks = max(1, batch_steps // seq_len)
    history: list[dict[str, float]] = []
    losses: list[float] = []
    net.train()
    for update in range(1, updates + 1):
        s = rng.choice(starts, size=chunks)
        idx = (s[None, :] + np.arange(seq_len)[:, None]).reshape(-1)   # time-major: T rows of N chunks
        obs = obs_fn(idx)
        if net.recurrent is None:
            logits = net.action_logits(obs)
        else:
            done = torch.as_tensor(first[idx].reshape(seq_len, chunks))
            done[0] = False   # the chunk's zero state is its start
            logits = net.action_logits(obs, net.initial_state(chunks), done.reshape(-1))
        loss = F.cross_entropy(logits, torch.as_tensor(actions[idx], dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), max_grad_norm)
        opt.step()
        losses.append(float(loss.item()))
        if update % log_every == 0 or update == updates:
            history.append({"update": update, "loss": float(np.mean(losses))})
            losses = []
    net.eval()
    return {"history": history, "samples": int(n), "train_steps": int((~val).sum()), "val_steps": int(val.sum()),
            "seq_len": int(seq_len), "updates": int(updates), "batch_steps": int(chunks * seq_len),
            "val_accuracy": action_accuracy(net, obs_fn, actions, first, val)}


@torch.no_grad()
def action_accuracy(net: ActorCritic, obs_fn: ObsFn, actions: np.ndarray, first: np.ndarray, ids: np.ndarray,
                    block: int = 512) -> float | None:
    """Argmax accuracy on the steps where ``ids`` (bool) holds, replayed in order in runs of consecutive steps
    (a recurrent net's state is carried within a run and reset where an episode starts)."""
    where = np.flatnonzero(ids)
    if not len(where):
        return None
    cuts = np.flatnonzero(np.diff(where) != 1) + 1
    correct = 0
    net.eval()
    for run in np.split(where, cuts):
        state = net.initial_state(1)
        for i in range(0, len(run), block):
            part = run[i:i + block]
            done = torch.as_tensor(first[part])
            if i == 0:
                done[0] = False
            greedy, _, _, _, state = net.get_action_and_value(obs_fn(part), state, done, greedy=True)
            correct += int((greedy.numpy() == actions[part]).sum())
    return correct / len(where)
