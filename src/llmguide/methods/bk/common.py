"""BK shared parts: text of states / transitions / windows, the labelling-failure error, and
:class:`TransitionPotentialShaping` with the reference's Φ normalisation.

**Φ normalisation** (BK reference ``train_rs.py``, RND-style): Φ is divided by the running standard
deviation of its γ-discounted forward sum ``R_t = γ R_{t−1} + Φ_t`` (per env, never reset, as the
reference's ``RewardForwardFilter``), so potentials of any raw scale shape with a comparable
magnitude.  Unlike the reference, Φ(s) and Φ(s') of one rollout are divided by the *same* std
(the carried-over raw Φ is not divided twice), so the shaping of a rollout telescopes exactly.
``potential_scale`` multiplies the normalised Φ.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmguide.core.errors import LLMGuideError
from llmguide.core.rundir import atomic_write_text
from llmguide.rewards.base import TransitionBatch
from llmguide.rewards.shaping import PotentialShaping, potential_shaping


class LabelingFailed(LLMGuideError):
    """A BK labelling step produced nothing usable; ``reason`` says why, the transcript is on disk."""

    def __init__(self, variant: str, reason: str, transcript: str | Path | None = None):
        self.variant, self.reason, self.transcript = variant, reason, str(transcript) if transcript else None
        where = f" (transcript: {transcript})" if transcript else ""
        super().__init__(f"{variant} labelling failed: {reason}{where}")


def write_failure(out_dir: str | Path, variant: str, reason: str) -> None:
    """Mark a label directory as failed (``failed.json``); training refuses such a directory."""
    atomic_write_text(Path(out_dir) / "failed.json", json.dumps({"method": variant, "reason": reason}, indent=2))


# --- text of states, transitions and windows ----------------------------------------------
def action_name(action: int, action_names: Sequence[str] | None) -> str:
    if action_names and 0 <= int(action) < len(action_names):
        return str(action_names[int(action)])
    return f"action {int(action)}"


def transition_text(caption: str, events: Sequence[str], action: str) -> str:
    """Caption of one transition: what happened (events) else the action, then what is seen now."""
    happened = ", ".join(str(e) for e in events) if events else f"you {action}"
    return f"{happened}. {caption}".strip()


def window_text(captions: Sequence[str], actions: Sequence[int], action_names: Sequence[str] | None) -> str:
    """BK's window caption: ``Step i: <caption>. You choose the action: <a>.`` ... ``Current observation: ...``."""
    lines = [f"Step {i + 1}: {captions[i]}. You choose the action: {action_name(a, action_names)}."
             for i, a in enumerate(actions)]
    return "\n".join([*lines, f"Current observation: {captions[len(actions)]}."])


def flat_features(obs: dict[str, np.ndarray], batch_dims: int = 1) -> np.ndarray:
    """Concatenate every observation key flattened after the ``batch_dims`` leading dims (float32)."""
    parts = []
    for key in sorted(obs):
        value = np.asarray(obs[key], dtype=np.float32)
        parts.append(value.reshape(*value.shape[:batch_dims], -1))
    return np.concatenate(parts, axis=-1)


# --- shaping over transition-based potentials ------------------------------------------------
TransitionPotential = Callable[[dict[str, np.ndarray], list[dict], np.ndarray], np.ndarray]


class TransitionPotentialShaping(PotentialShaping):
    """PBRS for a potential of the state *reached by a transition* (needs its caption / events).

    ``potential(next_obs_rows, info_rows, action_rows) -> (B,)``.  Call :meth:`compute` once per
    rollout (as PPO does): the last row's raw Φ is carried into the next rollout.  A first state of
    an episode has no incoming transition and gets Φ = 0.  ``normalize``: divide Φ by the running
    std of its discounted forward sum (module docstring); ``scale``: ``potential_scale``.
    """

    def __init__(self, potential: TransitionPotential, gamma: float, name: str = "bk", scale: float = 1.0,
                 normalize: bool = False):
        super().__init__(potential, gamma)
        self.name = name
        self.scale = float(scale)
        self.normalize = bool(normalize)
        self._carry: np.ndarray | None = None
        self._forward: np.ndarray | None = None     # per-env discounted forward sum of raw Φ
        self._count, self._mean, self._var = 1e-4, 0.0, 1.0
        self.last_stats: dict[str, float] = {}

    def _update_std(self, phi: np.ndarray) -> float:
        """Feed ``phi`` (T, N) into the forward filter; update and return the running std."""
        T, N = phi.shape
        if self._forward is None or self._forward.shape != (N,):
            self._forward = np.zeros(N)
        sums = np.empty_like(phi)
        for t in range(T):
            self._forward = self._forward * self.gamma + phi[t]
            sums[t] = self._forward
        b_mean, b_var, b_count = float(sums.mean()), float(sums.var()), sums.size
        delta, total = b_mean - self._mean, self._count + b_count
        m2 = self._var * self._count + b_var * b_count + delta ** 2 * self._count * b_count / total
        self._mean, self._var, self._count = self._mean + delta * b_count / total, m2 / total, total
        return float(np.sqrt(self._var)) + 1e-8

    def compute(self, batch: TransitionBatch) -> np.ndarray:
        rewards = np.asarray(batch.rewards)
        T, N = rewards.shape
        dones = np.asarray(batch.dones, dtype=bool)
        rows = {k: np.asarray(v).reshape(T * N, *np.asarray(v).shape[2:]) for k, v in batch.next_obs.items()}
        infos = [batch.infos[t][n] if batch.infos else {} for t in range(T) for n in range(N)]
        phi_flat = np.asarray(self.potential(rows, infos, np.asarray(batch.actions).reshape(-1)), dtype=np.float64)
        if phi_flat.shape != (T * N,):
            raise ValueError(f"potential returned shape {phi_flat.shape}, expected {(T * N,)}")
        phi_next = np.nan_to_num(phi_flat, nan=0.0, posinf=0.0, neginf=0.0).reshape(T, N)
        carry = self._carry if self._carry is not None and self._carry.shape == (N,) else np.zeros(N)
        phi_s = np.empty_like(phi_next)
        phi_s[0] = carry
        phi_s[1:] = np.where(dones[:-1], 0.0, phi_next[:-1])
        self._carry = np.where(dones[-1], 0.0, phi_next[-1])
        factor = self.scale / (self._update_std(phi_next) if self.normalize else 1.0)
        self.last_stats = {"phi_mean": float(phi_next.mean()), "phi_nonzero": float((phi_next != 0).mean()),
                           "phi_factor": factor}
        return potential_shaping(phi_s * factor, phi_next * factor, batch.terminated, self.gamma)

    def update(self, batch: TransitionBatch) -> dict[str, float]:
        extra = getattr(self.potential, "metrics", None)
        return {**self.last_stats, **(extra() if callable(extra) else {})}

    def state_dict(self) -> dict[str, Any]:
        return {"carry": None if self._carry is None else self._carry.tolist(),
                "forward": None if self._forward is None else self._forward.tolist(),
                "rms": [self._count, self._mean, self._var]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        carry, forward = state.get("carry"), state.get("forward")
        self._carry = None if carry is None else np.asarray(carry, dtype=np.float64)
        self._forward = None if forward is None else np.asarray(forward, dtype=np.float64)
        if state.get("rms"):
            self._count, self._mean, self._var = (float(x) for x in state["rms"])
