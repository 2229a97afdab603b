"""The report's Markdown tables: train returns (last 10 %), Crafter achievements (with their bar chart), LM statistics
(a short table; every ``lm/*`` value in ``lm_stats.json``), ``eval.json`` values and the success rate.

Per-run values first, then over seeds: a train return is the mean over the last 10% of a run's steps; an
achievement's success rate is the mean over a run's episode records (a missing achievement counts as 0),
the Crafter score exp(mean_i ln(1 + s_i)) - 1 per run, mean ± std over seeds; an ``lm/*`` value is the
last one a run logged, mean over its arm's runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from llmguide import stats
from llmguide.core.rundir import atomic_write_text
from llmguide.report.curves import INTERVAL_RULE, interval_estimates, iqm
from llmguide.report.runs import (
    ACH_PREFIX,
    FINAL_FRACTION,
    RETURN_KEYS,
    Run,
    episode_returns,
    final_value,
    finite,
    fmt,
    lm_stats,
    success_rate,
)

# The 22 Crafter achievements (crafter.constants.achievements), used if llmguide.envs.crafter.rules is absent.
CRAFTER_ACHIEVEMENTS = [
    "collect_coal", "collect_diamond", "collect_drink", "collect_iron", "collect_sapling", "collect_stone",
    "collect_wood", "defeat_skeleton", "defeat_zombie", "eat_cow", "eat_plant", "make_iron_pickaxe",
    "make_iron_sword", "make_stone_pickaxe", "make_stone_sword", "make_wood_pickaxe", "make_wood_sword",
    "place_furnace", "place_plant", "place_stone", "place_table", "wake_up",
]
LM_FILE = "lm_stats.json"


# --- train returns -------------------------------------------------------------------------------------
def returns_table(groups: dict[str, list[Run]], reps: int) -> tuple[list[str], list[str]]:
    """Train return (last 10 %) per arm: IQM and mean over seeds with the interval of :mod:`llmguide.stats`'
    rules."""
    rows, notes = [], []
    for label, runs in groups.items():
        items = []
        for run in runs:
            steps, values = episode_returns(run)
            if len(steps):
                items.append((steps, values))
            else:
                notes.append(f"{run.path}: no episodic returns logged ({' or '.join(RETURN_KEYS)})")
        if not items:
            continue
        finals = np.array([final_value(s, v) for s, v in items])
        episodes = sum(len(s) for s, _ in items)
        n = len(items)
        if n == 1:
            rows.append(f"| {label} | 1 | {episodes} | {fmt(finals[0])} (1 seed, no interval) | {fmt(finals[0])} |")
            notes.append(f"{label}: only one seed, so no interval; run more seeds to get one")
        elif n >= stats.BOOTSTRAP_MIN_SEEDS:
            fin = interval_estimates(finals[:, None], reps)
            (fi, fi_ci), (fm, fm_ci) = fin["iqm"], fin["mean"]
            rows.append(f"| {label} | {n} | {episodes} | {fmt(fi[0])}, bootstrap 95% CI [{fmt(fi_ci[0, 0])}, "
                        f"{fmt(fi_ci[1, 0])}] | {fmt(fm[0])}, bootstrap 95% CI [{fmt(fm_ci[0, 0])}, "
                        f"{fmt(fm_ci[1, 0])}] |")
        else:
            rows.append(f"| {label} | {n} | {episodes} | {fmt(float(iqm(finals[:, None])[0]))} | "
                        f"{fmt(finals.mean())}, {stats.value_interval(finals).format()} |")
    if not rows:
        return ["No episodic returns in any run.", ""], notes
    return [f"Train return (last {int(FINAL_FRACTION * 100)}%) = mean episodic return over the last "
            f"{int(FINAL_FRACTION * 100)}% of each run's training steps; IQM and mean over seeds. {INTERVAL_RULE}", "",
            f"| method | seeds | episodes | train return (last {int(FINAL_FRACTION * 100)}%) IQM | "
            f"train return (last {int(FINAL_FRACTION * 100)}%) mean |",
            "|---|---|---|---|---|", *rows, ""], notes


# --- Crafter achievements --------------------------------------------------------------------------------
def crafter_score(success_rates_percent: list[float]) -> float:
    """Crafter score (%) = exp(mean ln(1 + s_i)) - 1; uses the env package's function when present."""
    try:
        from llmguide.envs.crafter.rules import crafter_score as env_score
    except ImportError:
        return float(np.exp(np.mean(np.log1p(np.asarray(success_rates_percent, np.float64)))) - 1.0)
    return env_score(success_rates_percent)


