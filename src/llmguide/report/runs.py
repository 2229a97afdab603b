"""Reading run directories (``config.yaml``, ``metrics.jsonl``, ``eval.json``) and grouping them into arms.

A problem with a run's files is a note on the :class:`Run`, never an exception (except a missing folder, and a
folder that holds no run: neither ``config.yaml`` nor ``metrics.jsonl``).  Lines of ``metrics.jsonl`` that are not
records (JSON objects with a numeric step) are skipped, and the note says how many.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from llmguide.core.errors import UsageError
from llmguide.core.rundir import scan_metrics

RETURN_KEYS = ("charts/episodic_return", "episodic_return")
SUCCESS_KEY = "charts/success"
ACH_PREFIX = "achievements/"
LM_PREFIX = "lm/"
FINAL_FRACTION = 0.1  # final value = mean over the values logged in the last 10% of a run's steps


@dataclass
class Run:
    """One run directory's config and metric records, plus what was wrong with it."""

    path: Path
    method: str
    env: str | None
    seed: Any
    records: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    eval: dict[str, float] = field(default_factory=dict)
    label: str = ""


def finite(value: Any) -> bool:
    """A real, finite number (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def fmt(x: float | None, digits: int = 2) -> str:
    """A number as the report prints it (``n/a`` for None, NaN or infinity)."""
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def load_run(path: str | Path) -> Run:
    """Read ``config.yaml``, ``metrics.jsonl`` and ``eval.json``; problems become notes."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"run directory not found: {path}")
    check_holds_run(path)
    cfg: dict[str, Any] = {}
    notes = []
    if (path / "config.yaml").exists():
        try:
            cfg = yaml.safe_load((path / "config.yaml").read_text()) or {}
        except yaml.YAMLError as err:
            notes.append(f"config.yaml unreadable ({str(err).splitlines()[0]}); labelled by folder name")
    else:
        notes.append("no config.yaml; labelled by folder name")
    method = (cfg.get("method") or {}).get("name") or path.name
    run = Run(path, str(method), (cfg.get("env") or {}).get("name"), cfg.get("seed"), notes=notes)
    if (path / "metrics.jsonl").exists():
        run.records, skipped = scan_metrics(path)
        if skipped:
            notes.append(f"metrics.jsonl: skipped {skipped} line(s) that are not records (a JSON object with a "
                         "numeric step)")
        if not run.records:
            notes.append("metrics.jsonl is empty" if not skipped else "metrics.jsonl holds no records")
    else:
        notes.append("no metrics.jsonl")
    if (path / "eval.json").exists():
        try:
            data = json.loads((path / "eval.json").read_text())
            data = data if isinstance(data, dict) else {}
            run.eval = {k: float(v) for k, v in data.items() if finite(v) and k not in ("seed", "step")}
        except json.JSONDecodeError:
            notes.append("eval.json unreadable")
    return run


RUN_FILES = ("config.yaml", "metrics.jsonl")


def check_holds_run(path: Path) -> None:
    """A folder with neither of :data:`RUN_FILES` is no run: a :class:`UsageError` saying so (and where its runs
    are, when its subfolders hold some), before anything is written."""
    if any((path / name).is_file() for name in RUN_FILES):
        return
    inside = sorted(p for p in path.iterdir() if p.is_dir() and any((p / n).is_file() for n in RUN_FILES))
    hint = (f"; its subfolders hold {len(inside)} run(s), e.g. {inside[0]}: give those" if inside
            else "; give a run directory (runs/<name>)")
    raise UsageError(f"{path} holds no run (no {' or '.join(RUN_FILES)}){hint}")


def group_runs(runs: list[Run], group_by: str | Mapping[str, str] = "method") -> dict[str, list[Run]]:
    """Runs by label: ``method`` (``method / env`` when several envs are present), ``folder`` (the run
    directory's parent folder name, e.g. the arm of ``<root>/<arm>/seed-0``), or a mapping from a run
    directory (as given to :func:`load_run`, or resolved) to its label (a run it does not name: ``method``)."""
    if isinstance(group_by, str) and group_by not in ("method", "folder"):
        raise ValueError(f"group_by must be 'method', 'folder' or a mapping of run dir to label, got {group_by!r}")
    several_envs = len({r.env for r in runs if r.env}) > 1
    named = {} if isinstance(group_by, str) else {Path(k).resolve(): v for k, v in group_by.items()}
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if run.path.resolve() in named:
            run.label = named[run.path.resolve()]
        elif group_by == "folder":
            run.label = run.path.resolve().parent.name
        else:
            run.label = f"{run.method} / {run.env}" if several_envs and run.env else run.method
        groups.setdefault(run.label, []).append(run)
    return groups


def seed_key(run: Run) -> Any:
    """The run's seed (its folder name when the config has none): what pairs runs across arms."""
    return run.seed if run.seed is not None else run.path.name


def last_step(run: Run) -> float:
    return max((rec.get("step", 0) for rec in run.records if finite(rec.get("step"))), default=0)


# --- per-run series and values ---------------------------------------------------------------------------
def metric_series(run: Run, keys: str | tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Steps and values of every record holding one of ``keys`` (the first present per record)."""
    keys = (keys,) if isinstance(keys, str) else keys
    steps, values = [], []
    for rec in run.records:
        key = next((k for k in keys if k in rec), None)
        if key is not None and finite(rec[key]) and finite(rec.get("step")):
            steps.append(rec["step"])
            values.append(rec[key])
    return np.asarray(steps, np.float64), np.asarray(values, np.float64)


def episode_returns(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """Steps and returns of every finished episode in the run."""
    return metric_series(run, RETURN_KEYS)


def final_value(steps: np.ndarray, values: np.ndarray) -> float:
    """Mean of the values logged in the last ``FINAL_FRACTION`` of the run's logged steps."""
    return float(values[steps >= steps.max() * (1 - FINAL_FRACTION)].mean())


def train_return(records: list[dict[str, Any]]) -> tuple[float, int] | None:
    """A run's train return, ``(value, episodes)``: the mean episodic return logged in the last
    ``FINAL_FRACTION`` of its steps (what the report calls "train return (last 10%)") and how many episodes
    that averages; None when no episode finished."""
    steps, values = episode_returns(Run(Path("."), "", None, None, records=records))
    if not len(steps):
        return None
    last = steps >= steps.max() * (1 - FINAL_FRACTION)
    return float(values[last].mean()), int(last.sum())


def lm_stats(run: Run) -> dict[str, float]:
    """The last logged value of every ``lm/*`` key (without the prefix)."""
    last: dict[str, float] = {}
    for rec in run.records:
        for k, v in rec.items():
            if k.startswith(LM_PREFIX) and finite(v):
                last[k[len(LM_PREFIX):]] = float(v)
    return last


def success_rate(run: Run) -> float | None:
    """Mean of ``charts/success`` over the run's episodes; None if never logged."""
    vals = [float(rec[SUCCESS_KEY]) for rec in run.records if finite(rec.get(SUCCESS_KEY))]
    return float(np.mean(vals)) if vals else None
