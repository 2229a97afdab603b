"""Run directory: resolved config, metrics (JSONL + TensorBoard), atomic checkpoints.

Layout of ``runs/<name>/``::

    config.yaml        resolved config, secrets redacted
    metrics.jsonl      one JSON object per logged step
    tb/                TensorBoard events
    checkpoints/       ckpt_<step>.pt (written atomically) and latest.pt
    report.md, *.png   written by ``llmguide report``
"""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import DictConfig

from llmguide.core.config import redact


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` that never leaves a half-written file behind."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def default_run_name(cfg: DictConfig) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{cfg.method.name}-{cfg.env.name}-s{cfg.seed}-{stamp}"


class RunDir:
    """One run's folder. Create with :meth:`open`; use as a context manager to close writers."""

    def __init__(self, path: str | Path, cfg: DictConfig | None = None, tensorboard: bool = True):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.checkpoint_dir = self.path / "checkpoints"
        self._metrics_file = open(self.path / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        self._tb = None
        self._tensorboard = tensorboard
        self.sinks: list[Any] = []   # extra loggers: sink(step, metrics) and sink.close() (e.g. W&B)
        if cfg is not None:
            self.write_config(cfg)

    @classmethod
    def open(cls, cfg: DictConfig) -> RunDir:
        """Open (or, with ``run.resume=true``, reopen) the run folder named by the config."""
        name = cfg.run.name or default_run_name(cfg)
        path = Path(cfg.run.dir) / name
        if path.exists() and not cfg.run.resume and (path / "metrics.jsonl").exists():
            if any(path.glob("checkpoints/*.pt")) or (path / "metrics.jsonl").stat().st_size > 0:
                if not cfg.run.overwrite:
                    raise FileExistsError(
                        f"run directory {path} already holds a run; pass run.resume=true to continue it, "
                        "run.overwrite=true to start over, or another run.name"
                    )
                for f in [path / "metrics.jsonl", *path.glob("checkpoints/*.pt"), *path.glob("tb/*")]:
                    f.unlink()
        return cls(path, cfg)

    # --- config -----------------------------------------------------------------------
    def write_config(self, cfg: DictConfig) -> None:
        atomic_write_text(self.path / "config.yaml", yaml.safe_dump(redact(cfg), sort_keys=False))

    def read_config(self) -> dict:
        return yaml.safe_load((self.path / "config.yaml").read_text())

    # --- metrics ----------------------------------------------------------------------
    @property
    def tb(self):
        if self._tb is None and self._tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.path / "tb"))
        return self._tb

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Append one JSON line and write every numeric value to TensorBoard."""
        clean = {k: _jsonable(v) for k, v in metrics.items()}
        self._metrics_file.write(json.dumps({"step": int(step), "time": time.time(), **clean}) + "\n")
        self._metrics_file.flush()
        if self.tb is not None:
            for key, value in clean.items():
                if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                    self.tb.add_scalar(key, value, int(step))
        for sink in self.sinks:
            sink(int(step), clean)

    def write_json(self, name: str, obj: Any) -> None:
        atomic_write_text(self.path / name, json.dumps(obj, indent=2, default=_jsonable))

    # --- checkpoints --------------------------------------------------------------------
    def save_checkpoint(self, state: dict[str, Any], step: int, keep: int = 2) -> Path:
        """Write ``state`` atomically as ckpt_<step>.pt and latest.pt; keep the newest ``keep``."""
        self.checkpoint_dir.mkdir(exist_ok=True)
        target = self.checkpoint_dir / f"ckpt_{int(step):012d}.pt"
        atomic_torch_save({"step": int(step), **state}, target)
        atomic_write_bytes(self.checkpoint_dir / "latest.pt", target.read_bytes())
        for old in sorted(self.checkpoint_dir.glob("ckpt_*.pt"))[:-keep]:
            old.unlink(missing_ok=True)
        return target

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The newest checkpoint's state, or None when the run has none."""
        latest = self.checkpoint_dir / "latest.pt"
        if not latest.exists():
            return None
        return torch.load(latest, map_location="cpu", weights_only=False)

    def truncate_metrics_after(self, step: int) -> None:
        """Drop metric lines logged after ``step`` (used on resume so curves do not double up)."""
        self._metrics_file.close()
        path = self.path / "metrics.jsonl"
        lines = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
        atomic_write_text(path, "".join(ln + "\n" for ln in lines))
        self._metrics_file = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
        self.sinks = []
        self._metrics_file.close()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_metrics(run_path: str | Path) -> list[dict[str, Any]]:
    """All records of a run's metrics.jsonl (a torn last line from a kill is skipped)."""
    records = []
    for line in (Path(run_path) / "metrics.jsonl").read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.item() if value.numel() == 1 else value.tolist()
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return value