def _crafter_names() -> list[str]:
    try:
        from llmguide.envs.crafter.rules import ACHIEVEMENTS
    except ImportError:
        return list(CRAFTER_ACHIEVEMENTS)
    return list(ACHIEVEMENTS)


def achievement_stats(run: Run, names: list[str] | None = None) -> dict[str, Any] | None:
    """Per-achievement success rates (%), achievements per episode and episodes; None if none logged."""
    episodes = [rec for rec in run.records if any(k.startswith(ACH_PREFIX) for k in rec)]
    if not episodes:
        return None
    logged = sorted({k[len(ACH_PREFIX):] for rec in episodes for k in rec if k.startswith(ACH_PREFIX)})
    names = names or logged
    values = np.array([[float(rec.get(ACH_PREFIX + n, 0.0)) if finite(rec.get(ACH_PREFIX + n, 0.0)) else 0.0
                        for n in names] for rec in episodes])
    values = np.clip(values, 0.0, 1.0)
    return {
        "rates": dict(zip(names, 100.0 * values.mean(axis=0), strict=True)),
        "per_episode": float(values.sum(axis=1).mean()),
        "episodes": len(episodes),
        "logged": logged,
    }


def achievements_section(groups: dict[str, list[Run]], out: Path) -> tuple[list[str], list[str]]:
    """``## Achievements``: Crafter score and achievements / episode per arm, ``achievements.png``, rates."""
    crafter = _crafter_names()
    per_label = {label: [(r, achievement_stats(r)) for r in runs] for label, runs in groups.items()}
    logged = sorted({n for items in per_label.values() for _, s in items if s for n in s["logged"]})
    if not logged:
        return [], []
    notes: list[str] = []
    is_crafter = set(logged) <= set(crafter)
    names = crafter if is_crafter else logged
    envs = {r.env for runs in groups.values() for r in runs}
    game = "Craftax-Classic" if envs == {"craftax"} else "Crafter" if "craftax" not in envs else "Crafter/Craftax-Classic"
    lines = ["## Achievements" + (f" ({game})" if is_crafter else ""), ""]
    if not is_crafter:
        notes.append("achievement names are not all Crafter achievements, so no Crafter score: "
                     + ", ".join(sorted(set(logged) - set(crafter))))
    summary_rows, rates_by_label = [], {}
    for label, items in per_label.items():
        per_run = [achievement_stats(r, names) for r, s in items if s]
        for r, s in items:
            if s is None:
                notes.append(f"{r.path}: no achievements/* records")
        if not per_run:
            continue
        rates = np.array([[s["rates"][n] for n in names] for s in per_run])  # (runs, names)
        rates_by_label[label] = rates
        per_ep = np.array([s["per_episode"] for s in per_run])
        episodes = sum(s["episodes"] for s in per_run)
        score = "n/a"
        if is_crafter:
            scores = np.array([crafter_score(list(row)) for row in rates])
            score = fmt(scores.mean()) + (f" ± {fmt(scores.std())}" if len(scores) > 1 else "")
        per_ep_txt = fmt(per_ep.mean()) + (f" ± {fmt(per_ep.std())}" if len(per_ep) > 1 else "")
        summary_rows.append(f"| {label} | {len(per_run)} | {episodes} | {score} | {per_ep_txt} |")
    if not summary_rows:
        return [], notes
    labels = list(rates_by_label)
    fig = Figure(figsize=(min(16.0, 3 + 0.4 * len(names)), 4.8))
    ax = fig.subplots()
    width = 0.8 / len(labels)
    x = np.arange(len(names))
    for i, label in enumerate(labels):
        rates = rates_by_label[label]
        ax.bar(x + i * width - 0.4 + width / 2, rates.mean(axis=0), width,
               yerr=rates.std(axis=0) if len(rates) > 1 else None, label=label, capsize=2)
    ax.set_xticks(x)
    ax.set_xticklabels([n.replace("_", " ") for n in names], rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Achievement success rate per episode (mean over seeds, bars: std, not an interval)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "achievements.png", dpi=110)
    lines += [
        "![achievement success rates](achievements.png)", "",
        f"Success rate = fraction of finished episodes in which the achievement was unlocked; {game} score = "
        "exp(mean ln(1 + s_i)) - 1 over the 22 success rates in %; per run, then mean ± std over seeds "
        "(± is the standard deviation over seeds, not an interval).", "",
        f"| method | seeds | episodes | {game} score (%) | achievements / episode |", "|---|---|---|---|---|",
        *summary_rows, "",
        "| achievement | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels),
        *[f"| {n} | " + " | ".join(fmt(rates_by_label[lb][:, j].mean(), 1) for lb in labels) + " |"
          for j, n in enumerate(names)],
        "",
    ]
    return lines, notes


