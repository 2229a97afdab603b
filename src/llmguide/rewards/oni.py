"""ONI intrinsic rewards from LM feedback on the agent's own messages (Zheng et al. 2024).

Three variants share one skeleton (:class:`MessageReward`): read the transition's message
(``info["caption"]``), ask the :mod:`~llmguide.rewards.oni_annotator` for a label without ever
waiting, turn labels into a reward, divide by the episodic count of the exact message ``1 / n^β``.

- :class:`ONIRetrieval`: the label table (1 helpful / 0 not); ``pending_default`` while pending.
- :class:`ONIClassification`: a char-CNN classifier trained online in a background thread on the
  labels; it is *not used before it has trained on* ``min_labels`` labels (the reference used a
  randomly initialised classifier); until then the module behaves like Retrieval.
- :class:`ONIRanking`: a Bradley-Terry char-CNN trained on LM preferences over message pairs; the
  reward that reaches the learner is ``z · 1[z > threshold]`` with ``z = (r − μ) / σ`` from a running
  normaliser (the reference computed this and then handed the *raw* output to the policy).

The empty message gets no reward and is never annotated.  ``compute`` advances the episodic
counts, so call it exactly once per batch (the PPO learner does).
"""

from __future__ import annotations

import copy
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from llmguide.rewards.base import RewardModule, TransitionBatch
from llmguide.rewards.charcnn import (
    MessageClassifier,
    MessageRewardNet,
    bradley_terry_loss,
    encode_messages,
)
from llmguide.rewards.normalization import RunningMeanStd
from llmguide.rewards.oni_annotator import Annotator, PairAnnotator, canonicalize_message

log = logging.getLogger(__name__)


def batch_messages(batch: TransitionBatch) -> list[list[str]]:
    """The T×N message texts (``info["caption"]``) of a batch; a clear error when infos are missing."""
    T, N = np.asarray(batch.dones).shape[:2]
    if len(batch.infos) != T or any(len(row) != N for row in batch.infos):
        raise ValueError(f"ONI rewards need batch.infos as a {T}×{N} list of per-env info dicts with 'caption'")
    return [[str(info.get("caption") or "") for info in row] for row in batch.infos]


