"""``llmguide report RUN_DIR...``: Markdown + PNG summary of one or more runs, seeds aggregated.

Runs are grouped by ``method.name`` from their ``config.yaml`` (``method / env`` when several
envs are present; the directory name when the config is missing), or by their parent folder
(``group_by="folder"``: the arm in ``<root>/<arm>/seed-N``, the layout of ``llmguide train -m`` and
``benchmarks/harness.py``). Metric keys read from each
run's ``metrics.jsonl`` (written by :class:`llmguide.core.rundir.RunDir`):

- ``charts/episodic_return`` (or ``episodic_return``): one record per finished episode, at the
  env step it finished. Learning curves bin these on a common step grid (mean per bin, carried
  forward over empty bins); final return = mean over the last 10% of a run's steps; IQM and mean
  over seeds with an interval by the rules below. With one seed there is no interval (said so).
- ``achievements/<name>``: a record holding any such key is **one finished episode**; the value
  is 1/0 (unlocked in that episode or not) or a rate in [0, 1]; an achievement missing from an
  episode record counts as 0. Per run: success rate s_i (%) = mean over episode records;
  Crafter score = exp(mean_i ln(1 + s_i)) - 1 over the 22 Crafter achievements (when every
  logged name is a Crafter achievement); achievements / episode = mean of the per-record sums.
  Scores are computed per run, then mean ± std over seeds (as the Crafter paper does).
- ``charts/success``: per-episode success (0/1); shown as a rate.
- ``lm/<stat>`` (``calls``, ``hit_rate``, ``fallbacks``, ``parse_errors``, ``latency_p50`` ...):
  cumulative counters or running statistics; the last logged value per run, mean over seeds.
- ``eval.json`` beside the metrics: its numeric top-level values, mean over seeds.

Intervals over seeds follow :mod:`llmguide.stats`: with 2-5 seeds a band or interval is the min-max
**range** over seeds (never called a CI), with 6-9 seeds a Student-t 95% CI of the mean, with >= 10 a
95% bootstrap CI (rliable's stratified bootstrap for returns). With a named control arm
(``control="ppo"``) the report adds a table of per-seed **paired differences** of every arm against it on ``metric`` (final value per
run, default the episodic return), matched by seed: mean, t-interval, p-value, Wilcoxon and sign tests
(n >= 6), bootstrap CI (n >= 10) and the smallest difference the seeds can detect (:func:`summarize`).

Missing or partial files give a note in the report, never a traceback.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from matplotlib.figure import Figure

from llmguide import stats
from llmguide.core.rundir import atomic_write_text, read_metrics

RETURN_KEYS = ("charts/episodic_return", "episodic_return")
SUCCESS_KEY = "charts/success"
ACH_PREFIX = "achievements/"
LM_PREFIX = "lm/"
LM_ORDER = ("calls", "hits", "hit_rate", "fallbacks", "parse_errors", "latency_p50", "latency_p95", "tokens")
CURVE_POINTS = 25
FINAL_FRACTION = 0.1  # final return = mean over episodes in the last 10% of a run's steps

# The 22 Crafter achievements (crafter.constants.achievements), used if llmguide.envs.crafter.env is absent.
CRAFTER_ACHIEVEMENTS = [
    "collect_coal", "collect_diamond", "collect_drink", "collect_iron", "collect_sapling", "collect_stone",
    "collect_wood", "defeat_skeleton", "defeat_zombie", "eat_cow", "eat_plant", "make_iron_pickaxe",
    "make_iron_sword", "make_stone_pickaxe", "make_stone_sword", "make_wood_pickaxe", "make_wood_sword",
    "place_furnace", "place_plant", "place_stone", "place_table", "wake_up",
]


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


# --- loading ----------------------------------------------------------------------------------------
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


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def load_run(path: str | Path) -> Run:
    """Read ``config.yaml``, ``metrics.jsonl`` and ``eval.json``; problems become notes."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"run directory not found: {path}")
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
        run.records = read_metrics(path)
        if not run.records:
            notes.append("metrics.jsonl is empty")
    else:
        notes.append("no metrics.jsonl")
    if (path / "eval.json").exists():
        try:
            data = json.loads((path / "eval.json").read_text())
            data = data if isinstance(data, dict) else {}
            run.eval = {k: float(v) for k, v in data.items() if _finite(v) and k not in ("seed", "step")}
        except json.JSONDecodeError:
            notes.append("eval.json unreadable")
    return run