# --- LM statistics -------------------------------------------------------------------------------------
def _ratio(num: str, den: str, minus: str | None = None):
    def read(s: dict[str, float]) -> float | None:
        if num not in s or den not in s:
            return None
        total = s[den] - (s.get(minus, 0.0) if minus else 0.0)
        return s[num] / total if total > 0 else None
    return read


def _count(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def _percent(x: float) -> str:
    return f"{100 * x:.1f}%"


# column, reads a run's value from its last lm/* values, prints the mean over runs
LM_COLUMNS = (
    ("requests", lambda s: s.get("requests"), _count),
    ("answered", lambda s: s.get("answered_fraction"), _percent),
    ("fresh", lambda s: s.get("fresh_fraction"), _percent),
    ("latency p50 (s)", lambda s: s.get("latency_p50"), lambda x: fmt(x, 3)),
    ("latency p95 (s)", lambda s: s.get("latency_p95"), lambda x: fmt(x, 3)),
    ("fallbacks", lambda s: s.get("fallbacks"), _count),
    ("errors", lambda s: s.get("errors"), _count),
    ("cache hit", _ratio("cache_hits", "requests", "deduplicated"), _percent),
)
LM_CAPTION = ("Last logged value per run, mean over runs. requests: submitted to the LM service; answered: share "
              "of distinct requests the LM or its cache answered (`lm/answered_fraction`; fallbacks, stale drops "
              "and timeouts are not answers); fresh: share of steps whose state already had an answer when the "
              "agent acted; latency: submit to resolved; fallbacks: requests resolved by the fallback; errors: "
              "failed HTTP attempts; cache hit: distinct requests answered from the persistent cache. ")


def lm_section(groups: dict[str, list[Run]], out: Path) -> list[str]:
    """``## LM statistics``: a short table of the figures a reader needs; every ``lm/*`` value per run
    and its mean over runs in ``lm_stats.json``. ``[]`` when no run logged any."""
    per_label = {label: [(r, lm_stats(r)) for r in runs] for label, runs in groups.items()}
    per_label = {label: [(r, s) for r, s in items if s] for label, items in per_label.items()}
    per_label = {label: items for label, items in per_label.items() if items}
    if not per_label:
        return []
    dump = {}
    for label, items in per_label.items():
        keys = sorted({k for _, s in items for k in s})
        dump[label] = {"runs": {str(r.path): {f"lm/{k}": v for k, v in sorted(s.items())} for r, s in items},
                       "mean": {f"lm/{k}": float(np.mean([s[k] for _, s in items if k in s])) for k in keys}}
    atomic_write_text(out / LM_FILE, json.dumps(dump, indent=1) + "\n")
    values = {label: [[read(s) for _, s in items] for _, read, _ in LM_COLUMNS] for label, items in per_label.items()}
    shown = [i for i in range(len(LM_COLUMNS)) if any(v is not None for cols in values.values() for v in cols[i])]
    lines = ["## LM statistics", "", LM_CAPTION + f"Every `lm/*` metric per run and its mean: [{LM_FILE}]({LM_FILE}).", ""]
    if not shown:
        return lines
    lines += ["| method | runs | " + " | ".join(LM_COLUMNS[i][0] for i in shown) + " |",
              "|---|---|" + "---|" * len(shown)]
    for label, cols in values.items():
        cells = []
        for i in shown:
            got = [v for v in cols[i] if v is not None]
            cells.append(LM_COLUMNS[i][2](float(np.mean(got))) if got else "–")
        lines.append(f"| {label} | {len(per_label[label])} | " + " | ".join(cells) + " |")
    return lines + [""]


# --- evaluation, success ----------------------------------------------------------------------------------
EVAL_COLUMNS = (("return_mean", "eval return"), ("length_mean", "length"), ("success_rate", "success"),
                ("crafter_score", "score (%)"))   # the rest of eval.json is linked, not tabled


def eval_table(groups: dict[str, list[Run]], out_dir: Path | None = None) -> list[str]:
    """``## Evaluation``: each arm's mean over runs of the evaluation's return, length, success and (Crafter)
    score, and a link to each run's ``eval.json`` (relative to ``out_dir``) for the rest.  ``[]`` without it."""
    per_label = {label: [r for r in runs if r.eval] for label, runs in groups.items()}
    keys = [(k, name) for k, name in EVAL_COLUMNS if any(k in r.eval for rs in per_label.values() for r in rs)]
    if not keys:
        return []
    rows = []
    for label, runs in per_label.items():
        if runs:
            rows.append(f"| {label} | {len(runs)} | " + " | ".join(
                fmt(float(np.mean([r.eval[k] for r in runs if k in r.eval])), 2)
                if any(k in r.eval for r in runs) else "–" for k, _ in keys) + " |")
    runs = [r for rs in per_label.values() for r in rs]
    links = ", ".join(f"[{r.path.name}]({_relative(r.path / 'eval.json', out_dir)})" for r in runs[:12])
    more = f" and {len(runs) - 12} more" if len(runs) > 12 else ""
    return ["## Evaluation", "", "The final evaluation of each run (greedy unless eval.greedy=false), mean over "
            f"runs; every other value in its eval.json: {links}{more}.", "",
            "| method | runs | " + " | ".join(name for _, name in keys) + " |", "|---|---|" + "---|" * len(keys),
            *rows, ""]


def _relative(path: Path, out_dir: Path | None) -> str:
    """``path`` as a link from a report in ``out_dir`` (absolute when no relative path exists)."""
    import os

    try:
        return Path(os.path.relpath(path.resolve(), (out_dir or Path.cwd()).resolve())).as_posix()
    except ValueError:   # another drive
        return path.resolve().as_posix()


def success_line(groups: dict[str, list[Run]]) -> list[str]:
    """One line with each arm's ``charts/success`` rate, mean over seeds. ``[]`` when never logged."""
    success = {label: [s for s in (success_rate(r) for r in rs) if s is not None] for label, rs in groups.items()}
    if not any(success.values()):
        return []
    return ["Success rate (``charts/success``, fraction of episodes, mean over seeds): " + ", ".join(
        f"{label} {fmt(float(np.mean(v)), 3)}" for label, v in success.items() if v), ""]
