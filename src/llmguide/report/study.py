"""Arm values and paired statistics against a control (:mod:`llmguide.stats`), for ``--control`` /
``--metric`` and ``benchmarks/harness``: per-arm final values per seed, their interval, ``curves.png``,
and per-seed paired differences of every arm against the control (mean, t-interval, p, Wilcoxon and sign
tests from 6 seeds, bootstrap from 10, the smallest difference the seeds can detect).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from llmguide import stats
from llmguide.report.curves import BAND_TEXT, INTERVAL_RULE, curve_matrix, seed_band, smoothing_text
from llmguide.report.runs import FINAL_FRACTION, RETURN_KEYS, Run, final_value, fmt, metric_series, seed_key

FINAL_TEXT = f"mean over its last {int(FINAL_FRACTION * 100)}% of logged steps"


def curve_auc(steps: Any, values: Any, budget: int, bins: int) -> float:
    """Area under a run's curve: the mean over ``bins`` equal env-step bins of [0, ``budget``] of the mean value
    logged in each bin; an empty bin counts as the mean of the others (so: the mean over the bins that have
    values); values after ``budget`` are cut. NaN without values."""
    steps, values = np.asarray(steps, float), np.asarray(values, float)
    keep = steps <= budget
    steps, values = steps[keep], values[keep]
    if not len(values):
        return float("nan")
    idx = np.clip(np.digitize(steps, np.linspace(0, budget, bins + 1)) - 1, 0, bins - 1)
    return float(np.mean([values[idx == b].mean() for b in range(bins) if (idx == b).any()]))


def summarize(groups: dict[str, list[Run]], metric: str | tuple[str, ...] = RETURN_KEYS, control: str | None = None,
              reps: int = 2000, points: int = 20, smooth: int | None = None) -> dict[str, Any]:
    """Per-arm final values per seed, curves and paired statistics against ``control`` (docs/design.md's
    results format): ``{"arms": {label: {"seeds", "values", "curve": {"steps", "mean", "low", "high",
    "interval"}}}, "paired": {"<arm> - <control>": stats.Paired.to_json()}, "notes": [...]}``.

    The value of a run is the mean of ``metric`` over its last ``FINAL_FRACTION`` of logged steps; a run
    without the metric is left out (noted); an arm's second run with the same seed is left out (noted).
    ``smooth``: the curves (not the values) are each run's trailing mean over that many logged values."""
    arms: dict[str, Any] = {}
    notes: list[str] = []
    key_text = metric if isinstance(metric, str) else " or ".join(metric)
    for label, runs in groups.items():
        per_seed: dict[Any, tuple[float, np.ndarray, np.ndarray]] = {}
        for run in runs:
            steps, values = metric_series(run, metric)
            if len(steps) == 0:
                notes.append(f"{run.path}: no `{key_text}` logged; left out of the statistics")
                continue
            seed = seed_key(run)
            if seed in per_seed:
                notes.append(f"{run.path}: a second {label} run with seed {seed}; left out")
                continue
            per_seed[seed] = (final_value(steps, values), steps, values)
        if not per_seed:
            continue
        seeds = sorted(per_seed, key=lambda s: (str(type(s)), s))
        grid, matrix = curve_matrix([per_seed[s][1:] for s in seeds], points, smooth)
        center, low, high, kind = seed_band(matrix, reps, center="mean")
        arms[label] = {"seeds": seeds, "values": [per_seed[s][0] for s in seeds],
                       "curve": {"steps": np.round(grid, 1).tolist(), "mean": center.tolist(), "low": low.tolist(),
                                 "high": high.tolist(), "interval": kind, "smooth": int(smooth or 1)}}
    paired: dict[str, Any] = {}
    if control is not None:
        if control not in arms:
            notes.append(f"control `{control}` has no values (arms: {', '.join(arms) or 'none'}); no paired statistics")
        else:
            base = dict(zip(arms[control]["seeds"], arms[control]["values"], strict=True))
            for label, data in arms.items():
                if label == control:
                    continue
                mine = dict(zip(data["seeds"], data["values"], strict=True))
                if not set(mine) & set(base):
                    notes.append(f"{label} shares no seed with {control}; no paired statistics")
                    continue
                paired[f"{label} - {control}"] = stats.paired(mine, base, names=(label, control)).to_json()
        stats.add_holm(paired)
    return {"arms": arms, "paired": paired, "notes": notes}


HOLM_TEXT = (f" With more than {stats.HOLM_MIN_TESTS - 1} comparisons, p (Holm) adjusts the t-test p-values for "
             "their number (Holm-Bonferroni over this table): read a single row by p (t), a claim that some arm "
             "differs by p (Holm).")


