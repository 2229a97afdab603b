"""The RewardModule interface shared by every intrinsic / shaping reward."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class TransitionBatch:
    """Transitions with leading dims (T, N): T steps of N parallel envs.

    ``obs``/``next_obs`` are arrays or dicts of arrays; ``infos`` is a T×N nested list of the
    per-env info dicts (with ``caption``, ``events``, ``mission``); ``dones`` marks episode ends
    (terminated or truncated) after the transition.
    """

    obs: Any
    actions: np.ndarray
    next_obs: Any
    rewards: np.ndarray
    dones: np.ndarray
    infos: Sequence[Sequence[dict]] = field(default_factory=list)


class RewardModule(ABC):
    """Batches of transitions in, intrinsic reward out (shape (T, N)); may train and checkpoint."""

    name: str = "reward"

    @abstractmethod
    def compute(self, batch: TransitionBatch) -> np.ndarray:
        """Intrinsic reward for each transition, shape (T, N)."""

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        """Train on a batch; return metrics. Default: nothing to learn."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
