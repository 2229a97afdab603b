"""Run directory: resolved config, metrics (JSONL + TensorBoard), atomic checkpoints.

Layout of ``runs/<name>/``::

    config.yaml        resolved config, secrets redacted
    metrics.jsonl      one JSON object per logged step
    tb/                TensorBoard events
    checkpoints/       ckpt_<step>.pt (written atomically) and latest.pt
    report.md, *.png   written by ``llmguide report``
    provenance.jsonl   the code of every session that trained it: commit, dirty, version (:mod:`~llmguide.core.provenance`)
    .lock              names the pid of the one process writing the run (:class:`RunLock`)

Checkpoints load with ``torch.load(weights_only=True)`` (:func:`safe_torch_load`): tensors, numpy
arrays, scalars and dtypes, and plain Python values — a crafted file in a downloaded run folder
cannot run code.  Saving refuses a state that such loading would refuse.  Resume
(:meth:`RunDir.resume_state`) survives ordinary damage: a checkpoint that does not load is skipped
for the newest one that does (logged with the reason), a torn last line of ``metrics.jsonl`` is
dropped, and the metrics are cut to the resumed step (all of them when there is no checkpoint).

One writer per run: :class:`RunDir` holds an advisory lock (``flock``) on ``.lock`` while it is open,
so a second ``train`` (``collect``, ``eval`` ...) of the same run stops with the holder's pid.  Writes
never leave a half-written file (atomic replace; a metrics line the disk refuses is cut back), and a
write the file system refuses (no space, read-only) is a :class:`~llmguide.core.errors.StorageError`
naming the file.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import DictConfig

from llmguide.core.checkpoint_files import (  # noqa: F401 - safe_torch_load ...: part of this module's API
    load_or_skip,
    named_step,
    numpy_safe_globals,
    safe_torch_load,
    unsafe_globals,
)
from llmguide.core.config import redact, run_name
from llmguide.core.errors import ConfigError, LLMGuideError, UsageError, storage_errors
from llmguide.core.runlock import RunInUseError, RunLock  # noqa: F401 - RunInUseError: part of this module's API

log = logging.getLogger(__name__)


class CheckpointError(LLMGuideError):
    """A checkpoint cannot be written safely, or a run's checkpoints exist but none of them loads."""


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and ``os.replace``: the file is the old
    one or the new one, never part of one (a refused write: :class:`StorageError` naming ``path``)."""
    path = Path(path)
    with storage_errors(path):
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
    """One run's folder. Create with :meth:`open`; use as a context manager to close writers.

    While open it holds the run's :class:`RunLock` (``lock=False``: a reader that writes nothing)."""

    def __init__(self, path: str | Path, cfg: DictConfig | None = None, tensorboard: bool = True,
                 lock: RunLock | bool = True):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock = lock if isinstance(lock, RunLock) else RunLock(self.path).acquire() if lock else None
        try:
            self.checkpoint_dir = self.path / "checkpoints"
            self._metrics_file = open(self.path / "metrics.jsonl", "ab", buffering=0)  # noqa: SIM115
            self._tb = None
            self._tensorboard = tensorboard
            self.sinks: list[Any] = []   # extra loggers: sink(step, metrics) and sink.close() (e.g. W&B)
            if cfg is not None:
                self.write_config(cfg)
        except BaseException:
            if self.lock is not None:
                self.lock.release()
            raise

    @classmethod
    def open(cls, cfg: DictConfig, write_config: bool = True, outputs: Sequence[str] = ()) -> RunDir:
        """Open (or, with ``run.resume=true``, reopen) the run folder named by the config, its lock taken
        first; ``write_config=False``: the caller writes ``config.yaml`` later (a resume, once its
        checkpoint has loaded).  A folder that already holds a run (metrics, a checkpoint, or one of the
        ``outputs`` an offline step writes, e.g. ``dataset``) is refused unless ``run.resume=true`` (continue
        it: add to it) or ``run.overwrite=true`` (start over: those files are removed first)."""
        if problem := run_name(cfg.run.name):   # checked with the config too: never a folder outside run.dir
            raise ConfigError("run.name", problem)
        path = Path(cfg.run.dir) / (cfg.run.name or default_run_name(cfg))
        path.mkdir(parents=True, exist_ok=True)
        lock = RunLock(path).acquire()
        try:
            if not cfg.run.resume and holds_run(path, outputs):
                if not cfg.run.overwrite:
                    raise FileExistsError(
                        f"run directory {path} already holds a run; pass run.resume=true to continue it, "
                        "run.overwrite=true to start over, or another run.name"
                    )
                for f in [path / "metrics.jsonl", *path.glob("checkpoints/*.pt"), *path.glob("tb/*")]:
                    f.unlink(missing_ok=True)
                for output in outputs:
                    shutil.rmtree(path / output, ignore_errors=True)
                (path / "provenance.jsonl").unlink(missing_ok=True)   # the old run's code, not this one's
            return cls(path, cfg if write_config else None, lock=lock)
        except BaseException:
            lock.release()
            raise

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
        self._append_metrics(json.dumps({"step": int(step), "time": time.time(), **clean}) + "\n")
        if self.tb is not None:
            for key, value in clean.items():
                if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                    self.tb.add_scalar(key, value, int(step))
        for sink in self.sinks:
            sink(int(step), clean)

    def _append_metrics(self, line: str) -> None:
        """Append ``line`` whole to metrics.jsonl: when the disk refuses part of it, the file is cut back to
        where it was and a :class:`StorageError` names it."""
        fd, data = self._metrics_file.fileno(), line.encode("utf-8")
        start = os.fstat(fd).st_size
        with storage_errors(self.path / "metrics.jsonl"):
            try:
                while data:
                    data = data[os.write(fd, data):]
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                raise

    def write_json(self, name: str, obj: Any) -> None:
        atomic_write_text(self.path / name, json.dumps(obj, indent=2, default=_jsonable))

    # --- checkpoints --------------------------------------------------------------------
    def save_checkpoint(self, state: dict[str, Any], step: int, keep: int = 2) -> Path:
        """Write ``state`` atomically as ckpt_<step>.pt and latest.pt; keep the newest ``keep``.

        Raises :class:`CheckpointError` (before writing) if the state holds a type that
        :func:`safe_torch_load` refuses: better at the first checkpoint than at resume."""
        buffer = io.BytesIO()
        torch.save({"step": int(step), **state}, buffer)
        data = buffer.getvalue()
        refused = unsafe_globals(data)
        if refused:
            raise CheckpointError(f"the checkpoint state holds {', '.join(refused)}, which safe loading "
                                  "(weights_only) refuses; state_dict() must return tensors, numpy arrays and "
                                  "plain Python values (dict, list, tuple, str, int, float, bool, None)")
        self.checkpoint_dir.mkdir(exist_ok=True)
        target = self.checkpoint_dir / f"ckpt_{int(step):012d}.pt"
        atomic_write_bytes(target, data)
        atomic_write_bytes(self.checkpoint_dir / "latest.pt", data)
        for old in sorted(self.checkpoint_dir.glob("ckpt_*.pt"))[:-keep]:
            old.unlink(missing_ok=True)
        return target

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The state of :meth:`newest_checkpoint` (None when the run has no checkpoint)."""
        newest = self.newest_checkpoint()
        return newest[1] if newest is not None else None

    def newest_checkpoint(self) -> tuple[Path, dict[str, Any]] | None:
        """``(file, state)`` of the newest checkpoint that loads: the highest step among latest.pt and the
        ckpt_<step>.pt files (latest.pt is written just after the newest ckpt_<step>.pt, so a kill between the
        two leaves it a checkpoint behind); a file that does not load is skipped (logged with the reason).  None
        when the run has no checkpoint; :class:`CheckpointError` when it has some but none loads."""
        skipped: list[str] = []
        latest = self.checkpoint_dir / "latest.pt"
        state = load_or_skip(latest, skipped) if latest.exists() else None
        best = (latest, state) if state is not None else None
        for path in sorted(self.checkpoint_dir.glob("ckpt_*.pt"), reverse=True):   # zero-padded: newest first
            named = named_step(path)
            if best is not None and named is not None and named <= best[1]["step"]:
                break
            state = load_or_skip(path, skipped)
            if state is not None and (best is None or state["step"] > best[1]["step"]):
                best = (path, state)
                break
        if best is None and skipped:
            raise CheckpointError(f"no checkpoint in {self.checkpoint_dir} loads: {'; '.join(skipped)}")
        if best is not None and skipped:
            log.warning("using checkpoint %s (step %d); skipped: %s", best[0], best[1]["step"], "; ".join(skipped))
        return best

    def resume_agent(self, agent: Any) -> int | None:
        """``run.resume=true``: the newest checkpoint that loads (:meth:`newest_checkpoint`) into ``agent`` (its
        ``load_state_dict``; one that does not fit is a :class:`UsageError`), metrics.jsonl cut to its step, the
        step and file told on stderr; the step resumed from, or None without a checkpoint (the run starts over)."""
        newest = self.newest_checkpoint()
        if newest is not None:
            try:
                agent.load_state_dict(newest[1]["agent"])
            except (RuntimeError, ValueError, KeyError, TypeError) as err:   # another network, agent or module
                detail = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
                raise UsageError(f"the checkpoint in {self.checkpoint_dir} does not fit this run's agent ({detail}); "
                                 f"resume with the settings it was trained with ({self.path / 'config.yaml'})"
                                 ) from None
            print(f"llmguide: resuming {self.path} from step {newest[1]['step']} ({newest[0].name})",
                  file=sys.stderr, flush=True)
        self.cut_metrics_to(newest[1] if newest is not None else None)
        return newest[1]["step"] if newest is not None else None

    def resume_state(self) -> dict[str, Any] | None:
        """For ``run.resume=true``: the newest checkpoint that loads (see :meth:`load_checkpoint`),
        with metrics.jsonl cut to its step (:meth:`cut_metrics_to`)."""
        state = self.load_checkpoint()
        self.cut_metrics_to(state)
        return state

    def cut_metrics_to(self, state: dict[str, Any] | None) -> None:
        """A resume from ``state`` (a loaded checkpoint): metrics.jsonl cut to its step; every metric row
        dropped when None (the run starts over from step 0)."""
        if state is None:
            log.warning("run.resume=true but %s has no checkpoint: starting from step 0", self.path)
            self.truncate_metrics_after(None)
        else:
            log.info("resuming %s from step %d", self.path, state["step"])
            self.truncate_metrics_after(state["step"])

    def checkpoint_step(self) -> int | None:
        """The step of the newest ``ckpt_<step>.pt`` (None when there is none)."""
        steps = [step for p in self.checkpoint_dir.glob("ckpt_*.pt") if (step := named_step(p)) is not None]
        return max(steps, default=None)

    def truncate_metrics_after(self, step: int | None) -> None:
        """Drop metric lines logged after ``step`` (every line when None), and lines that do not
        parse (a torn last line from a kill), so that resumed curves do not double up."""
        self._metrics_file.close()
        path = self.path / "metrics.jsonl"
        kept, torn = [], 0
        text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        for line in text.splitlines():
            if not line.strip():
                continue
            record = _record(line)
            if record is None:
                torn += 1
            elif step is not None and record["step"] <= step:
                kept.append(line)
        if torn:
            log.warning("%s: dropped %d line(s) that do not parse (a write cut off by a kill)", path, torn)
        atomic_write_text(path, "".join(ln + "\n" for ln in kept))
        self._metrics_file = open(path, "ab", buffering=0)  # noqa: SIM115

    def close(self) -> None:
        """Close the writers and release the run's lock."""
        try:
            for sink in self.sinks:
                sink.close()
            self.sinks = []
            self._metrics_file.close()
            if self._tb is not None:
                self._tb.close()
        finally:
            if self.lock is not None:
                self.lock.release()

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def holds_run(path: Path, outputs: Sequence[str] = ()) -> bool:
    """Whether ``path`` holds a run: a metric row, a checkpoint, or one of ``outputs`` (an offline step's)."""
    metrics = path / "metrics.jsonl"
    return ((metrics.exists() and metrics.stat().st_size > 0) or any(path.glob("checkpoints/*.pt"))
            or any((path / output).exists() for output in outputs))


def read_metrics(run_path: str | Path) -> list[dict[str, Any]]:
    """All records of a run's metrics.jsonl (lines that are not records are skipped: see :func:`scan_metrics`)."""
    return scan_metrics(run_path)[0]


def scan_metrics(run_path: str | Path) -> tuple[list[dict[str, Any]], int]:
    """The records of a run's metrics.jsonl (JSON objects with a finite numeric ``step``) and how many
    non-empty lines were not records and were skipped (a torn last line from a kill, a hand-edited row).
    ``run_path`` is the run folder, or a metrics file itself (a copy under another name)."""
    path = Path(run_path)
    records, skipped = [], 0
    for line in (path if path.is_file() else path / "metrics.jsonl").read_text(encoding="utf-8",
                                                                              errors="replace").splitlines():
        if line.strip():
            record = _record(line)
            if record is None:
                skipped += 1
            else:
                records.append(record)
    return records, skipped


def _record(line: str) -> dict[str, Any] | None:
    """One metrics.jsonl line as a record: a JSON object with a finite numeric ``step`` (else None)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    step = record.get("step") if isinstance(record, dict) else None
    if not isinstance(step, int | float) or isinstance(step, bool) or not math.isfinite(step):
        return None
    return record


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
