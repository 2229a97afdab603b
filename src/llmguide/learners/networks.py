"""Networks over Dict observations: a CNN for every 3-D Box, an MLP over all 1-D Boxes.

A 1-D uint8 key named ``message`` (NetHack/MiniHack's 256 message bytes, env option ``message_obs``)
gets its own :class:`MessageEncoder` (bytes/255 → MLP, as the ONI/Motif reference policy), so with
``agent.recurrent=gru`` a NetHack policy is the reference's shape: glyph-crop CNN + blstats MLP +
message MLP → GRU.

``DictEncoder`` turns ``{"image": (B,C,H,W), "vector": (B,K), "goal": (B,D), ...}`` into one
feature vector; ``ActorCritic`` (PPO, optional GRU/LSTM core, optional second value head) and
``DuelingQNet`` (DQN) put their heads on top of it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

Obs = dict[str, torch.Tensor]


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    """Orthogonal weights, constant bias (CleanRL's initialisation)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


def obs_to_tensor(obs: dict[str, np.ndarray], device: str | torch.device = "cpu") -> Obs:
    """NumPy dict observation → torch tensors (dtype kept; the encoder scales uint8 images)."""
    return {k: torch.as_tensor(np.asarray(v), device=device) for k, v in obs.items()}


def _cnn(channels: int, height: int, width: int) -> nn.Sequential:
    """Nature-CNN for large images (≥ 32 px), two 3×3 convolutions for small symbolic views."""
    if min(height, width) >= 32:
        return nn.Sequential(
            layer_init(nn.Conv2d(channels, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
        )
    return nn.Sequential(
        layer_init(nn.Conv2d(channels, 32, 3, padding=1)), nn.ReLU(),
        layer_init(nn.Conv2d(32, 64, 3, padding=1)), nn.ReLU(),
        nn.Flatten(),
    )


MESSAGE_KEYS = ("message",)


class MessageEncoder(nn.Module):
    """Raw message bytes (B, L) uint8 → bytes/255 → Linear-ReLU-Linear-ReLU (the reference's 256→128→128)."""

    def __init__(self, length: int, hidden: int = 128):
        super().__init__()
        self.net = nn.Sequential(layer_init(nn.Linear(length, hidden)), nn.ReLU(),
                                 layer_init(nn.Linear(hidden, hidden)), nn.ReLU())
        self.out_dim = hidden

    def forward(self, message: torch.Tensor) -> torch.Tensor:
        return self.net(message.float() / 255.0)


class DictEncoder(nn.Module):
    """Encode a ``spaces.Dict`` of Boxes: CNN per 3-D key (uint8 → /255), a :class:`MessageEncoder` per
    1-D uint8 ``message`` key, one MLP over all other 1-D keys."""

    def __init__(self, obs_space: spaces.Dict, hidden: int = 256, image_encoder: str = "cnn"):
        super().__init__()
        if image_encoder not in ("cnn", "flat"):
            raise ValueError(f"image_encoder must be 'cnn' or 'flat', got {image_encoder!r}")
        if not isinstance(obs_space, spaces.Dict):
            raise TypeError(f"DictEncoder needs a gymnasium.spaces.Dict observation space, got {obs_space}")
        self.image_keys: list[str] = []
        self.vector_keys: list[str] = []
        self.message_keys: list[str] = []
        self.uint8_keys: set[str] = set()
        for key, space in obs_space.spaces.items():
            if not isinstance(space, spaces.Box) or len(space.shape) not in (1, 3):
                raise ValueError(f"observation key '{key}' must be a 1-D or 3-D (C,H,W) Box, got {space}")
            if key in MESSAGE_KEYS and len(space.shape) == 1 and space.dtype == np.uint8:
                self.message_keys.append(key)
                continue
            (self.image_keys if len(space.shape) == 3 else self.vector_keys).append(key)
            if space.dtype == np.uint8:
                self.uint8_keys.add(key)
        self.cnns = nn.ModuleDict()
        for key in self.image_keys:
            c, h, w = obs_space[key].shape
            # "flat": one linear layer over the flattened view, ~7x cheaper to train than the CNN on
            # small symbolic views (Crafter's 19x9x7), as PureJaxRL's Craftax baseline does
            cnn = _cnn(c, h, w) if image_encoder == "cnn" else nn.Flatten()
            with torch.no_grad():
                n_flat = cnn(torch.zeros(1, c, h, w)).shape[1]
            self.cnns[key] = nn.Sequential(cnn, layer_init(nn.Linear(n_flat, hidden)), nn.ReLU())
        self.vector_dim = sum(int(obs_space[k].shape[0]) for k in self.vector_keys)
        self.mlp = None
        if self.vector_keys:
            self.mlp = nn.Sequential(
                layer_init(nn.Linear(self.vector_dim, hidden)), nn.ReLU(),
                layer_init(nn.Linear(hidden, hidden)), nn.ReLU(),
            )
        self.messages = nn.ModuleDict({key: MessageEncoder(int(obs_space[key].shape[0]), min(hidden, 128))
                                       for key in self.message_keys})
        self.out_dim = hidden * (len(self.image_keys) + (1 if self.vector_keys else 0))
        self.out_dim += sum(enc.out_dim for enc in self.messages.values())
        if self.out_dim == 0:
            raise ValueError("observation space has no Box keys to encode")

    def forward(self, obs: Obs) -> torch.Tensor:
        feats = []
        for key in self.image_keys:
            x = obs[key]
            x = x.float() / 255.0 if key in self.uint8_keys else x.float()
            feats.append(self.cnns[key](x))
        if self.mlp is not None:
            feats.append(self.mlp(torch.cat([obs[k].float() for k in self.vector_keys], dim=-1)))
        for key in self.message_keys:
            feats.append(self.messages[key](obs[key]))
        return torch.cat(feats, dim=-1)


RecurrentState = tuple[torch.Tensor, ...] | None


class ActorCritic(nn.Module):
    """Shared encoder → (GRU/LSTM core | Linear) → policy logits and 1 or 2 value heads.

    ``two_value_heads`` gives separate extrinsic and intrinsic critics (RND-style); values then
    have shape (B, 2), else (B, 1).
    """

    def __init__(self, obs_space: spaces.Dict, n_actions: int, hidden: int = 256,
                 recurrent: str | None = None, two_value_heads: bool = False, image_encoder: str = "cnn"):
        super().__init__()
        if recurrent not in (None, "gru", "lstm"):
            raise ValueError(f"recurrent must be null, 'gru' or 'lstm', got {recurrent!r}")
        self.recurrent = recurrent
        self.hidden = hidden
        self.encoder = DictEncoder(obs_space, hidden, image_encoder)
        if recurrent is None:
            self.core = nn.Sequential(layer_init(nn.Linear(self.encoder.out_dim, hidden)), nn.ReLU())
        else:
            rnn_cls = nn.GRU if recurrent == "gru" else nn.LSTM
            self.core = rnn_cls(self.encoder.out_dim, hidden)
            for name, param in self.core.named_parameters():
                if "bias" in name:
                    nn.init.constant_(param, 0)
                elif "weight" in name:
                    nn.init.orthogonal_(param, 1.0)
        self.actor = layer_init(nn.Linear(hidden, n_actions), std=0.01)
        self.n_value_heads = 2 if two_value_heads else 1
        self.critic = layer_init(nn.Linear(hidden, self.n_value_heads), std=1.0)

    def initial_state(self, batch_size: int, device: str | torch.device = "cpu") -> RecurrentState:
        """Zero recurrent state for ``batch_size`` envs (None for a feed-forward core)."""
        if self.recurrent is None:
            return None
        zeros = torch.zeros(1, batch_size, self.hidden, device=device)
        return (zeros,) if self.recurrent == "gru" else (zeros, zeros.clone())

    def _features(self, obs: Obs, state: RecurrentState, done: torch.Tensor | None):
        """Core features. Recurrent: obs are T*N rows (time-major), ``done`` resets state per row."""
        x = self.encoder(obs)
        if self.recurrent is None:
            return self.core(x), None
        batch = state[0].shape[1]
        x = x.reshape(-1, batch, x.shape[-1])
        done = done.float().reshape(-1, batch) if done is not None else torch.zeros(x.shape[:2], device=x.device)
        # Run the core over segments between time steps where some env restarts: one call per
        # segment instead of one per step; the state of restarting envs is zeroed at its start.
        cuts = [0, *[t for t in range(1, x.shape[0]) if bool(done[t].any())], x.shape[0]]
        outputs = []
        for t0, t1 in zip(cuts[:-1], cuts[1:], strict=True):
            keep = (1.0 - done[t0]).view(1, -1, 1)
            state = tuple(s * keep for s in state)
            if self.recurrent == "gru":
                out, h = self.core(x[t0:t1], state[0])
                state = (h,)
            else:
                out, (h, c) = self.core(x[t0:t1], state)
                state = (h, c)
            outputs.append(out)
        return torch.flatten(torch.cat(outputs), 0, 1), state

    def action_logits(self, obs: Obs, state: RecurrentState = None, done: torch.Tensor | None = None) -> torch.Tensor:
        """Policy logits (B, n_actions)."""
        h, _ = self._features(obs, state, done)
        return self.actor(h)

    def get_value(self, obs: Obs, state: RecurrentState = None, done: torch.Tensor | None = None):
        """Values (B, n_value_heads)."""
        h, _ = self._features(obs, state, done)
        return self.critic(h)

    def get_action_and_value(self, obs: Obs, state: RecurrentState = None, done: torch.Tensor | None = None,
                             action: torch.Tensor | None = None, greedy: bool = False):
        """Return (action, log-prob, entropy, values (B, heads), new recurrent state)."""
        h, new_state = self._features(obs, state, done)
        logits = self.actor(h)
        dist = torch.distributions.Categorical(logits=logits, validate_args=False)
        if action is None:
            action = logits.argmax(dim=-1) if greedy else dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(h), new_state


class DuelingQNet(nn.Module):
    """Dueling Q-network: encoder → V (hidden→hidden→1) and A (hidden→hidden→|A|), Q = V + A − mean A."""

    def __init__(self, obs_space: spaces.Dict, n_actions: int, hidden: int = 256):
        super().__init__()
        self.encoder = DictEncoder(obs_space, hidden)
        d = self.encoder.out_dim
        self.value = nn.Sequential(layer_init(nn.Linear(d, hidden)), nn.ReLU(), layer_init(nn.Linear(hidden, 1)))
        self.advantage = nn.Sequential(layer_init(nn.Linear(d, hidden)), nn.ReLU(),
                                       layer_init(nn.Linear(hidden, n_actions)))

    def forward(self, obs: Obs) -> torch.Tensor:
        h = self.encoder(obs)
        adv = self.advantage(h)
        return self.value(h) + adv - adv.mean(dim=-1, keepdim=True)