class EpisodicCounter:
    """How often each exact message has appeared in the current episode of each env (``scope='episode'``),
    or over the whole run (``scope='global'``), including the current occurrence."""

    def __init__(self, num_envs: int, scope: str = "episode"):
        if scope not in ("episode", "global"):
            raise ValueError(f"count scope must be 'episode' or 'global', got {scope!r}")
        self.scope = scope
        self.counts: list[Counter[str]] = [Counter() for _ in range(num_envs)]
        self.global_counts: Counter[str] = Counter()

    def step(self, messages: Sequence[str], dones: Sequence[bool]) -> np.ndarray:
        """Count one time step of N envs; episode counts reset after a done."""
        out = np.zeros(len(messages), dtype=np.float64)
        for n, msg in enumerate(messages):
            if self.scope == "global":
                self.global_counts[msg] += 1
                out[n] = self.global_counts[msg]
            else:
                self.counts[n][msg] += 1
                out[n] = self.counts[n][msg]
            if dones[n]:
                self.counts[n].clear()
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"counts": [dict(c) for c in self.counts], "global": dict(self.global_counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counts = [Counter(c) for c in state["counts"]]
        self.global_counts = Counter(state.get("global", {}))


class MessageReward(RewardModule):
    """Message → label-derived reward ÷ n_episode(message)^β.  Subclasses implement :meth:`raw_rewards`."""

    name = "oni"

    def __init__(self, annotator: Annotator, num_envs: int, *, beta: float = 3.0, count_scope: str = "episode",
                 pending_default: float = 0.0, canonicalize: bool = False):
        self.annotator = annotator
        self.beta = float(beta)
        self.pending_default = float(pending_default)
        self.canonicalize = bool(canonicalize)
        self.counter = EpisodicCounter(num_envs, count_scope)
        self.last: dict[str, float] = {}

    def key(self, message: str) -> str:
        """The label-table key of a message (canonical form when ``canonicalize``)."""
        return canonicalize_message(message) if self.canonicalize else message

    def raw_rewards(self, messages: list[str]) -> np.ndarray:
        """Reward before the count division, one per message (each non-empty)."""
        raise NotImplementedError

    def observe(self, messages: list[str]) -> None:
        """Hand the batch's messages to the annotator (non-blocking)."""
        self.annotator.poll()
        self.annotator.submit(dict.fromkeys(self.key(m) for m in messages))

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        msgs = batch_messages(batch)
        dones = np.asarray(batch.dones, dtype=bool)
        T, N = dones.shape
        counts = np.stack([self.counter.step(msgs[t], dones[t]) for t in range(T)])
        flat = [m for row in msgs for m in row]
        nonempty = sorted({m for m in flat if m})
        self.observe(nonempty)
        table = dict(zip(nonempty, self.raw_rewards(nonempty), strict=True)) if nonempty else {}
        raw = np.array([[table.get(m, 0.0) for m in row] for row in msgs], dtype=np.float64)
        rewards = raw / np.power(counts, self.beta)
        self.last = {"r_int_mean": float(rewards.mean()), "r_int_nonzero": float((rewards != 0).mean()),
                     "unique_messages": float(len(nonempty))}
        return rewards.astype(np.float32)

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        self.annotator.poll()
        return {**self.last, **{f"annot/{k}": v for k, v in self.annotator.metrics().items()}}

    def state_dict(self) -> dict[str, Any]:
        return {"annotator": self.annotator.state_dict(), "counter": self.counter.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.annotator.load_state_dict(state["annotator"])
        self.counter.load_state_dict(state["counter"])

    def close(self) -> None:
        """Stop background work (nothing for Retrieval)."""


class ONIRetrieval(MessageReward):
    """r_int = LM label of the message (1/0); ``pending_default`` while the label is pending."""

    name = "oni_retrieval"

    def raw_rewards(self, messages: list[str]) -> np.ndarray:
        out = np.empty(len(messages), dtype=np.float64)
        for i, m in enumerate(messages):
            label = self.annotator.get(self.key(m))
            out[i] = self.pending_default if label is None else label
        return out


class BackgroundTrainer:
    """Trains ``model`` on a growing labelled dataset in a daemon thread and publishes snapshots.

    The learner only ever reads :attr:`snapshot` (a frozen copy swapped under a lock), so reward
    inference never waits for a gradient step.  ``steps_per_round`` gradient steps run each time
    the dataset grows; ``duty`` ≤ 1 throttles the thread to that fraction of one core.
    """

    def __init__(self, model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module, list], tuple[torch.Tensor, Any]],
                 *, lr: float = 1e-3, batch_size: int = 256, steps_per_round: int = 32, duty: float = 0.5,
                 background: bool = True, seed: int = 0):
        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.batch_size, self.steps_per_round = int(batch_size), int(steps_per_round)
        self.duty = float(duty)
        self.data: list = []
        self.trained_on = 0            # dataset size at the last published snapshot
        self.snapshot: torch.nn.Module | None = None
        self.steps = 0
        self.last_loss = float("nan")
        self.last_acc = float("nan")
        self._rng = random.Random(seed)
        self._lock = threading.Lock()       # dataset
        self._snap_lock = threading.Lock()  # snapshot swap
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._loop, name="oni-reward-trainer", daemon=True)
            self._thread.start()

    def add(self, examples: Sequence) -> None:
        if not examples:
            return
        with self._lock:
            self.data.extend(examples)
        self._wake.set()

    def train_round(self, steps: int | None = None) -> None:
        """Run gradient steps on the current dataset and publish a snapshot (called by the thread or directly)."""
        with self._lock:
            data = list(self.data)
        if not data:
            return
        self.model.train()
        for _ in range(steps or self.steps_per_round):
            start = time.perf_counter()
            batch = [data[self._rng.randrange(len(data))] for _ in range(min(self.batch_size, len(data)))]
            loss, acc = self.loss_fn(self.model, batch)
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 10.0)
            self.optimizer.step()
            self.steps += 1
            self.last_loss, self.last_acc = float(loss.item()), float(acc)
            if self._thread is not None and self.duty < 1.0:
                time.sleep((time.perf_counter() - start) * (1.0 / self.duty - 1.0))
            if self._stop.is_set():
                break
        snap = copy.deepcopy(self.model).eval()
        with self._snap_lock:
            self.snapshot, self.trained_on = snap, len(data)

    def current(self) -> tuple[torch.nn.Module | None, int]:
        with self._snap_lock:
            return self.snapshot, self.trained_on

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            if self._stop.is_set():
                break
            if len(self.data) > self.trained_on:
                try:
                    self.train_round()
                except Exception:  # keep the learner alive; the failure is logged with its traceback
                    log.exception("background reward-model training failed")

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def state_dict(self) -> dict[str, Any]:
        snap, trained_on = self.current()
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "snapshot": snap.state_dict() if snap is not None else None, "trained_on": trained_on,
                "data": list(self.data), "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        with self._lock:
            self.data = list(state.get("data", []))
        self.steps = int(state.get("steps", 0))
        snap = None
        if state.get("snapshot") is not None:
            snap = copy.deepcopy(self.model).eval()
            snap.load_state_dict(state["snapshot"])
        with self._snap_lock:
            self.snapshot, self.trained_on = snap, int(state.get("trained_on", 0))


