"""Character-level CNN over a NetHack message (ONI / Motif reward networks).

The trunk follows the ONI / Motif reference: bytes of the message (latin-1, padded with 0 to 256)
→ embedding 256×32 → Conv(k7) → pool3 → Conv(k7) → pool3 → 4×Conv(k3) → pool3 → 5×64 → Linear 128.
Two heads on top:

- :class:`MessageClassifier`: MLP [512, 512] with dropout 0.1 → 2 logits (ONI-Classification);
- :class:`MessageRewardNet`: 128 → 256 → ReLU → 512 → ReLU → 1 scalar (ONI-Ranking, Motif), fitted as a
  Bradley-Terry model on message pairs (:func:`pair_rewards` scores both sides).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

MESSAGE_LEN = 256


def encode_messages(messages: Sequence[str], length: int = MESSAGE_LEN) -> torch.Tensor:
    """Byte codes of each message (latin-1, unknown chars → '?'), truncated / zero-padded to ``length``."""
    out = np.zeros((len(messages), length), dtype=np.int64)
    for i, msg in enumerate(messages):
        raw = msg.encode("latin-1", errors="replace")[:length]
        out[i, : len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    return torch.from_numpy(out)


class CharCNN(nn.Module):
    """Message bytes (B, 256) → features (B, 128)."""

    def __init__(self, emb_dim: int = 32, channels: int = 64, out_dim: int = 128):
        super().__init__()
        self.embed = nn.Embedding(256, emb_dim, padding_idx=0)
        c = channels
        self.convs = nn.Sequential(
            nn.Conv1d(emb_dim, c, 7), nn.ReLU(), nn.MaxPool1d(3),
            nn.Conv1d(c, c, 7), nn.ReLU(), nn.MaxPool1d(3),
            nn.Conv1d(c, c, 3), nn.ReLU(),
            nn.Conv1d(c, c, 3), nn.ReLU(),
            nn.Conv1d(c, c, 3), nn.ReLU(),
            nn.Conv1d(c, c, 3), nn.ReLU(), nn.MaxPool1d(3),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, emb_dim, MESSAGE_LEN)).numel()
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(flat, out_dim), nn.ReLU())

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.fc(self.convs(self.embed(codes).transpose(1, 2)))


class MessageClassifier(nn.Module):
    """Char-CNN → MLP → 2 logits (helpful / not)."""

    def __init__(self, hidden: int = 512, dropout: float = 0.1):
        super().__init__()
        self.trunk = CharCNN()
        self.head = nn.Sequential(
            nn.Linear(128, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, 2),
        )

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(codes))

    @torch.no_grad()
    def prob_helpful(self, messages: Sequence[str]) -> np.ndarray:
        """P(helpful) per message (eval mode)."""
        self.eval()
        return torch.softmax(self(encode_messages(messages)), dim=-1)[:, 1].numpy()


class MessageRewardNet(nn.Module):
    """Char-CNN → 256 → 512 → scalar reward (Bradley-Terry reward model)."""

    def __init__(self):
        super().__init__()
        self.trunk = CharCNN()
        self.head = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 1))

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(codes)).squeeze(-1)

    @torch.no_grad()
    def rewards(self, messages: Sequence[str]) -> np.ndarray:
        """Raw (unnormalised) reward per message."""
        self.eval()
        if not messages:
            return np.zeros(0, dtype=np.float32)
        return self(encode_messages(messages)).numpy().astype(np.float32)


def pair_rewards(net: MessageRewardNet, first: Sequence[str],
                 second: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(r(first), r(second))``: the rewards of both sides of a batch of message pairs (with gradient)."""
    return net(encode_messages(first)), net(encode_messages(second))