def _group(runs: list[Run], group_by: str = "method") -> dict[str, list[Run]]:
    """Runs by label: ``method`` (``method / env`` when several envs are present) or ``folder`` (the
    run directory's parent folder name, e.g. the arm of ``<root>/<arm>/seed-0``)."""
    if group_by not in ("method", "folder"):
        raise ValueError(f"group_by must be 'method' or 'folder', got {group_by!r}")
    several_envs = len({r.env for r in runs if r.env}) > 1
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if group_by == "folder":
            run.label = run.path.resolve().parent.name
        else:
            run.label = f"{run.method} / {run.env}" if several_envs and run.env else run.method
        groups.setdefault(run.label, []).append(run)
    return groups


# --- learning curves -------------------------------------------------------------------------------
def metric_series(run: Run, keys: str | tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Steps and values of every record holding one of ``keys`` (the first present per record)."""
    keys = (keys,) if isinstance(keys, str) else keys
    steps, values = [], []
    for rec in run.records:
        key = next((k for k in keys if k in rec), None)
        if key is not None and _finite(rec[key]) and _finite(rec.get("step")):
            steps.append(rec["step"])
            values.append(rec[key])
    return np.asarray(steps, np.float64), np.asarray(values, np.float64)


def episode_returns(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """Steps and returns of every finished episode in the run."""
    return metric_series(run, RETURN_KEYS)


def final_value(steps: np.ndarray, values: np.ndarray) -> float:
    """Mean of the values logged in the last ``FINAL_FRACTION`` of the run's logged steps."""
    return float(values[steps >= steps.max() * (1 - FINAL_FRACTION)].mean())


def binned_curve(steps: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Mean of the values with step in (grid[i-1], grid[i]], carried forward over empty bins."""
    out = np.full(len(grid), np.nan)
    last, prev = np.nan, -np.inf
    for i, g in enumerate(grid):
        sel = (steps > prev) & (steps <= g)
        if sel.any():
            last = float(values[sel].mean())
        out[i] = last
        prev = g
    return out


def _iqm(x: np.ndarray) -> np.ndarray:
    """``rliable.metrics.aggregate_iqm`` of every point (last axis) at once."""
    from scipy.stats import trim_mean

    return trim_mean(x.reshape(-1, x.shape[-1]), proportiontocut=0.25, axis=0)


def _mean(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1, x.shape[-1]).mean(axis=0)


def interval_estimates(scores: np.ndarray, reps: int, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """IQM and mean over runs of a (runs, points) matrix with 95% bootstrap CIs (rliable)."""
    from rliable import library

    out = {}
    for name, func in (("iqm", _iqm), ("mean", _mean)):
        with warnings.catch_warnings():  # arch deprecates the random_state that rliable passes
            warnings.simplefilter("ignore", FutureWarning)
            point, ci = library.get_interval_estimates({"m": scores[:, None, :]}, func, reps=reps,
                                                       random_state=np.random.RandomState(seed))
        out[name] = (point["m"], ci["m"])
    return out


def seed_band(matrix: np.ndarray, reps: int, center: str = "mean") -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Centre line and band over seeds of a (seeds, points) matrix, and the band's kind
    (:mod:`llmguide.stats` rules): ``none`` (1 seed), ``range`` (min-max, <= 5 seeds), ``t95``
    (Student-t 95% CI of the mean, 6-9 seeds), ``bootstrap95`` (rliable, >= 10 seeds; centre
    ``mean`` or ``iqm``). Below 10 seeds the centre is always the mean."""
    n = matrix.shape[0]
    mean = matrix.mean(axis=0)
    if n == 1:
        return mean, mean, mean, "none"
    if n <= stats.RANGE_MAX_SEEDS:
        return mean, matrix.min(axis=0), matrix.max(axis=0), "range"
    if n < stats.BOOTSTRAP_MIN_SEEDS:
        from scipy.stats import t as student_t

        half = student_t.ppf(0.975, n - 1) * matrix.std(axis=0, ddof=1) / math.sqrt(n)
        return mean, mean - half, mean + half, "t95"
    point, ci = interval_estimates(matrix, reps)[center]
    return point, ci[0], ci[1], "bootstrap95"


BAND_TEXT = {"none": "1 seed", "range": "range over seeds", "t95": "t 95% CI", "bootstrap95": "bootstrap 95% CI"}
INTERVAL_RULE = ("Intervals over seeds: the min-max range with <= 5 seeds (not a confidence interval), a Student-t "
                 "95% CI of the mean with 6-9 seeds, a 95% bootstrap CI with >= 10.")


def _fmt(x: float, digits: int = 2) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _learning_section(groups: dict[str, list[Run]], out: Path, reps: int) -> tuple[list[str], list[str]]:
    lines, notes = ["## Learning curves", ""], []
    series = {label: [(r, *episode_returns(r)) for r in runs] for label, runs in groups.items()}
    for items in series.values():
        for run, steps, _ in items:
            if len(steps) == 0:
                notes.append(f"{run.path}: no episodic returns logged ({' or '.join(RETURN_KEYS)})")
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    rows, kinds = [], set()
    for label, items in series.items():
        items = [(run, s, v) for run, s, v in items if len(s)]
        if not items:
            continue
        end = min(s.max() for _, s, _ in items)
        grid = np.linspace(0, end, CURVE_POINTS + 1)[1:]
        matrix = np.stack([binned_curve(s, v, grid) for _, s, v in items])
        keep = np.all(np.isfinite(matrix), axis=0)
        finals = np.array([final_value(s, v) for _, s, v in items])
        episodes = sum(len(s) for _, s, _ in items)
        n = len(items)
        if n == 1:
            ax.plot(grid[keep], matrix[0, keep], label=f"{label} (1 seed)")
            rows.append(f"| {label} | 1 | {episodes} | {_fmt(finals[0])} (1 seed, no interval) | {_fmt(finals[0])} |")
            notes.append(f"{label}: only one seed, so no interval; run more seeds to get one")
            continue
        center, low, high, kind = seed_band(matrix[:, keep], reps, center="iqm")
        kinds.add(kind)
        ax.plot(grid[keep], center, label=f"{label} ({'IQM' if kind == 'bootstrap95' else 'mean'}, n={n}, "
                                          f"shaded: {BAND_TEXT[kind]})")
        ax.fill_between(grid[keep], low, high, alpha=0.25)
        iqm = float(_iqm(finals[:, None])[0])
        if kind == "bootstrap95":
            fin = interval_estimates(finals[:, None], reps)
            (fi, fi_ci), (fm, fm_ci) = fin["iqm"], fin["mean"]
            rows.append(f"| {label} | {n} | {episodes} | {_fmt(fi[0])}, bootstrap 95% CI [{_fmt(fi_ci[0, 0])}, "
                        f"{_fmt(fi_ci[1, 0])}] | {_fmt(fm[0])}, bootstrap 95% CI [{_fmt(fm_ci[0, 0])}, "
                        f"{_fmt(fm_ci[1, 0])}] |")
        else:
            rows.append(f"| {label} | {n} | {episodes} | {_fmt(iqm)} | {_fmt(finals.mean())}, "
                        f"{stats.value_interval(finals).format()} |")
    if not rows:
        lines += ["No episodic returns in any run.", ""]
        return lines, notes
    ax.set_xlabel("env steps")
    ax.set_ylabel("episodic return")
    ax.set_title("Episodic return over seeds (shaded: " + ", ".join(BAND_TEXT[k] for k in sorted(kinds)) + ")"
                 if kinds else "Episodic return")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "learning_curves.png", dpi=110)
    lines += [
        "![learning curves](learning_curves.png)", "",
        f"Final return = mean episodic return over the last {int(FINAL_FRACTION * 100)}% of each run's steps; "
        f"IQM and mean over seeds. {INTERVAL_RULE} Curves show the mean below 10 seeds, the IQM from 10.", "",
        "| method | seeds | episodes | final return IQM | final return mean |",
        "|---|---|---|---|---|", *rows, "",
    ]
    return lines, notes


# --- paired statistics against a control --------------------------------------------------------------
def _seed_key(run: Run) -> Any:
    return run.seed if run.seed is not None else run.path.name


def summarize(groups: dict[str, list[Run]], metric: str | tuple[str, ...] = RETURN_KEYS, control: str | None = None,
              reps: int = 2000, points: int = 20) -> dict[str, Any]:
    """Per-arm final values per seed, curves and paired statistics against ``control`` (DESIGN.md's
    results format): ``{"arms": {label: {"seeds", "values", "curve": {"steps", "mean", "low", "high",
    "interval"}}}, "paired": {"<arm> - <control>": stats.Paired.to_json()}, "notes": [...]}``.

    The value of a run is the mean of ``metric`` over its last ``FINAL_FRACTION`` of logged steps; a run
    without the metric is left out (noted); an arm's second run with the same seed is left out (noted)."""
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
            seed = _seed_key(run)
            if seed in per_seed:
                notes.append(f"{run.path}: a second {label} run with seed {seed}; left out")
                continue
            per_seed[seed] = (final_value(steps, values), steps, values)
        if not per_seed:
            continue
        seeds = sorted(per_seed, key=lambda s: (str(type(s)), s))
        end = min(per_seed[s][1].max() for s in seeds)
        grid = np.linspace(0, end, points + 1)[1:]
        matrix = np.stack([binned_curve(per_seed[s][1], per_seed[s][2], grid) for s in seeds])
        keep = np.all(np.isfinite(matrix), axis=0)
        center, low, high, kind = seed_band(matrix[:, keep], reps, center="mean")
        arms[label] = {"seeds": seeds, "values": [per_seed[s][0] for s in seeds],
                       "curve": {"steps": np.round(grid[keep], 1).tolist(), "mean": center.tolist(), "low": low.tolist(),
                                 "high": high.tolist(), "interval": kind}}
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
    return {"arms": arms, "paired": paired, "notes": notes}


def _p(x: float | None) -> str:
    if x is None:
        return "–"
    return "n/a" if not math.isfinite(x) else ("< 0.001" if x < 0.001 else f"{x:.3f}")


def study_section(summary: dict[str, Any], metric_name: str, control: str | None, out: Path,
                  plot_name: str = "curves.png") -> list[str]:
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
    ax.set_title("Mean over seeds (shaded: " + ", ".join(BAND_TEXT[k] for k in sorted(kinds)) + ")", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / plot_name, dpi=110)
    lines = [f"## {metric_name}", "", f"![{metric_name}]({plot_name})", "",
             f"Value per run: mean over its last {int(FINAL_FRACTION * 100)}% of logged steps. {INTERVAL_RULE}", "",
             "| arm | seeds | mean | interval | per seed |", "|---|---|---|---|---|"]
    for label, data in arms.items():
        values = data["values"]
        lines.append(f"| {label} | {len(values)} | {_fmt(float(np.mean(values)), 3)} | "
                     f"{stats.value_interval(values).format(3)} | "
                     + ", ".join(f"{s}: {_fmt(v, 3)}" for s, v in zip(data["seeds"], values, strict=True)) + " |")
    lines.append("")
    if not paired:
        return lines
    lines += [f"### Paired differences against `{control}`", "",
              "Each arm's value minus the control's value at the same seed (seeds are common random numbers: the "
              "same initialisation, env layouts and minibatch order in every arm). p (t): two-sided one-sample "
              "t-test of the differences. The interval is the min-max range of the differences with <= 5 seeds "
              "(not a CI), the Student-t 95% CI with 6-9, and also a BCa bootstrap 95% CI with >= 10; Wilcoxon "
              "signed-rank and sign tests from 6 seeds.", "",
              "| arm − control | n | mean Δ | interval | p (t) | Wilcoxon p | sign p | seeds + / − |",
              "|---|---|---|---|---|---|---|---|"]
    power = []
    for name, d in paired.items():
        if d["interval"] == "range":
            interval = f"range [{_fmt(d['interval_low'], 3)}, {_fmt(d['interval_high'], 3)}]"
        elif d["interval"] == "t95":
            interval = f"t 95% CI [{_fmt(d['t_low'], 3)}, {_fmt(d['t_high'], 3)}]"
            if d["bootstrap_low"] is not None:
                interval += f"; bootstrap 95% CI [{_fmt(d['bootstrap_low'], 3)}, {_fmt(d['bootstrap_high'], 3)}]"
        else:
            interval = "no interval (1 seed)"
        lines.append(f"| {name.replace(' - ', ' − ')} | {d['n']} | {_fmt(d['mean'], 3)} | {interval} | {_p(d['p'])} | "
                     f"{_p(d['wilcoxon_p'])} | {_p(d['sign_p'])} | {d['positive']} / {d['negative']} |")
        if d["n"] >= 2 and d["detectable_difference"] is not None:
            mde = d["detectable_difference"]
            if d["sd"] == 0:
                power.append(f"- {name.replace(' - ', ' − ')}: n = {d['n']}, every seed gave the same difference "
                             f"({_fmt(d['mean'], 3)}): no spread to test against")
                continue
            verdict = "below it" if abs(d["mean"]) < mde else "at or above it"
            power.append(f"- {name.replace(' - ', ' − ')}: n = {d['n']}, sd of the differences "
                         f"{_fmt(d['sd'], 3)}: smallest detectable |Δ| = {_fmt(mde, 3)} (observed "
                         f"{_fmt(abs(d['mean']), 3)}, {verdict})")
    lines.append("")
    if power:
        lines += ["Power: the smallest mean difference a paired t-test over these seeds detects (two-sided "
                  "α = 0.05, power 0.8) at the observed per-seed spread of the differences.", "", *power, ""]
    return lines


# --- Crafter achievements --------------------------------------------------------------------------
def achievement_stats(run: Run, names: list[str] | None = None) -> dict[str, Any] | None:
    """Per-achievement success rates (%), achievements per episode and episodes; None if none logged."""
    episodes = [rec for rec in run.records if any(k.startswith(ACH_PREFIX) for k in rec)]
    if not episodes:
        return None
    logged = sorted({k[len(ACH_PREFIX):] for rec in episodes for k in rec if k.startswith(ACH_PREFIX)})
    names = names or logged
    values = np.array([[float(rec.get(ACH_PREFIX + n, 0.0)) if _finite(rec.get(ACH_PREFIX + n, 0.0)) else 0.0
                        for n in names] for rec in episodes])
    values = np.clip(values, 0.0, 1.0)
    return {
        "rates": dict(zip(names, 100.0 * values.mean(axis=0), strict=True)),
        "per_episode": float(values.sum(axis=1).mean()),
        "episodes": len(episodes),
        "logged": logged,
    }


def _crafter_section(groups: dict[str, list[Run]], out: Path) -> tuple[list[str], list[str]]:
    crafter = _crafter_names()
    stats = {label: [(r, achievement_stats(r)) for r in runs] for label, runs in groups.items()}
    logged = sorted({n for items in stats.values() for _, s in items if s for n in s["logged"]})
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
    for label, items in stats.items():
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
            score = _fmt(scores.mean()) + (f" ± {_fmt(scores.std())}" if len(scores) > 1 else "")
        per_ep_txt = _fmt(per_ep.mean()) + (f" ± {_fmt(per_ep.std())}" if len(per_ep) > 1 else "")
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
    ax.set_title("Achievement success rate per episode (mean over seeds, bars: std)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "achievements.png", dpi=110)
    lines += [
        "![achievement success rates](achievements.png)", "",
        f"Success rate = fraction of finished episodes in which the achievement was unlocked; {game} score = "
        "exp(mean ln(1 + s_i)) - 1 over the 22 success rates in %; per run, then mean ± std over seeds.", "",
        f"| method | seeds | episodes | {game} score (%) | achievements / episode |", "|---|---|---|---|---|",
        *summary_rows, "",
        "| achievement | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels),
        *[f"| {n} | " + " | ".join(_fmt(rates_by_label[lb][:, j].mean(), 1) for lb in labels) + " |"
          for j, n in enumerate(names)],
        "",
    ]
    return lines, notes


# --- LM statistics, success, eval ----------------------------------------------------------------------
def lm_stats(run: Run) -> dict[str, float]:
    """The last logged value of every ``lm/*`` key."""
    last: dict[str, float] = {}
    for rec in run.records:
        for k, v in rec.items():
            if k.startswith(LM_PREFIX) and _finite(v):
                last[k[len(LM_PREFIX):]] = float(v)
    return last


def _table_of_means(title: str, per_label: dict[str, list[dict[str, float]]], note: str) -> list[str]:
    keys = sorted({k for runs in per_label.values() for s in runs for k in s},
                  key=lambda k: (LM_ORDER.index(k) if k in LM_ORDER else len(LM_ORDER), k))
    if not keys:
        return []
    rows = []
    for label, runs in per_label.items():
        runs = [s for s in runs if s]
        if not runs:
            continue
        cells = []
        for k in keys:
            vals = [s[k] for s in runs if k in s]
            cells.append(_fmt(float(np.mean(vals)), 3) if vals else "–")
        rows.append(f"| {label} | {len(runs)} | " + " | ".join(cells) + " |")
    return [title, "", note, "", "| method | runs | " + " | ".join(keys) + " |",
            "|---|---|" + "---|" * len(keys), *rows, ""]


def _success_rate(run: Run) -> float | None:
    vals = [float(rec[SUCCESS_KEY]) for rec in run.records if _finite(rec.get(SUCCESS_KEY))]
    return float(np.mean(vals)) if vals else None


# --- the report --------------------------------------------------------------------------------------
def write_report(run_dirs: list[str], out: str | None = None, reps: int = 2000, *, group_by: str = "method",
                 control: str | None = None, metric: str | None = None, metric_name: str | None = None) -> Path:
    """Write ``report.md`` (+ PNGs) summarising ``run_dirs`` into ``out`` (default: the first run dir).

    ``group_by``: ``method`` or ``folder`` (see :func:`_group`). With ``control`` (a group label) or
    ``metric`` (a metrics.jsonl key; default the episodic return) a section on that metric is added: per-arm
    final values with intervals, ``curves.png`` and, with a control, paired statistics (:func:`summarize`)."""
    return study_report(run_dirs, out, reps, group_by=group_by, control=control, metric=metric,
                        metric_name=metric_name)[0]


def study_report(run_dirs: list[str], out: str | Path | None = None, reps: int = 2000, *, group_by: str = "method",
                 control: str | None = None, metric: str | None = None, metric_name: str | None = None,
                 title: str = "llmguide report", intro: list[str] | None = None) -> tuple[Path, dict[str, Any] | None]:
    """:func:`write_report` that also returns :func:`summarize`'s result (None without control or metric),
    with a ``title`` and ``intro`` lines at the top of the report."""
    if not run_dirs:
        raise ValueError("write_report needs at least one run directory")
    runs = [load_run(p) for p in run_dirs]
    out_dir = Path(out) if out else Path(run_dirs[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = _group(runs, group_by)
    notes = [f"{r.path}: {n}" for r in runs for n in r.notes]

    lines = [f"# {title}", "", *(intro or []), *([""] if intro else []),
             "| run | method | env | seed | last step | records |", "|---|---|---|---|---|---|"]
    for r in runs:
        last = max((rec.get("step", 0) for rec in r.records if _finite(rec.get("step"))), default=0)
        lines.append(f"| {r.path} | {r.label} | {r.env or '?'} | {r.seed if r.seed is not None else '?'} | "
                     f"{last} | {len(r.records)} |")
    lines.append("")

    summary = None
    if control is not None or metric is not None:
        key = metric or RETURN_KEYS
        summary = summarize(groups, key, control, reps)
        name = metric_name or (metric if metric else "final episodic return")
        lines += study_section(summary, name, control, out_dir)
        notes += summary["notes"]
    section, more = _learning_section(groups, out_dir, reps)
    lines += section
    notes += more
    success = {label: [s for s in (_success_rate(r) for r in rs) if s is not None] for label, rs in groups.items()}
    if any(success.values()):
        lines += ["Success rate (``charts/success``, fraction of episodes, mean over seeds): " + ", ".join(
            f"{label} {_fmt(float(np.mean(v)), 3)}" for label, v in success.items() if v), ""]
    section, more = _crafter_section(groups, out_dir)
    lines += section
    notes += more
    lines += _table_of_means("## LM statistics", {lb: [lm_stats(r) for r in rs] for lb, rs in groups.items()},
                             "Last logged value of each `lm/*` metric per run, mean over runs.")
    lines += _table_of_means("## Evaluation (eval.json)", {lb: [r.eval for r in rs] for lb, rs in groups.items()},
                             "Numeric values of each run's eval.json, mean over runs.")
    if notes:
        lines += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    path = out_dir / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path, summary
