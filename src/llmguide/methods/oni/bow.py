"""ELLM-BoW (the ONI paper's LM-free baseline): cosine between bag-of-words embeddings of the
message and of a goal sentence, kept when above ``threshold``, divided by the episodic count.

The reference summed fastText vectors (a multi-GB download); here the embedding is
:class:`~llmguide.llm.embeddings.BowEmbedder` (hashed bag of words), cached per message.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmguide.methods.oni.reward import EpisodicCounter, batch_messages
from llmguide.rewards.base import RewardModule, TransitionBatch


class ELLMBoW(RewardModule):
    """r_int = cos(bow(message), bow(goal)) · 1[cos > threshold] / n_episode(message)^β."""

    name = "ellm_bow"

    def __init__(self, num_envs: int, goal: str, *, threshold: float = 0.1, beta: float = 3.0,
                 count_scope: str = "episode", message_key: str = "caption"):
        from llmguide.llm.embeddings import BowEmbedder

        self.message_key = str(message_key)   # the info key of the message: caption, or Crafter's message line
        self.embedder = BowEmbedder()
        self.goal_vec = self.embedder.embed([goal])[0]
        self.threshold, self.beta = float(threshold), float(beta)
        self.counter = EpisodicCounter(num_envs, count_scope)
        self.table: dict[str, float] = {"": 0.0}

    def similarity(self, messages: list[str]) -> np.ndarray:
        """Thresholded cosine per message (cached)."""
        new = [m for m in dict.fromkeys(messages) if m not in self.table]
        if new:
            vecs = self.embedder.embed(new)
            norms = np.linalg.norm(vecs, axis=1) * (np.linalg.norm(self.goal_vec) or 1.0)
            cos = (vecs @ self.goal_vec) / np.where(norms > 0, norms, 1.0)
            self.table.update({m: float(c) if c > self.threshold else 0.0 for m, c in zip(new, cos, strict=True)})
        return np.array([self.table[m] for m in messages], dtype=np.float64)

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        msgs = batch_messages(batch, self.message_key)
        dones = np.asarray(batch.dones, dtype=bool)
        counts = np.stack([self.counter.step(msgs[t], dones[t]) for t in range(dones.shape[0])])
        sim = np.stack([self.similarity(row) for row in msgs])
        return (sim / np.power(counts, self.beta)).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"counter": self.counter.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counter.load_state_dict(state["counter"])


def build_ellm_bow(method_cfg: Any, obs_space: Any, action_space: Any, num_envs: int, message_key: str = "caption",
                   **_: Any) -> ELLMBoW:
    """Reward factory for ``method=ellm_bow`` (``llmguide.rewards.register_reward``)."""
    return ELLMBoW(num_envs, str(method_cfg["goal"]), threshold=float(method_cfg.get("threshold", 0.1)),
                   beta=float(method_cfg.get("beta", 3.0)), count_scope=str(method_cfg.get("count_scope", "episode")),
                   message_key=message_key)
