"""Vectorised text envs (Gymnasium sync or subprocess) and per-env transition infos."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

TEXT_DEFAULTS: dict[str, Any] = {"caption": "", "events": [], "mission": ""}


def _plain_cfg(env_cfg: Any) -> dict:
    """A picklable plain-dict copy of an env config (DictConfig or dict)."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(env_cfg, DictConfig):
            return OmegaConf.to_container(env_cfg, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a core dependency
        pass
    return dict(env_cfg)


def make_vector_env(env_cfg: Any, num_envs: int, seed: int, mode: str = "sync") -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``make_env(env_cfg, seed + i)``; "async" runs each in a subprocess.

    Autoreset is SAME_STEP: a finished env's returned observation is already the reset one and
    the finished step's info is in ``info["final_info"]`` (see :func:`split_infos`).
    """
    from llmguide.envs import make_env

    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    cfg = _plain_cfg(env_cfg)
    fns = [partial(make_env, cfg, seed + i) for i in range(num_envs)]
    if mode == "sync":
        return SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    if mode == "async":
        # forkserver: workers never inherit threads (LM servers, torch) from the parent
        return AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP, context="forkserver")
    raise ValueError(f"vector mode must be 'sync' or 'async', got {mode!r}")


def object_array(items: list) -> np.ndarray:
    """A 1-D object array holding ``items`` as they are (lists stay lists), for per-env info values."""
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def _column(value: Any) -> list:
    """An aggregated info value as a plain list, one item per env (NumPy scalars → Python, in C)."""
    return value.tolist() if isinstance(value, np.ndarray) else list(value)


class InfoRows(Sequence):
    """The top-level info of every env ``i`` of a Gymnasium aggregated info dict (masks ``_key``
    respected; ``final_info``/``final_obs`` left out: for a finished env this is its new episode's
    first info), built column by column on first access.

    Converting each key once for all envs (``ndarray.tolist``) instead of once per env and key is
    what keeps 256 Craftax envs with 50 info keys off the hot path.
    """

    def __init__(self, infos: dict, num_envs: int):
        self._infos = infos
        self._n = num_envs
        self._cols: dict[str, tuple[list | None, Any]] | None = None
        self._rows: list[dict | None] = [None] * num_envs

    def __len__(self) -> int:
        return self._n

    def _columns(self) -> dict[str, tuple[list | None, Any]]:
        if self._cols is None:
            self._cols = {}
            for key, value in self._infos.items():
                if key.startswith("_") or key in ("final_info", "final_obs"):
                    continue
                mask = self._infos.get("_" + key)
                col = InfoRows(value, self._n) if isinstance(value, dict) else _column(value)
                self._cols[key] = (None if mask is None else _column(mask), col)
        return self._cols

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        i = i + self._n if i < 0 else i
        if not 0 <= i < self._n:
            raise IndexError(f"env index {i} out of range for {self._n} envs")
        row = self._rows[i]
        if row is None:
            row = self._rows[i] = {key: col[i] for key, (mask, col) in self._columns().items()
                                   if mask is None or mask[i]}
        return row


class EnvInfos(Sequence):
    """The per-env transition infos of one vector step, built on first access to each env.

    A learner hands this to every reward module and the episode tracker on every step; most of
    them read few envs or none (RND reads no info, the tracker only finished envs), so building
    all ``num_envs`` dicts eagerly was the hot path's per-env Python loop (``env=craftax``: 256 per step).
    """

    def __init__(self, infos: dict, num_envs: int):
        self._now = InfoRows(infos, num_envs)
        final = infos.get("final_info")
        mask = infos.get("_final_info")
        self._final = InfoRows(final, num_envs) if final is not None and mask is not None else None
        self._finished = _column(mask) if self._final is not None else None
        self._built: list[dict | None] = [None] * num_envs

    def __len__(self) -> int:
        return len(self._built)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = i + len(self) if i < 0 else i
        if not 0 <= i < len(self):
            raise IndexError(f"env index {i} out of range for {len(self)} envs")
        info = self._built[i]
        if info is None:
            source = self._final if self._finished is not None and self._finished[i] else self._now
            info = self._built[i] = _with_text_defaults(dict(source[i]))
        return info

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"EnvInfos({list(self)!r})"


def _with_text_defaults(info: dict) -> dict:
    for key, default in TEXT_DEFAULTS.items():
        if info.get(key) is None:
            info[key] = list(default) if isinstance(default, list) else default
    info["events"] = list(info["events"])
    return info


def split_infos(infos: dict, num_envs: int) -> EnvInfos:
    """One plain dict per env describing the transition that just happened (built lazily).

    For envs that just finished (SAME_STEP autoreset) the info comes from ``final_info``; every
    dict has ``caption`` (str), ``events`` (list[str]) and ``mission`` (str), plus env extras.
    """
    return EnvInfos(infos, num_envs)
