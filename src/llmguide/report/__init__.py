"""``llmguide report RUN_DIR...``: Markdown + PNG summary of one or more runs, seeds aggregated.

Runs are grouped by ``method.name`` from their ``config.yaml`` (``method / env`` when several
envs are present; the directory name when the config is missing), by their parent folder
(``group_by="folder"``: the arm in ``<root>/<arm>/seed-N``, the layout of ``benchmarks/harness``),
or by a mapping of run directory to arm (the sweep's arms). Metric keys read from each
run's ``metrics.jsonl`` (written by :class:`llmguide.core.rundir.RunDir`):

- ``charts/episodic_return`` (or ``episodic_return``): one record per finished episode, at the
  env step it finished. Learning curves bin these on a common step grid (mean per bin, carried
  forward over empty bins; ``smooth=N`` first takes each run's trailing mean over N episodes);
  train return (last 10%) = mean over the last 10% of a run's steps; IQM and mean over seeds with an interval
  by the rules below. With one seed there is no interval (said so). When no run finished an
  episode, the plot shows the per-update mean rewards (``charts/extrinsic_reward``,
  ``charts/intrinsic_reward``) instead.
- ``achievements/<name>``: a record holding any such key is **one finished episode**; the value
  is 1/0 (unlocked in that episode or not) or a rate in [0, 1]; an achievement missing from an
  episode record counts as 0. Per run: success rate s_i (%) = mean over episode records;
  Crafter score = exp(mean_i ln(1 + s_i)) - 1 over the 22 Crafter achievements (when every
  logged name is a Crafter achievement); achievements / episode = mean of the per-record sums.
  Scores are computed per run, then mean ± std over seeds (as the Crafter paper does).
- ``charts/success``: per-episode success (0/1); shown as a rate.
- ``lm/<stat>``: cumulative counters or running statistics; the last logged value per run, mean over
  runs. The report shows a short table (requests, answered and fresh fractions, latency p50/p95,
  fallbacks, errors, cache hit); every ``lm/*`` value goes to ``lm_stats.json``.
- ``eval.json`` beside the metrics: the evaluation's return, length, success and score, mean over seeds, and a link to each run's eval.json.

Intervals over seeds follow :mod:`llmguide.stats`: with 2-5 seeds a band or interval is the min-max
**range** over seeds (never called a CI), with 6-9 seeds a Student-t 95% CI of the mean, with >= 10 a
95% bootstrap CI (rliable's stratified bootstrap for returns). With a named control arm
(``control="ppo"``) the report adds a table of per-seed **paired differences** of every arm against it on
``metric`` (final value per run, default the episodic return), matched by seed: mean, t-interval, p-value,
Wilcoxon and sign tests (n >= 6), bootstrap CI (n >= 10) and the smallest difference the seeds can detect
(:func:`summarize`).

Where it goes: ``out`` when given; one run directory's report is its own ``report.md`` (the Runner writes
it at the end of training; a folder that is no run's, e.g. a folder of config sources, is refused:
:func:`is_run_folder`); several runs without ``out`` get a new folder
``<their common parent>/report-<YYYYmmdd-HHMMSS>/`` (:func:`default_out`), so no run's report is replaced.

Missing or partial files give a note in the report, never a traceback.

Modules: :mod:`.runs` (reading and grouping runs), :mod:`.curves` (binned curves, smoothing, bands,
``learning_curves.png``), :mod:`.tables` (returns, achievements, LM and eval tables), :mod:`.study`
(arm values and paired statistics).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from llmguide.core.errors import LLMGuideError, UsageError
from llmguide.core.rundir import atomic_write_text
from llmguide.report.curves import binned_curve, learning_plot, seed_band
from llmguide.report.runs import RETURN_KEYS, Run, group_runs, last_step, load_run
from llmguide.report.study import study_section, summarize
from llmguide.report.tables import (
    CRAFTER_ACHIEVEMENTS,
    achievement_stats,
    achievements_section,
    crafter_score,
    eval_table,
    lm_section,
    returns_table,
    success_line,
)

__all__ = ["CRAFTER_ACHIEVEMENTS", "Run", "achievement_stats", "binned_curve", "crafter_score", "default_out",
           "load_run", "seed_band", "study_report", "summarize", "write_report"]


def default_out(run_dirs: list[str | Path]) -> Path:
    """Where a report of ``run_dirs`` goes without ``out``: one run's own folder, or for several runs a new
    folder ``report-<YYYYmmdd-HHMMSS>`` (``-2``, ``-3`` ... if taken) in their common parent folder (the
    working directory when they share only the filesystem root), created here."""
    paths = list(dict.fromkeys(Path(p).resolve() for p in run_dirs))
    if len(paths) == 1:
        if not is_run_folder(paths[0]):   # e.g. src/llmguide/conf: a config source, no run to write into
            raise UsageError(f"{paths[0]} is no run's folder (no metrics.jsonl or checkpoints/, and its config.yaml "
                             "is a config source with a defaults list): its report is not written there; give "
                             "--out DIR")
        return paths[0]
    parent = Path(os.path.commonpath([p.parent for p in paths]))
    if parent == Path(parent.anchor):
        parent = Path.cwd()
    stamp = f"report-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    for i in range(1, 1000):
        folder = parent / (stamp if i == 1 else f"{stamp}-{i}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"no free report folder {parent / stamp}-N")


RUN_OUTPUTS = ("metrics.jsonl", "checkpoints", "eval.json", "provenance.jsonl")   # what only a run writes


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a run's folder, where its own report may go: it holds what a run writes, or a
    ``config.yaml`` a run saved (a Hydra config source, with its ``defaults`` list, is none)."""
    if any((path / name).exists() for name in RUN_OUTPUTS):
        return True
    try:
        cfg = yaml.safe_load((path / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(cfg, dict) and "defaults" not in cfg


def write_report(run_dirs: list[str], out: str | None = None, reps: int = 2000, *,
                 group_by: str | Mapping[str, str] = "method", control: str | None = None, metric: str | None = None,
                 metric_name: str | None = None, smooth: int | None = None) -> Path:
    """Write ``report.md`` (+ PNGs) summarising ``run_dirs`` into ``out`` (default: :func:`default_out`).

    ``group_by``: ``method``, ``folder`` or a mapping of run dir to arm (see :func:`.runs.group_runs`). With
    ``control`` (a group label) or ``metric`` (a metrics.jsonl key; default the episodic return) a section on
    that metric is added: per-arm final values with intervals, ``curves.png`` and, with a control, paired
    statistics (:func:`summarize`). ``smooth=N``: curves are each run's trailing mean over N logged values."""
    return study_report(run_dirs, out, reps, group_by=group_by, control=control, metric=metric,
                        metric_name=metric_name, smooth=smooth)[0]


def study_report(run_dirs: list[str], out: str | Path | None = None, reps: int = 2000, *,
                 group_by: str | Mapping[str, str] = "method", control: str | None = None, metric: str | None = None,
                 metric_name: str | None = None, title: str = "llmguide report", intro: list[str] | None = None,
                 smooth: int | None = None) -> tuple[Path, dict[str, Any] | None]:
    """:func:`write_report` that also returns :func:`summarize`'s result (None without control or metric),
    with a ``title`` and ``intro`` lines at the top of the report."""
    if not run_dirs:
        raise ValueError("write_report needs at least one run directory")
    if smooth is not None and smooth < 1:
        raise LLMGuideError(f"--smooth must be a window of at least 1 logged value, got {smooth}")
    runs = [load_run(p) for p in run_dirs]
    out_dir = Path(out) if out else default_out(run_dirs)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = group_runs(runs, group_by)
    notes = [f"{r.path}: {n}" for r in runs for n in r.notes]

    lines = [f"# {title}", "", *(intro or []), *([""] if intro else []),
             "| run | method | env | seed | last step | records |", "|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r.path} | {r.label} | {r.env or '?'} | {r.seed if r.seed is not None else '?'} | "
                     f"{last_step(r)} | {len(r.records)} |")
    lines.append("")

    summary = None
    if control is not None or metric is not None:
        summary = summarize(groups, metric or RETURN_KEYS, control, reps, smooth=smooth)
        name = metric_name or (metric if metric else "train return (last 10%)")
        lines += study_section(summary, name, control, out_dir, smooth=smooth)
        notes += summary["notes"]
    table, more = returns_table(groups, reps)
    lines += ["## Learning curves", "", *learning_plot(groups, out_dir, reps, smooth), *table]
    notes += more
    lines += success_line(groups)
    section, more = achievements_section(groups, out_dir)
    lines += section
    notes += more
    lines += lm_section(groups, out_dir)
    lines += eval_table(groups, out_dir)
    if notes:
        lines += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    path = out_dir / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path, summary
