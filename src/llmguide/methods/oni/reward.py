"""ONI intrinsic rewards from LM feedback on the agent's own messages (Zheng et al. 2024).

Three variants share one skeleton (:class:`MessageReward`): read the transition's message
(``info[message_key]``: the caption on NetHack/MiniHack, the message line ``info["message"]`` on Crafter and
Craftax-Classic, :func:`llmguide.methods.oni.recipe.message_key`), ask the :mod:`~llmguide.methods.oni.annotator` for a label without ever
waiting, turn labels into a reward, divide by the episodic count of the exact message ``1 / n^β``.

- :class:`ONIRetrieval`: the label table (1 helpful / 0 not); ``pending_default`` while pending.
- :class:`ONIClassification`: a char-CNN classifier trained online in a background thread on the
  labels; it is *not used before it has trained on* ``min_labels`` labels (the reference used a
  randomly initialised classifier); until then the module behaves like Retrieval.
- :class:`~llmguide.methods.oni.ranking.ONIRanking`: a Bradley-Terry char-CNN trained on LM preferences
  over message pairs; the reward that reaches the learner is ``z · 1[z > threshold]`` with
  ``z = (r − μ) / σ`` from a running normaliser (the reference computed this and then handed the
  *raw* output to the policy).

The two first live here with the shared skeleton and helpers (:func:`batch_messages`,
:class:`EpisodicCounter`); ONI-Ranking is in :mod:`llmguide.methods.oni.ranking` and the
background reward-model training both learned variants use in :mod:`llmguide.methods.oni.trainer`.

The empty message gets no reward and is never annotated.  ``compute`` advances the episodic
counts, so call it exactly once per batch (the PPO learner does).

**The full reward, as the reference** (``facebookresearch/oni`` learner.py; Motif the same with its
reward model) — per transition with message ``m``::

    r = c_ext · clip(s · r_env, −C, C)  +  c_llm · r_int(m) / n_ep(m)^β

============  ==================================  =====================================================
symbol        config key                          value (reference)
============  ==================================  =====================================================
s             ``env.reward_scale``                1.0 (ONI; Motif's README used 0.1)
C             ``env.reward_clip``                 10 (the rollout workers' clip; applied by the env, so
                                                  every arm of a comparison gets it)
c_ext         ``method.extrinsic_coef``           10 on sparse tasks (MiniHack, Staircase, Oracle), 0.1 on
                                                  NetHackScore, 0 reward-free
c_llm         ``method.intrinsic_coef``           0.4 (ONI), 0.1 (Motif)
β             ``method.beta``                     3 (``beta_count_exponent``)
n_ep(m)       ``method.count_scope=episode``      occurrences of the exact message in this episode,
                                                  the current one included (``global``: over the run)
r_int         per variant                         Retrieval: label ∈ {0, 1}, ``pending_default`` (0)
                                                  while pending; Classification: 1[P > 0.5]; Ranking and
                                                  Motif: z · 1[z > threshold], z normalised
============  ==================================  =====================================================

Deliberate differences: the reference computes r_int when a minibatch is trained (so a label that
arrives between collection and training already counts); here it is computed once per rollout, before
GAE.  The empty message is never annotated and gets 0 (the reference labelled it like any other).
ONI-Ranking's normaliser and threshold reach the learner (the reference's typo handed it the raw output).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from llmguide.methods.oni.annotator import Annotator, canonicalize_message
from llmguide.methods.oni.charcnn import MessageClassifier, encode_messages
from llmguide.methods.oni.trainer import BackgroundTrainer
from llmguide.rewards.base import RewardModule, TransitionBatch


def batch_messages(batch: TransitionBatch, key: str = "caption") -> list[list[str]]:
    """The T×N message texts (``info[key]``) of a batch; a clear error when infos are missing."""
    T, N = np.asarray(batch.dones).shape[:2]
    if len(batch.infos) != T or any(len(row) != N for row in batch.infos):
        raise ValueError(f"ONI rewards need batch.infos as a {T}×{N} list of per-env info dicts with {key!r}")
    return [[str(info.get(key) or "") for info in row] for row in batch.infos]


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
                 pending_default: float = 0.0, canonicalize: bool = False, message_key: str = "caption"):
        self.annotator = annotator
        self.message_key = str(message_key)   # the info key of the message: caption, or Crafter's message line
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
        msgs = batch_messages(batch, self.message_key)
        dones = np.asarray(batch.dones, dtype=bool)
        T, N = dones.shape
        counts = np.stack([self.counter.step(msgs[t], dones[t]) for t in range(T)])
        flat = [m for row in msgs for m in row]
        nonempty = sorted({m for m in flat if m})
        self.observe(nonempty)
        table = dict(zip(nonempty, self.raw_rewards(nonempty), strict=True)) if nonempty else {}
        raw = np.array([[table.get(m, 0.0) for m in row] for row in msgs], dtype=np.float64)
        rewards = raw / np.power(counts, self.beta)
        # labelled fraction: share of the rollout's non-empty message occurrences whose label had arrived
        # when this reward was computed (the rest got the pending default / the classifier's guess)
        known = {m: self.annotator.get(self.key(m)) is not None for m in nonempty}
        occurrences = [m for m in flat if m]
        self.last = {"r_int_mean": float(rewards.mean()), "r_int_nonzero": float((rewards != 0).mean()),
                     "unique_messages": float(len(nonempty)),
                     "labelled_fraction": float(np.mean([known[m] for m in occurrences])) if occurrences else 1.0,
                     "labelled_fraction_unique": float(np.mean(list(known.values()))) if known else 1.0}
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
        return {**metrics, **self.trainer.metrics()}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "trainer": self.trainer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.trainer.load_state_dict(state["trainer"])
        self._fed = {m for m, _ in self.trainer.data}

    def close(self) -> None:
        self.trainer.close()