def _p(x: float | None) -> str:
    if x is None:
        return "–"
    return "n/a" if not math.isfinite(x) else ("< 0.001" if x < 0.001 else f"{x:.3f}")


def study_section(summary: dict[str, Any], metric_name: str, control: str | None, out: Path,
                  plot_name: str = "curves.png", smooth: int | None = None, value_text: str | None = None) -> list[str]:
    """Markdown for :func:`summarize`'s result (per-arm values, paired table, power lines) and its plot."""
    arms, paired = summary["arms"], summary["paired"]
    if not arms:
        return [f"## {metric_name}", "", "No run logged this metric.", ""]
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    kinds = set()
    for label, data in arms.items():
        c = data["curve"]
        kinds.add(c["interval"])
        ax.plot(c["steps"], c["mean"], label=f"{label} (n={len(data['seeds'])})")
        ax.fill_between(c["steps"], c["low"], c["high"], alpha=0.2)
    ax.set_xlabel("env steps")
    ax.set_ylabel(metric_name, fontsize=8)
    ax.set_title("Mean over seeds (shaded: " + ", ".join(BAND_TEXT[k] for k in sorted(kinds)) + ")"
                 + (f", smoothed over {int(smooth)}" if smooth and smooth > 1 else ""), fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / plot_name, dpi=110)
    lines = [f"## {metric_name}", "", f"![{metric_name}]({plot_name})", "",
             f"Value per run: {value_text or FINAL_TEXT}. {INTERVAL_RULE}"
             + smoothing_text(smooth), "",
             "| arm | seeds | mean | interval | per seed |", "|---|---|---|---|---|"]
    for label, data in arms.items():
        values = data["values"]
        lines.append(f"| {label} | {len(values)} | {fmt(float(np.mean(values)), 3)} | "
                     f"{stats.value_interval(values).format(3)} | "
                     + ", ".join(f"{s}: {fmt(v, 3)}" for s, v in zip(data["seeds"], values, strict=True)) + " |")
    lines.append("")
    if not paired:
        return lines
    holm_column = any("p_holm" in d for d in paired.values())
    lines += [f"### Paired differences against `{control}`", "",
              "Each arm's value minus the control's value at the same seed (seeds are common random numbers: the "
              "same initialisation, env layouts and minibatch order in every arm). p (t): two-sided one-sample "
              "t-test of the differences. The interval is the min-max range of the differences with <= 5 seeds "
              "(not a CI), the Student-t 95% CI with 6-9, and also a BCa bootstrap 95% CI with >= 10; Wilcoxon "
              "signed-rank and sign tests from 6 seeds." + HOLM_TEXT * holm_column, "",
              "| arm − control | n | mean Δ | interval | p (t) |" + " p (Holm) |" * holm_column
              + " Wilcoxon p | sign p | seeds + / − |", "|---|---|---|---|---|" + "---|" * holm_column + "---|---|---|"]
    power = []
    for name, d in paired.items():
        holm = f" {_p(d.get('p_holm'))} |" if holm_column else ""
        if d["interval"] == "range":
            interval = f"range [{fmt(d['interval_low'], 3)}, {fmt(d['interval_high'], 3)}]"
        elif d["interval"] == "t95":
            interval = f"t 95% CI [{fmt(d['t_low'], 3)}, {fmt(d['t_high'], 3)}]"
            if d["bootstrap_low"] is not None:
                interval += f"; bootstrap 95% CI [{fmt(d['bootstrap_low'], 3)}, {fmt(d['bootstrap_high'], 3)}]"
        else:
            interval = "no interval (1 seed)"
        lines.append(f"| {name.replace(' - ', ' − ')} | {d['n']} | {fmt(d['mean'], 3)} | {interval} | {_p(d['p'])} |{holm} "
                     f"{_p(d['wilcoxon_p'])} | {_p(d['sign_p'])} | {d['positive']} / {d['negative']} |")
        if d["n"] >= 2 and d["detectable_difference"] is not None:
            mde = d["detectable_difference"]
            if d["sd"] == 0:
                power.append(f"- {name.replace(' - ', ' − ')}: n = {d['n']}, every seed gave the same difference "
                             f"({fmt(d['mean'], 3)}): no spread to test against")
                continue
            verdict = "below it" if abs(d["mean"]) < mde else "at or above it"
            power.append(f"- {name.replace(' - ', ' − ')}: n = {d['n']}, sd of the differences "
                         f"{fmt(d['sd'], 3)}: smallest detectable |Δ| = {fmt(mde, 3)} (observed "
                         f"{fmt(abs(d['mean']), 3)}, {verdict})")
    lines.append("")
    if power:
        lines += ["Power: the smallest mean difference a paired t-test over these seeds detects (two-sided "
                  "α = 0.05, power 0.8) at the observed per-seed spread of the differences.", "", *power, ""]
    return lines

