"""Optional Weights & Biases logging beside TensorBoard and JSONL (``logger.wandb=true``).

Every record the run writes to ``metrics.jsonl`` also goes to ``wandb.log`` at the same step; the
(redacted) config is the W&B run config; ``logger.group`` and ``logger.tags`` group and tag it (a sweep's
runs in one group, say).  Each run directory keeps its W&B run id in ``wandb_id``: a new run gets a fresh id
(a run started over with ``run.overwrite=true`` never appends to the old W&B run), ``run.resume=true`` continues
the same W&B run.  Offline: ``WANDB_MODE=offline`` (files in ``<run>/wandb``).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from llmguide.core.config import redact
from llmguide.core.errors import ConfigError
from llmguide.core.rundir import atomic_write_text

ID_FILE = "wandb_id"


def run_id(run_path: Path, resume: bool) -> str:
    """The W&B run id of this run directory: on resume the one it kept (a run from before ids were kept: the id
    derived from its name, as then); else a fresh one, kept in ``wandb_id``."""
    file = Path(run_path) / ID_FILE
    if resume:
        if file.exists() and file.read_text().strip():
            return file.read_text().strip()
        return Path(run_path).name.replace("/", "_")[:60]
    new = f"{Path(run_path).name[:40]}-{uuid.uuid4().hex[:8]}".replace("/", "_")
    atomic_write_text(file, new + "\n")
    return new


def init_kwargs(cfg: DictConfig, run_path: Path) -> dict[str, Any]:
    """The arguments of ``wandb.init`` for this run (project, entity, group, tags, id, resume)."""
    tags = cfg.logger.get("tags") or []
    return dict(project=str(cfg.logger.project), entity=cfg.logger.get("entity") or None,
                group=cfg.logger.get("group") or None, tags=[str(t) for t in tags] or None,
                name=Path(run_path).name, dir=str(run_path), config=redact(cfg),
                id=run_id(run_path, bool(cfg.run.get("resume"))), resume="allow")


class WandbSink:
    """A :class:`~llmguide.core.rundir.RunDir` sink that forwards numeric metrics to one W&B run."""

    def __init__(self, cfg: DictConfig, run_path: Any):
        try:
            import wandb
        except ImportError:
            raise ConfigError("logger.wandb", "needs the wandb package: pip install wandb") from None
        self.run = wandb.init(**init_kwargs(cfg, Path(run_path)))

    def __call__(self, step: int, metrics: dict[str, Any]) -> None:
        numeric = {k: v for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        if numeric:
            self.run.log(numeric, step=step)

    def close(self) -> None:
        self.run.finish()


def attach_wandb(cfg: DictConfig, run: Any) -> None:
    """Add a W&B sink to ``run`` when ``logger.wandb`` is true."""
    if cfg.get("logger") is not None and bool(cfg.logger.get("wandb")):
        run.sinks.append(WandbSink(cfg, run.path))
