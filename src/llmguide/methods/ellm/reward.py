"""ELLM's goal reward: match the transition's events against the goals suggested before the action.

:class:`ELLMReward` is a watching reward module: it decides each step's reward in ``watch`` (so the
goals it paid this episode are known at once, for goal choice in
:class:`~llmguide.methods.ellm.wrapper.ELLMGoalWrapper`), and ``compute`` hands the rollout's
rewards to the learner.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from llmguide.rewards.base import RewardModule, StepTransition, TransitionBatch


# --- goal matcher and reward ---------------------------------------------------------------
class GoalMatcher:
    """Similarity between event captions and goals: embedding cosine (cached) or exact match."""

    def __init__(self, embedder: Any = None, match: str = "cosine"):
        if match not in ("cosine", "exact"):
            raise ValueError(f"match must be 'cosine' or 'exact', got {match!r}")
        if match == "cosine" and embedder is None:
            raise ValueError("cosine matching needs a sentence embedder")
        self.embedder = embedder
        self.match = match
        self._cache: dict[str, np.ndarray] = {}

    @staticmethod
    def normalise(text: str) -> str:
        return " ".join(re.sub(r"[^a-z0-9 ]", " ", text.lower()).split())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            for text, vec in zip(missing, self.embedder.embed(list(missing)), strict=True):
                self._cache[text] = np.asarray(vec, dtype=np.float32)
        return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, 0), np.float32)

    def similarity(self, events: Sequence[str], goals: Sequence[str]) -> np.ndarray:
        """(len(events), len(goals)) similarity: cosine, or 1/0 for exact (normalised) match."""
        if not events or not goals:
            return np.zeros((len(events), len(goals)), dtype=np.float32)
        if self.match == "exact":
            ev = [self.normalise(e) for e in events]
            gl = [self.normalise(g) for g in goals]
            return np.array([[float(e == g) for g in gl] for e in ev], dtype=np.float32)
        return self.embed(list(events)) @ self.embed(list(goals)).T


class ELLMReward(RewardModule):
    """Reward for achieving a goal suggested for the state before the action.

    ``match_on="action"`` is the reference's reward: the transition's action string ("chop tree", from
    ``info["action_text"]`` of ELLM's text action space), when ``info["action_success"]`` (unless
    ``require_success=False``: the novelty baseline), is matched against the suggestions;
    ``match_on="events"`` matches the events of real state changes ("collect wood") instead.

    Reads, per transition, ``info["events"]`` and ``info["ellm_goals"]`` (the goals suggested
    for the pre-action state, written by :class:`~llmguide.methods.ellm.wrapper.ELLMGoalWrapper`).
    An event achieves the unachieved goal it is most similar to when that similarity reaches
    ``threshold`` (cosine) or is an exact match; each event pays at most once, each goal at
    most once per episode.  ``reward="one"`` pays 1, ``reward="cosine"`` pays the similarity.
    ``watch`` pays each step in order (it keeps the per-episode record); ``compute`` returns the
    watched rollout.  :meth:`pay` pays one step directly (tests, evaluation).
    """

    name = "ellm"

    def __init__(self, matcher: GoalMatcher, num_envs: int, threshold: float = 0.8, reward: str = "one",
                 match_on: str = "events", require_success: bool = True):
        if reward not in ("one", "cosine"):
            raise ValueError(f"reward must be 'one' or 'cosine', got {reward!r}")
        if match_on not in ("events", "action"):
            raise ValueError(f"match_on must be 'events' or 'action', got {match_on!r}")
        self.match_on, self.require_success = match_on, bool(require_success)
        self.matcher = matcher
        self.threshold = 1.0 if matcher.match == "exact" else float(threshold)
        self.reward = reward
        self.num_envs = num_envs
        self.achieved: list[set[str]] = [set() for _ in range(num_envs)]
        self.paid_total = 0
        self.achieved_goals: dict[str, int] = {}
        self._rows: list[np.ndarray] = []

    def pay(self, infos: Sequence[dict], dones: Sequence[bool]) -> np.ndarray:
        """(N,) rewards of one step; an env's record of paid goals restarts after its episode ends."""
        out = np.zeros(len(infos), dtype=np.float32)
        goals = _column(infos, "ellm_goals")
        for n, done in enumerate(self._performed(infos)):
            out[n] = self._pay(n, done, list(goals[n] or []))
            if dones[n]:
                self.achieved[n] = set()
        return out

    def _performed(self, infos: Sequence[dict]) -> list[list[str]]:
        """Per env, what the transition did: its events, or (the reference) the action string when it succeeded."""
        if self.match_on == "events":
            return [list(events or []) for events in _column(infos, "events")]
        from llmguide.envs.crafter.actions import canonical_action

        success = _column(infos, "action_success") if self.require_success else [True] * len(infos)
        return [[canonical_action(str(text))] if text and ok else []
                for text, ok in zip(_column(infos, "action_text"), success, strict=True)]

    def watch(self, step: StepTransition) -> None:
        self._rows.append(self.pay(step.infos, step.dones))

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        T = np.asarray(batch.rewards).shape[0]
        if len(self._rows) != T:
            raise RuntimeError(f"ELLMReward watched {len(self._rows)} steps but the rollout has {T}: "
                               "the learner must call watch() on every step")
        out, self._rows = np.stack(self._rows), []
        return out

    def metrics(self) -> dict[str, float]:
        return {"paid_total": float(self.paid_total)}

    def _pay(self, n: int, events: list[str], goals: list[str]) -> float:
        goals = [g for g in dict.fromkeys(goals) if g not in self.achieved[n]]
        if not events or not goals:
            return 0.0
        sim = self.matcher.similarity(events, goals)
        total = 0.0
        for e in range(len(events)):
            row = np.where([g in self.achieved[n] for g in goals], -np.inf, sim[e])
            j = int(np.argmax(row))
            if row[j] >= self.threshold - 1e-6:
                self.achieved[n].add(goals[j])
                self.achieved_goals[goals[j]] = self.achieved_goals.get(goals[j], 0) + 1
                self.paid_total += 1
                total += 1.0 if self.reward == "one" else float(row[j])
        return total

    def state_dict(self) -> dict[str, Any]:
        return {"achieved": [sorted(a) for a in self.achieved], "paid_total": self.paid_total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.achieved = [set(a) for a in state.get("achieved", [[]] * self.num_envs)]
        self.paid_total = int(state.get("paid_total", 0))


def nearest_goal_map(matcher: GoalMatcher, vocabulary: Sequence[str], threshold: float) -> Callable[[str], str | None]:
    """Map a free-form goal to the vocabulary goal it matches (exact, else cosine >= threshold)."""
    canon = {GoalMatcher.normalise(g): g for g in vocabulary}

    def lookup(goal: str) -> str | None:
        key = GoalMatcher.normalise(goal)
        if key in canon:
            return canon[key]
        if matcher.match == "exact" or matcher.embedder is None:
            return None
        sim = matcher.similarity([goal], list(vocabulary))[0]
        j = int(np.argmax(sim))
        return vocabulary[j] if sim[j] >= threshold else None

    return lookup


def _column(infos: Sequence[dict], key: str) -> list:
    """``info.get(key)`` of every env, column-wise when ``infos`` can (a vector step's
    :class:`~llmguide.envs.vector.EnvInfos`), else row by row."""
    column = getattr(infos, "column", None)
    return column(key) if column is not None else [info.get(key) for info in infos]
