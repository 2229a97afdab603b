"""Learning curves: per-run series binned on a common step grid, optional smoothing, bands over seeds
(:mod:`llmguide.stats`' rules), and ``learning_curves.png``.

A run's series is first smoothed (``smooth=N``: the trailing mean of its last N logged values, fewer at
the start), then binned: the mean of the values with step in each bin, carried forward over empty bins.
A band over seeds is the min-max **range** with 2-5 seeds, a Student-t 95% CI of the mean with 6-9, a
95% bootstrap CI (rliable) with >= 10; one seed has no band.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from llmguide import stats
from llmguide.report.runs import Run, episode_returns, metric_series

CURVE_POINTS = 25
# plotted instead of the episodic return when no run finished an episode (logged once per update)
PROGRESS_KEYS = (("charts/extrinsic_reward", "extrinsic"), ("charts/intrinsic_reward", "intrinsic"))

BAND_TEXT = {"none": "1 seed", "range": "range over seeds", "t95": "t 95% CI", "bootstrap95": "bootstrap 95% CI"}
INTERVAL_RULE = ("Intervals over seeds: the min-max range with <= 5 seeds (not a confidence interval), a Student-t "
                 "95% CI of the mean with 6-9 seeds, a 95% bootstrap CI with >= 10.")


def smooth(values: np.ndarray, window: int | None) -> np.ndarray:
    """Trailing mean over the last ``window`` values (fewer at the start); unchanged when window <= 1."""
    values = np.asarray(values, np.float64)
    if not window or window <= 1 or len(values) == 0:
        return values
    csum = np.concatenate([[0.0], np.cumsum(values)])
    idx = np.arange(1, len(values) + 1)
    start = np.maximum(idx - int(window), 0)
    return (csum[idx] - csum[start]) / (idx - start)


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


def curve_matrix(series: list[tuple[np.ndarray, np.ndarray]], points: int = CURVE_POINTS,
                 window: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Grid up to the shortest run's last step and the (runs, points) matrix of smoothed binned curves,
    both restricted to the points where every run has a value."""
    end = min(s.max() for s, _ in series)
    grid = np.linspace(0, end, points + 1)[1:]
    matrix = np.stack([binned_curve(s, smooth(v, window), grid) for s, v in series])
    keep = np.all(np.isfinite(matrix), axis=0)
    return grid[keep], matrix[:, keep]


def iqm(x: np.ndarray) -> np.ndarray:
    """``rliable.metrics.aggregate_iqm`` of every point (last axis) at once."""
    from scipy.stats import trim_mean

    return trim_mean(x.reshape(-1, x.shape[-1]), proportiontocut=0.25, axis=0)


def _mean(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1, x.shape[-1]).mean(axis=0)


def interval_estimates(scores: np.ndarray, reps: int, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """IQM and mean over runs of a (runs, points) matrix with 95% bootstrap CIs (rliable)."""
    from rliable import library

    out = {}
    for name, func in (("iqm", iqm), ("mean", _mean)):
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


def smoothing_text(window: int | None, what: str = "logged values") -> str:
    """The caption's sentence on smoothing ('' without)."""
    return f" Curves are smoothed: each run's trailing mean over its last {int(window)} {what}." \
        if window and window > 1 else ""


def _plot_groups(ax, series: dict[str, list[tuple[np.ndarray, np.ndarray]]], reps: int, window: int | None,
                 center: str, style: str = "-", suffix: str = "") -> set[str]:
    """One line (and band) per group; the band kinds drawn."""
    kinds = set()
    for label, items in series.items():
        items = [(s, v) for s, v in items if len(s)]
        if not items:
            continue
        grid, matrix = curve_matrix(items, CURVE_POINTS, window)
        if len(items) == 1:
            ax.plot(grid, matrix[0], style, label=f"{label}{suffix} (1 seed)")
            continue
        mid, low, high, kind = seed_band(matrix, reps, center=center)
        kinds.add(kind)
        name = "IQM" if kind == "bootstrap95" and center == "iqm" else "mean"
        line, = ax.plot(grid, mid, style, label=f"{label}{suffix} ({name}, n={len(items)}, shaded: {BAND_TEXT[kind]})")
        ax.fill_between(grid, low, high, alpha=0.25, color=line.get_color())
    return kinds


def _finish(fig: Figure, ax, ylabel: str, title: str, kinds: set[str], window: int | None, path: Path) -> None:
    if kinds:
        title += " (shaded: " + ", ".join(BAND_TEXT[k] for k in sorted(kinds)) + ")"
    if window and window > 1:
        title += f", smoothed over {int(window)}"
    ax.set_xlabel("env steps")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def learning_plot(groups: dict[str, list[Run]], out: Path, reps: int, window: int | None = None) -> list[str]:
    """``learning_curves.png`` and its Markdown lines: the episodic return per group over seeds or, when no
    run finished an episode, the mean reward per step of each logged update (``PROGRESS_KEYS``), so a short
    run still gets a plot. ``[]`` when a run logged neither."""
    returns = {label: [episode_returns(r) for r in runs] for label, runs in groups.items()}
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    path = out / "learning_curves.png"
    if any(len(s) for items in returns.values() for s, _ in items):
        kinds = _plot_groups(ax, returns, reps, window, center="iqm")
        _finish(fig, ax, "episodic return", "Episodic return over seeds", kinds, window, path)
        return ["![learning curves](learning_curves.png)", "",
                "Curves: mean over seeds below 10 seeds, IQM from 10." + smoothing_text(window, "episodes"), ""]
    kinds, drawn = set(), []
    for (key, name), style in zip(PROGRESS_KEYS, ("-", "--"), strict=True):
        series = {label: [metric_series(r, key) for r in runs] for label, runs in groups.items()}
        if any(len(s) for items in series.values() for s, _ in items):
            kinds |= _plot_groups(ax, series, reps, window, center="mean", style=style, suffix=f" {name}")
            drawn.append(f"`{key}`")
    if not drawn:
        return []
    _finish(fig, ax, "mean reward per step", "No finished episode: reward per step over seeds", kinds, window, path)
    return ["![learning curves](learning_curves.png)", "",
            "No run finished an episode, so the plot shows the mean reward per env step of each logged update ("
            + ", ".join(drawn) + ") instead of the episodic return; mean over seeds." + smoothing_text(window), ""]
