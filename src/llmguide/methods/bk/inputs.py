"""What BK's steps read from the config and the previous step: the variant, the input run directories,
the sandbox that runs LM-written programs, the env's action strings and the dataset's fingerprint."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from llmguide.core.errors import ConfigError
from llmguide.data import EpisodeDataset

VARIANTS = ("bk_code", "bk_pref", "bk_goal", "bk_random_phi")

def variant_of(cfg: DictConfig) -> str:
    name = str(cfg.method.name)
    if name not in VARIANTS:
        raise ConfigError("method.name", f"the BK pipeline handles {list(VARIANTS)}, got {name!r}")
    return name


def positive(cfg: DictConfig, key: str) -> Any:
    value = OmegaConf.select(cfg, f"method.{key}", default=None)
    if value is None or value <= 0:
        raise ConfigError(f"method.{key}", f"must be > 0, got {value!r}")
    return value


def paths(value: Any, key: str) -> list[Path]:
    if value in (None, ""):
        raise ConfigError(key, "is required: the run directory written by the previous step "
                               f"(e.g. {key}=runs/NAME)")
    items = list(value) if isinstance(value, list | ListConfig) else str(value).split(",")
    return [Path(str(p).strip()) for p in items if str(p).strip()]


def make_sandbox(cfg: DictConfig, scratch: Path):
    from llmguide.sandbox import Sandbox, SandboxLimits

    k = cfg.method.code
    return Sandbox(SandboxLimits(timeout=float(k.timeout), memory_mb=int(k.memory_mb), isolation=str(k.isolation)),
                   scratch_root=scratch)


def action_names(cfg: DictConfig) -> list[str] | None:
    """The env's action strings (e.g. BabyAI "turn left", ...), or None if it has none."""
    from llmguide.envs import make_env

    env = make_env(cfg.env, int(cfg.seed))
    try:
        names = getattr(env.unwrapped, "action_strings", None) or getattr(env.unwrapped, "action_names", None)
        return [str(n) for n in names] if names else None
    finally:
        env.close()


def data_hash(dataset: EpisodeDataset) -> str:
    digest = hashlib.sha256()
    for f in dataset.files:
        digest.update(f.name.encode())
        digest.update(str(f.stat().st_size).encode())
    return digest.hexdigest()[:16]
