"""Vectorised text envs (Gymnasium sync or subprocess) and per-env transition infos."""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from llmguide.core.config import cfg_get, plain_dict
from llmguide.envs.registry import family, load, make_env

TEXT_DEFAULTS: dict[str, Any] = {"caption": "", "events": [], "mission": ""}


def make_vector_env(env_cfg: Any, num_envs: int, seed: int, mode: str = "sync") -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``make_env(env_cfg, seed + i)``; "async" runs each in a subprocess; a family
    with its own batched env (``env=craftax``: one JAX env) builds that instead (``mode`` unused).

    Autoreset is SAME_STEP: a finished env's returned observation is already the reset one and
    the finished step's info is in ``info["final_info"]`` (see :func:`split_infos`).
    """
    fam = family(cfg_get(env_cfg, "name"))
    envs = _make_vector(fam, env_cfg, num_envs, seed, mode)
    return load(fam.wrap_vector)(envs, env_cfg, seed) if fam.wrap_vector else envs


def _make_vector(fam: Any, env_cfg: Any, num_envs: int, seed: int, mode: str) -> gym.vector.VectorEnv:
    if fam.make_vector is not None:
        return load(fam.make_vector)(env_cfg, num_envs, seed)
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    cfg = plain_dict(env_cfg)
    fns = [partial(make_env, cfg, seed + i) for i in range(num_envs)]
    if mode == "sync":
        return SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    if mode == "async":
        # forkserver: workers never inherit threads (LM servers, torch) from the parent
        fns = [partial(_worker_env, cfg, seed + i) for i in range(num_envs)]
        return AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP, context="forkserver")
    raise ValueError(f"vector mode must be 'sync' or 'async', got {mode!r}")


def _worker_env(cfg: dict, seed: int) -> gym.Env:
    """An async worker's env; the worker ignores Ctrl-C (a terminal sends it to the whole process group): the
    parent stops at its next step boundary and closes the workers itself.  (Gymnasium also calls the first one in
    the parent, for the spaces: there the handlers stay.)"""
    if multiprocessing.parent_process() is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return make_env(cfg, seed)


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
    first info).

    ``rows[i]`` is a read-only :class:`InfoRow` view and :meth:`column` one key for all envs; a key is
    converted once for all envs (``ndarray.tolist``), on its first read.  Readers touch few keys (a
    caption, the events), so 256 Craftax envs with 50 info keys never convert the other 48.
    """

    def __init__(self, infos: dict, num_envs: int):
        self._infos = infos
        self._n = num_envs
        # the info keys (an ordered set): no masks, no final_info / final_obs
        self._keys = dict.fromkeys(k for k in infos if not k.startswith("_") and k not in ("final_info", "final_obs"))
        self._cols: dict[str, tuple[list | None, Any]] = {}

    def __len__(self) -> int:
        return self._n

    def keys(self) -> list[str]:
        """Every info key any env has (a row holds those its mask allows)."""
        return list(self._keys)

    def _col(self, key: str) -> tuple[list | None, Any]:
        """(mask or None, values) of ``key``, converted on first use; KeyError if no env has it."""
        col = self._cols.get(key)
        if col is None:
            if key not in self._keys:
                raise KeyError(key)
            value, mask = self._infos[key], self._infos.get("_" + key)
            values = InfoRows(value, self._n) if isinstance(value, dict) else _column(value)
            col = self._cols[key] = (None if mask is None else _column(mask), values)
        return col

    def column(self, key: str, default: Any = None) -> list:
        """``[rows[i].get(key, default) for i in envs]``, without building any row."""
        try:
            mask, values = self._col(key)
        except KeyError:
            return [default] * self._n
        if isinstance(values, InfoRows):
            values = [dict(values[i]) for i in range(self._n)]
        return values if mask is None else [v if m else default for v, m in zip(values, mask, strict=True)]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        i = i + self._n if i < 0 else i
        if not 0 <= i < self._n:
            raise IndexError(f"env index {i} out of range for {self._n} envs")
        return InfoRow(self, i)


class InfoRow(Mapping):
    """Env ``i``'s info as a read-only mapping over :class:`InfoRows` (nested dicts come out as dicts)."""

    __slots__ = ("_rows", "_i")

    def __init__(self, rows: InfoRows, i: int):
        self._rows, self._i = rows, i

    def __getitem__(self, key: str) -> Any:
        mask, values = self._rows._col(key)
        if mask is not None and not mask[self._i]:
            raise KeyError(key)
        value = values[self._i]
        return dict(value) if isinstance(value, InfoRow) else value

    def __iter__(self) -> Iterator[str]:
        return (k for k in self._rows.keys() if k in self)

    def __contains__(self, key: object) -> bool:
        try:
            mask, _ = self._rows._col(key)  # type: ignore[arg-type]
        except KeyError:
            return False
        return mask is None or bool(mask[self._i])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"InfoRow({dict(self)!r})"


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

    def column(self, key: str, default: Any = None) -> list:
        """``[infos[i].get(key, default) for i in envs]`` without building the rows (text keys get
        their defaults as in the rows: ``caption`` "", ``events`` [], ``mission`` "")."""
        values = self._now.column(key, default)
        if self._finished is not None and any(self._finished):
            final = self._final.column(key, default)
            values = [f if done else v for v, f, done in zip(values, final, self._finished, strict=True)]
        if key in TEXT_DEFAULTS:
            fill = TEXT_DEFAULTS[key]
            values = [(list(fill) if isinstance(fill, list) else fill) if v is None else v for v in values]
            if key == "events":
                values = [list(v) for v in values]
        return [v if b is None else b.get(key, default) for v, b in zip(values, self._built, strict=True)]

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
