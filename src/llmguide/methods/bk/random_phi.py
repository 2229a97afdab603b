"""BK's knowledge control for the potential: Φ from a randomly initialised network over the observation.

``method=bk_random_phi`` goes through the same machinery as BK-Code (the same transition shaping,
normalisation, coefficient and PPO settings); only the knowledge is missing: Φ(s) is a fixed random
MLP of the flattened observation (seeded by ``method.random_phi.seed``, tanh-bounded like a clipped
program), so a gain of BK-Code over PPO that this arm matches comes from shaping of any kind, not from
what the LM knew.  It needs no ``collect`` or ``label`` step.
"""

from __future__ import annotations

import numpy as np

from llmguide.methods.bk.common import flat_features


class RandomPotential:
    """Φ(s') = tanh(w₂ · tanh(W₁ · x + b₁)) · clip for the flattened next observation x (fixed random weights)."""

    def __init__(self, seed: int = 0, hidden: int = 64, clip: float = 10.0):
        self.rng = np.random.default_rng(seed)
        self.hidden, self.clip = int(hidden), float(clip)
        self._w1: np.ndarray | None = None

    def _init(self, dim: int) -> None:
        self._w1 = self.rng.normal(0.0, 1.0 / np.sqrt(dim), (dim, self.hidden))
        self._b1 = self.rng.normal(0.0, 1.0, self.hidden)
        self._w2 = self.rng.normal(0.0, 1.0 / np.sqrt(self.hidden), self.hidden)

    def __call__(self, obs: dict[str, np.ndarray], infos: list[dict], actions: np.ndarray) -> np.ndarray:
        x = flat_features(obs).astype(np.float64)
        if self._w1 is None:
            self._init(x.shape[-1])
        return self.clip * np.tanh(np.tanh(x @ self._w1 + self._b1) @ self._w2)
