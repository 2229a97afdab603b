"""Optional Weights & Biases logging beside TensorBoard and JSONL (``logger.wandb=true``).

Every record the run writes to ``metrics.jsonl`` also goes to ``wandb.log`` at the same step; the
(redacted) config is the W&B run config.  Offline: ``WANDB_MODE=offline`` (files in ``<run>/wandb``).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from llmguide.core.config import redact
from llmguide.core.errors import ConfigError


class WandbSink:
    """A :class:`~llmguide.core.rundir.RunDir` sink that forwards numeric metrics to one W&B run."""

    def __init__(self, cfg: DictConfig, run_path: Any):
        try:
            import wandb
        except ImportError:
            raise ConfigError("logger.wandb", "needs the wandb package: pip install wandb") from None
        self.run = wandb.init(project=str(cfg.logger.project), entity=cfg.logger.get("entity") or None,
                              name=run_path.name, dir=str(run_path), config=redact(cfg), resume="allow",
                              id=f"{run_path.name}".replace("/", "_")[:60])

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