def _classifier_loss(model: torch.nn.Module, batch: list[tuple[str, float]]) -> tuple[torch.Tensor, float]:
    msgs = [m for m, _ in batch]
    target = torch.tensor([int(y > 0.5) for _, y in batch])
    logits = model(encode_messages(msgs))
    acc = float((logits.argmax(-1) == target).float().mean())
    return torch.nn.functional.cross_entropy(logits, target), acc


class ONIClassification(MessageReward):
    """r_int = 1[P_classifier(helpful | message) > threshold], once the classifier has seen labels."""

    name = "oni_classification"

    def __init__(self, annotator: Annotator, num_envs: int, *, threshold: float = 0.5, min_labels: int = 1,
                 lr: float = 1e-3, batch_size: int = 256, steps_per_round: int = 32, duty: float = 0.5,
                 background: bool = True, seed: int = 0, **kwargs: Any):
        super().__init__(annotator, num_envs, **kwargs)
        torch.manual_seed(seed)
        self.threshold, self.min_labels = float(threshold), int(min_labels)
        self.trainer = BackgroundTrainer(MessageClassifier(), _classifier_loss, lr=lr, batch_size=batch_size,
                                         steps_per_round=steps_per_round, duty=duty, background=background,
                                         seed=seed)
        self._fed: set[str] = set()

    @property
    def ready(self) -> bool:
        """True once a published classifier snapshot was trained on at least ``min_labels`` labels."""
        snap, trained_on = self.trainer.current()
        return snap is not None and trained_on >= self.min_labels

    def _feed(self) -> None:
        new = [(k, v) for k, v in self.annotator.labels.items() if v is not None and k not in self._fed]
        self._fed.update(k for k, _ in new)
        self.trainer.add(new)

    def observe(self, messages: list[str]) -> None:
        super().observe(messages)
        self._feed()

    def raw_rewards(self, messages: list[str]) -> np.ndarray:
        snap, trained_on = self.trainer.current()
        if snap is None or trained_on < self.min_labels:  # never a random classifier: fall back to labels
            labels = [self.annotator.get(self.key(m)) for m in messages]
            return np.array([self.pending_default if y is None else y for y in labels], dtype=np.float64)
        return (snap.prob_helpful([self.key(m) for m in messages]) > self.threshold).astype(np.float64)

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        metrics = super().update(batch)
        self._feed()
        _, trained_on = self.trainer.current()
        return {**metrics, "model/trained_on": float(trained_on), "model/steps": float(self.trainer.steps),
                "model/loss": self.trainer.last_loss, "model/acc": self.trainer.last_acc}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "trainer": self.trainer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.trainer.load_state_dict(state["trainer"])
        self._fed = {m for m, _ in self.trainer.data}

    def close(self) -> None:
        self.trainer.close()


def _bt_loss(model: torch.nn.Module, batch: list[tuple[str, str, float]]) -> tuple[torch.Tensor, float]:
    first, second = [a for a, _, _ in batch], [b for _, b, _ in batch]
    target = torch.tensor([p for _, _, p in batch], dtype=torch.float32)
    loss, acc = bradley_terry_loss(model, first, second, target)
    return loss, float(acc)


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
                 seed: int = 0, **kwargs: Any):
        super().__init__(annotator, num_envs, **kwargs)
        torch.manual_seed(seed)
        self.threshold = float(threshold)
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
        msgs = batch_messages(batch)
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
        rewards = rewards / np.power(counts, self.beta)
        self.last = {"r_int_mean": float(rewards.mean()), "r_int_nonzero": float((rewards != 0).mean()),
                     "unique_messages": float(len(self.store)), "norm/mean": float(self.normalizer.mean),
                     "norm/std": float(np.sqrt(self.normalizer.var))}
        return rewards.astype(np.float32)

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        metrics = super().update(batch)
        self._feed()
        _, trained_on = self.trainer.current()
        return {**metrics, "model/trained_on": float(trained_on), "model/steps": float(self.trainer.steps),
                "model/loss": self.trainer.last_loss, "model/acc": self.trainer.last_acc}

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
