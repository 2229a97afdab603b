"""ONI-Ranking (:class:`ONIRanking`): a Bradley-Terry char-CNN reward model trained on LM preferences over
pairs of the agent's messages, its output normalised and thresholded (:func:`normalize_threshold`), then clipped
at ``clip_min`` (0 by default: with ``threshold`` −0.5 the reward is otherwise negative for most messages, which pays
an agent for ending its own episode early, e.g. walking into lava)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np
import torch

from llmguide.methods.oni.annotator import PairAnnotator
from llmguide.methods.oni.charcnn import MessageRewardNet, pair_rewards
from llmguide.methods.oni.reward import MessageReward, batch_messages
from llmguide.methods.oni.trainer import BackgroundTrainer
from llmguide.rewards.base import TransitionBatch
from llmguide.rewards.normalization import RunningMeanStd
from llmguide.rewards.preference import bradley_terry_loss, preference_accuracy


def _bt_loss(model: torch.nn.Module, batch: list[tuple[str, str, float]]) -> tuple[torch.Tensor, float]:
    """Bradley-Terry loss (2-way softmax form) and accuracy of ``(a, b, P(a preferred))`` pairs."""
    r_first, r_second = pair_rewards(model, [a for a, _, _ in batch], [b for _, b, _ in batch])
    target = torch.tensor([p for _, _, p in batch], dtype=torch.float32)
    loss = bradley_terry_loss(r_first, r_second, target, form="softmax")
    return loss, float(preference_accuracy(r_first, r_second, target))


def normalize_threshold(raw: np.ndarray, normalizer: RunningMeanStd, threshold: float,
                        update: bool = True) -> np.ndarray:
    """``z · 1[z > threshold]`` with ``z = (raw − μ) / σ`` (the normaliser is updated with ``raw`` first)."""
    raw = np.asarray(raw, dtype=np.float64)
    if update and raw.size:
        normalizer.update(raw.reshape(-1))
    z = (raw - normalizer.mean) / np.sqrt(normalizer.var + 1e-8)
    return np.where(z > threshold, z, 0.0)


class ONIRanking(MessageReward):
    """Bradley-Terry reward model on LM preferences over pairs of seen messages (ONI-Ranking).

    Each batch adds its messages to a bounded store of unique messages; ``pairs_per_batch`` random
    pairs of distinct messages (never an identical pair, never a pair already labelled or pending)
    go to the :class:`PairAnnotator`.  The reward reaching the learner is normalised and thresholded
    (:func:`normalize_threshold`), then divided by the episodic count.
    """

    name = "oni_ranking"

    def __init__(self, annotator: PairAnnotator, num_envs: int, *, threshold: float = -0.5,
                 pairs_per_batch: int = 10, max_messages: int = 10_000, min_pairs: int = 1, lr: float = 1e-3,
                 batch_size: int = 256, steps_per_round: int = 32, duty: float = 0.5, background: bool = True,
                 seed: int = 0, clip_min: float | None = 0.0, **kwargs: Any):
        super().__init__(annotator, num_envs, **kwargs)
        torch.manual_seed(seed)
        self.threshold = float(threshold)
        self.clip_min = None if clip_min is None else float(clip_min)   # None: no clipping
        self.pairs_per_batch, self.max_messages, self.min_pairs = int(pairs_per_batch), int(max_messages), int(min_pairs)
        self.store: Counter[str] = Counter()
        self.normalizer = RunningMeanStd()
        self.trainer = BackgroundTrainer(MessageRewardNet(), _bt_loss, lr=lr, batch_size=batch_size,
                                         steps_per_round=steps_per_round, duty=duty, background=background,
                                         seed=seed)
        self._rng = random.Random(seed)
        self._fed: set = set()

    @property
    def ready(self) -> bool:
        snap, trained_on = self.trainer.current()
        return snap is not None and trained_on >= self.min_pairs

    def observe(self, messages: list[str]) -> None:
        self.annotator.poll()
        for m in messages:
            k = self.key(m)
            if k in self.store or len(self.store) < self.max_messages:
                self.store[k] += 1
        keys = list(self.store)
        pairs: list[tuple[str, str]] = []
        if len(keys) <= 64:  # few messages: sample among the pairs not yet asked, without replacement
            fresh = [PairAnnotator.make_pair(a, b) for i, a in enumerate(keys) for b in keys[i + 1:]]
            fresh = [p for p in fresh if not self._asked(p)]
            pairs = self._rng.sample(fresh, min(self.pairs_per_batch, len(fresh)))
        else:
            for _ in range(self.pairs_per_batch * 4):
                if len(pairs) >= self.pairs_per_batch:
                    break
                pair = PairAnnotator.make_pair(*self._rng.sample(keys, 2))
                if not self._asked(pair) and pair not in pairs:
                    pairs.append(pair)
        self.annotator.submit(pairs)
        self._feed()

    def _asked(self, pair: tuple[str, str]) -> bool:
        a = self.annotator
        return pair[0] == pair[1] or pair in a.labels or pair in a.in_flight or pair in a.backlog

    def _feed(self) -> None:
        new = [(a, b, p) for (a, b), p in self.annotator.labels.items() if p is not None and (a, b) not in self._fed]
        self._fed.update((a, b) for a, b, _ in new)
        self.trainer.add(new)

    def raw_rewards(self, messages: list[str]) -> np.ndarray:
        """The reward model's raw output (0 before it has trained on ``min_pairs`` labelled pairs)."""
        snap, trained_on = self.trainer.current()
        if snap is None or trained_on < self.min_pairs:
            return np.full(len(messages), np.nan)
        return snap.rewards([self.key(m) for m in messages]).astype(np.float64)

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        msgs = batch_messages(batch, self.message_key)
        dones = np.asarray(batch.dones, dtype=bool)
        counts = np.stack([self.counter.step(msgs[t], dones[t]) for t in range(dones.shape[0])])
        nonempty = sorted({m for row in msgs for m in row if m})
        self.observe(nonempty)
        raw_unique = self.raw_rewards(nonempty) if nonempty else np.zeros(0)
        if not nonempty or np.isnan(raw_unique).any():
            rewards = np.full(dones.shape, self.pending_default, dtype=np.float64)
            rewards[np.array([[m == "" for m in row] for row in msgs])] = 0.0
        else:
            table = dict(zip(nonempty, raw_unique, strict=True))
            mask = np.array([[m != "" for m in row] for row in msgs])
            raw = np.array([[table.get(m, 0.0) for m in row] for row in msgs], dtype=np.float64)
            shaped = np.zeros_like(raw)
            shaped[mask] = normalize_threshold(raw[mask], self.normalizer, self.threshold)
            rewards = shaped
        if self.clip_min is not None:
            rewards = np.maximum(rewards, self.clip_min)
        rewards = rewards / np.power(counts, self.beta)
        self.last = {"r_int_mean": float(rewards.mean()), "r_int_nonzero": float((rewards != 0).mean()),
                     "unique_messages": float(len(self.store)), "norm/mean": float(self.normalizer.mean),
                     "norm/std": float(np.sqrt(self.normalizer.var))}
        return rewards.astype(np.float32)

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        metrics = super().update(batch)
        self._feed()
        return {**metrics, **self.trainer.metrics()}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "trainer": self.trainer.state_dict(), "store": dict(self.store),
                "normalizer": self.normalizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.trainer.load_state_dict(state["trainer"])
        self.store = Counter(state["store"])
        self.normalizer.load_state_dict(state["normalizer"])
        self._fed = {(a, b) for a, b, _ in self.trainer.data}

    def close(self) -> None:
        self.trainer.close()
