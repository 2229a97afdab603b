"""The RewardModule interface shared by every intrinsic / shaping reward (rllte's BaseReward shape).

A learner calls, for each of its ``(coef, module)`` pairs:

* ``watch(step)`` after every vector-env step, with that step's :class:`StepTransition` — for
  modules that keep per-step state (episodic counts, goals paid this episode, asynchronous LM
  labels); the default does nothing;
* ``compute(batch)`` once per rollout on the whole :class:`TransitionBatch`, returning (T, N)
  rewards that the learner weights by ``coef``;
* ``update(batch)`` after ``compute`` (modules that train themselves), returning metrics.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class StepTransition:
    """One vector-env step: (N,) arrays; ``next_obs`` is the true next observation (``final_obs`` where
    an env just finished); ``infos`` holds one info dict per env (the final info of a finished env)."""

    obs: Any
    actions: np.ndarray
    next_obs: Any
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: Sequence[dict]
    step: int = 0

    @property
    def dones(self) -> np.ndarray:
        return np.logical_or(self.terminated, self.truncated)


@dataclass
class TransitionBatch:
    """Transitions with leading dims (T, N): T steps of N parallel envs.

    ``obs``/``next_obs`` are arrays or dicts of arrays (``next_obs`` is the true next observation);
    ``infos`` is a T×N nested list of the per-env info dicts (with ``caption``, ``events``,
    ``mission``); ``terminated`` marks a true episode end (no future), ``truncated`` a time limit
    (the episode was cut: the next state still has a value).  ``dones`` is either.
    """

    obs: Any
    actions: np.ndarray
    next_obs: Any
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray | None = None
    infos: Sequence[Sequence[dict]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.terminated = np.asarray(self.terminated, dtype=bool)
        if self.truncated is None:
            self.truncated = np.zeros_like(self.terminated)
        self.truncated = np.asarray(self.truncated, dtype=bool)
        if self.truncated.shape != self.terminated.shape:
            raise ValueError(f"terminated {self.terminated.shape} and truncated {self.truncated.shape} differ")

    @property
    def dones(self) -> np.ndarray:
        """Episode ends of either kind."""
        return np.logical_or(self.terminated, self.truncated)


class RewardModule(ABC):
    """Batches of transitions in, intrinsic reward out (shape (T, N)); may train and checkpoint."""

    name: str = "reward"

    def watch(self, step: StepTransition) -> None:
        """See one vector-env step as it happens (default: nothing)."""
        return None

    @abstractmethod
    def compute(self, batch: TransitionBatch) -> np.ndarray:
        """Intrinsic reward for each transition, shape (T, N)."""

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        """Train on a batch; return metrics. Default: nothing to learn."""
        return {}

    def metrics(self) -> dict[str, float]:
        """Periodic metrics of the module (logged by the runner under ``reward/<name>/``)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    def close(self) -> None:
        """Release threads / services the module holds."""
        return None
