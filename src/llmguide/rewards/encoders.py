"""Small observation encoders for reward modules, and helpers for (T, N, ...) observation batches.

Observations are a ``gymnasium.spaces.Dict`` of Boxes (a bare Box is treated as ``{"obs": box}``).
3-D Boxes are images ``(C, H, W)`` and go through a small CNN (uint8 tensors are scaled by 1/255);
every other Box is flattened, and all of them are concatenated into one MLP input.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

DEFAULT_KEY = "obs"


def box_spaces(obs_space: spaces.Space) -> dict[str, spaces.Box]:
    """The Boxes of an observation space, keyed by name; raise a clear error for anything else."""
    if isinstance(obs_space, spaces.Box):
        return {DEFAULT_KEY: obs_space}
    if isinstance(obs_space, spaces.Dict):
        boxes = {}
        for key, sub in obs_space.spaces.items():
            if not isinstance(sub, spaces.Box):
                raise ValueError(f"reward modules need Box observations; key '{key}' is {sub}")
            boxes[key] = sub
        return boxes
    raise ValueError(f"reward modules need a Box or Dict-of-Box observation space, got {obs_space}")


def as_obs_dict(obs: Any) -> dict[str, np.ndarray]:
    """A dict of arrays (a bare array becomes ``{"obs": array}``)."""
    if isinstance(obs, dict):
        return {k: np.asarray(v) for k, v in obs.items()}
    return {DEFAULT_KEY: np.asarray(obs)}


def flatten_leading(obs: dict[str, np.ndarray], dims: int = 2) -> dict[str, np.ndarray]:
    """Merge the first ``dims`` axes, e.g. ``(T, N, ...)`` -> ``(T*N, ...)``."""
    return {k: v.reshape(-1, *v.shape[dims:]) for k, v in obs.items()}


def finite_rows(*batches: dict[str, np.ndarray]) -> np.ndarray:
    """Boolean mask of the rows (leading axis) whose values are all finite in every batch."""
    n = len(next(iter(batches[0].values())))
    ok = np.ones(n, dtype=bool)
    for obs in batches:
        for value in obs.values():
            value = np.asarray(value)
            if value.dtype.kind == "f":
                ok &= np.isfinite(value.reshape(n, -1)).all(axis=1)
    return ok


def to_tensors(obs: dict[str, np.ndarray], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Arrays to tensors; uint8 stays uint8 (the encoder scales it), everything else float32."""
    out = {}
    for key, value in obs.items():
        value = np.asarray(value)
        dtype = torch.uint8 if value.dtype == np.uint8 else torch.float32
        out[key] = torch.as_tensor(value, dtype=dtype, device=device)
    return out


class ObsEncoder(nn.Module):
    """CNN for each 3-D Box, MLP over the concatenated flat Boxes, then a linear layer to ``out_dim``."""

    def __init__(self, obs_space: spaces.Space, out_dim: int = 128, hidden: int = 256,
                 channels: tuple[int, ...] = (32, 64, 64)):
        super().__init__()
        boxes = box_spaces(obs_space)
        self.image_keys = sorted(k for k, b in boxes.items() if len(b.shape) == 3)
        self.flat_keys = sorted(k for k, b in boxes.items() if len(b.shape) != 3)
        cnns = {k: _cnn(boxes[k].shape, channels) for k in self.image_keys}
        self.cnns = nn.ModuleDict({k: net for k, (net, _) in cnns.items()})
        flat_dim = sum(int(np.prod(boxes[k].shape)) for k in self.flat_keys)
        self.mlp = nn.Sequential(nn.Linear(flat_dim, hidden), nn.ReLU()) if flat_dim else None
        total = sum(size for _, size in cnns.values()) + (hidden if flat_dim else 0)
        self.head = nn.Linear(total, out_dim)
        self.out_dim = out_dim

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = []
        for key in self.image_keys:
            x = obs[key]
            x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
            parts.append(self.cnns[key](x))
        if self.mlp is not None:
            flat = torch.cat([obs[k].float().flatten(1) for k in self.flat_keys], dim=1)
            parts.append(self.mlp(flat))
        return self.head(torch.cat(parts, dim=1))


def _cnn(shape: tuple[int, ...], channels: tuple[int, ...]) -> tuple[nn.Sequential, int]:
    """3x3 convolutions (stride 2 while the map is >= 16 wide); returns the net and its output size."""
    c, h, w = shape
    layers: list[nn.Module] = []
    for ch in channels:
        stride = 2 if min(h, w) >= 16 else 1
        layers += [nn.Conv2d(c, ch, 3, stride=stride, padding=1), nn.ReLU()]
        c, h, w = ch, (h - 1) // stride + 1, (w - 1) // stride + 1
    layers.append(nn.Flatten())
    return nn.Sequential(*layers), c * h * w


def mlp(in_dim: int, out_dim: int, hidden: int = 256, layers: int = 2) -> nn.Sequential:
    """A plain ReLU MLP with ``layers`` hidden layers."""
    mods: list[nn.Module] = []
    d = in_dim
    for _ in range(layers):
        mods += [nn.Linear(d, hidden), nn.ReLU()]
        d = hidden
    mods.append(nn.Linear(d, out_dim))
    return nn.Sequential(*mods)
