"""Statistics for comparing arms over seeds: paired differences against a control, intervals, power.

Conventions (docs/design.md, "Reproductions"):

- **Seeds are common random numbers.** Seed ``s`` of every arm shares the network initialisation,
  the env layouts and the minibatch order, so an arm is compared with the control seed by seed:
  ``d_s = treatment_s - control_s`` over the seeds both ran (:func:`paired_differences`).
- **Mean difference** with a Student-t interval and a two-sided p-value (one-sample t-test of the
  ``d_s`` against 0, ``scipy.stats.ttest_1samp``), for any n >= 2.
- **Rank tests** when n >= 6: Wilcoxon signed-rank (``scipy.stats.wilcoxon``, exact when there are
  no ties or zeros) and the sign test (``scipy.stats.binomtest`` on the signs; zeros dropped).
- **Bootstrap** intervals (``scipy.stats.bootstrap``, BCa) only when n >= 10.
- **n <= 5**: an interval shown to a reader is the min-max **range**, never called a CI
  (:func:`value_interval`, :attr:`Paired.interval`); the t-interval is still computed (``t_low``,
  ``t_high`` in the results JSON).
- **Power**: the smallest difference a two-sided paired t-test at alpha 0.05 detects with power
  0.8, given n and the observed standard deviation of the ``d_s``
  (:func:`detectable_difference`, from the noncentral t distribution).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, stats

RANGE_MAX_SEEDS = 5        # an interval over this many seeds or fewer is a range
HOLM_MIN_TESTS = 4         # a report adds Holm-adjusted p-values when it makes more than 3 comparisons
RANK_TEST_MIN_SEEDS = 6    # Wilcoxon and sign test from this many seeds
BOOTSTRAP_MIN_SEEDS = 10   # bootstrap intervals from this many seeds

LABELS = {"range": "range", "t95": "t 95% CI", "bootstrap95": "bootstrap 95% CI", "none": "no interval"}


@dataclass(frozen=True)
class Interval:
    """An interval and what it is: ``range`` (min-max), ``t95``, ``bootstrap95`` or ``none`` (n < 2)."""

    kind: str
    low: float
    high: float

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    def format(self, digits: int = 2) -> str:
        if self.kind == "none":
            return "no interval (1 seed)"
        return f"{self.label} [{_fmt(self.low, digits)}, {_fmt(self.high, digits)}]"


def _fmt(x: float | None, digits: int) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _array(values: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError(f"values must be finite, got {x.tolist()}")
    return x


def t_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and its Student-t interval: mean -/+ t_{(1+c)/2, n-1} * sd / sqrt(n). Needs n >= 2."""
    x = _array(values)
    if len(x) < 2:
        raise ValueError("a t-interval needs at least 2 values")
    mean = float(x.mean())
    sem = float(stats.sem(x))
    if sem == 0.0:
        return mean, mean, mean
    low, high = stats.t.interval(confidence, len(x) - 1, loc=mean, scale=sem)
    return mean, float(low), float(high)


def bootstrap_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95,
                       seed: int = 0, resamples: int = 9999) -> tuple[float, float]:
    """BCa bootstrap interval of the mean (``scipy.stats.bootstrap``); [mean, mean] when all values agree."""
    x = _array(values)
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate-data and deprecation warnings; the result is checked
        res = stats.bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=resamples,
                              method="BCa", random_state=np.random.default_rng(seed))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return low, high


def value_interval(values: Sequence[float] | np.ndarray, seed: int = 0) -> Interval:
    """The interval to show for the mean of per-seed values: a range with <= 5 seeds, a t 95% CI
    with 6-9 seeds, a BCa bootstrap 95% CI with >= 10, none with 1."""
    x = _array(values)
    n = len(x)
    if n < 2:
        return Interval("none", math.nan, math.nan)
    if n <= RANGE_MAX_SEEDS:
        return Interval("range", float(x.min()), float(x.max()))
    if n < BOOTSTRAP_MIN_SEEDS:
        _, low, high = t_interval(x)
        return Interval("t95", low, high)
    return Interval("bootstrap95", *bootstrap_interval(x, seed=seed))


def paired_t_power(effect: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired (one-sample) t-test with n pairs at standardised effect
    ``effect`` = mean difference / sd of the differences (noncentral t with nc = effect * sqrt(n))."""
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = effect * math.sqrt(n)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest mean difference a two-sided paired t-test over ``n`` pairs detects with the
    given power, when the per-seed differences have standard deviation ``sd``. NaN when n < 2."""
    if n < 2 or not math.isfinite(sd):
        return math.nan
    if sd == 0.0:
        return 0.0
    def gap(effect: float) -> float:
        value = paired_t_power(effect, n, alpha)
        return (1.0 if math.isnan(value) else value) - power  # nct can return NaN far in the tail: power ~ 1

    high = 1.0
    while gap(high) < 0:
        high *= 2.0
    effect = optimize.brentq(gap, 1e-9, high, xtol=1e-12)
    return float(effect * sd)


def paired_differences(treatment: Mapping[Any, float], control: Mapping[Any, float]) -> tuple[list[Any], np.ndarray]:
    """Seeds both arms ran (sorted) and ``treatment[s] - control[s]`` for each."""
    seeds = sorted(set(treatment) & set(control), key=lambda s: (str(type(s)), s))
    diffs = np.array([float(treatment[s]) - float(control[s]) for s in seeds], dtype=np.float64)
    return seeds, diffs


@dataclass(frozen=True)
class Paired:
    """Paired comparison of ``treatment`` against ``control`` over the seeds both ran."""

    treatment: str
    control: str
    seeds: tuple[Any, ...]
    differences: tuple[float, ...]
    mean: float
    sd: float
    t_low: float
    t_high: float
    p: float                      # two-sided one-sample t-test of the differences against 0
    wilcoxon_p: float | None      # n >= 6
    sign_p: float | None          # n >= 6
    bootstrap_low: float | None   # n >= 10
    bootstrap_high: float | None
    detectable: float             # smallest difference detectable (alpha 0.05, power 0.8) at this sd and n

    @property
    def n(self) -> int:
        return len(self.differences)

    @property
    def interval(self) -> Interval:
        """The interval to show: the range of the differences with <= 5 seeds, else the t 95% CI."""
        if self.n < 2:
            return Interval("none", math.nan, math.nan)
        if self.n <= RANGE_MAX_SEEDS:
            return Interval("range", min(self.differences), max(self.differences))
        return Interval("t95", self.t_low, self.t_high)

    def to_json(self) -> dict[str, Any]:
        """docs/design.md's ``paired`` entry (mean, t_low, t_high, p, n) plus the rest."""
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else float(x)

        return {"mean": num(self.mean), "t_low": num(self.t_low), "t_high": num(self.t_high), "p": num(self.p),
                "n": self.n, "seeds": list(self.seeds), "differences": list(self.differences), "sd": num(self.sd),
                "interval": self.interval.kind, "interval_low": num(self.interval.low),
                "interval_high": num(self.interval.high), "wilcoxon_p": num(self.wilcoxon_p),
                "sign_p": num(self.sign_p), "bootstrap_low": num(self.bootstrap_low),
                "bootstrap_high": num(self.bootstrap_high), "detectable_difference": num(self.detectable),
                "positive": int(sum(d > 0 for d in self.differences)),
                "negative": int(sum(d < 0 for d in self.differences))}


def sign_test(differences: Sequence[float] | np.ndarray) -> float:
    """Two-sided exact sign test: the number of positive differences against Binomial(n_nonzero, 1/2)."""
    d = _array(differences)
    d = d[d != 0]
    if len(d) == 0:
        return 1.0
    return float(stats.binomtest(int((d > 0).sum()), len(d), 0.5).pvalue)


def wilcoxon_test(differences: Sequence[float] | np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value of the differences against 0 (1.0 when all are 0)."""
    d = _array(differences)
    if np.all(d == 0):
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns when ties force the normal approximation
        return float(stats.wilcoxon(d).pvalue)


def paired(treatment: Mapping[Any, float], control: Mapping[Any, float], names: tuple[str, str] = ("treatment", "control"),
           alpha: float = 0.05, power: float = 0.8, seed: int = 0) -> Paired:
    """Compare per-seed values ``{seed: value}`` of an arm with a control's, matched by seed."""
    seeds, d = paired_differences(treatment, control)
    n = len(d)
    if n == 0:
        raise ValueError(f"{names[0]} and {names[1]} share no seed "
                         f"({sorted(map(str, treatment))} vs {sorted(map(str, control))})")
    mean = float(d.mean())
    sd = float(d.std(ddof=1)) if n >= 2 else math.nan
    t_low = t_high = p = math.nan
    if n >= 2:
        _, t_low, t_high = t_interval(d, 1 - alpha)
        if sd > 0:
            p = float(stats.ttest_1samp(d, 0.0).pvalue)
        else:  # every seed gave the same difference: no spread for a t statistic
            p = 1.0 if mean == 0 else math.nan
    rank = n >= RANK_TEST_MIN_SEEDS
    boot = bootstrap_interval(d, 1 - alpha, seed=seed) if n >= BOOTSTRAP_MIN_SEEDS else (None, None)
    return Paired(names[0], names[1], tuple(seeds), tuple(float(x) for x in d), mean, sd, t_low, t_high, p,
                  wilcoxon_test(d) if rank else None, sign_test(d) if rank else None, boot[0], boot[1],
                  detectable_difference(sd, n, alpha, power))


def holm(pvalues: Mapping[Any, float | None]) -> dict[Any, float | None]:
    """Holm-Bonferroni adjusted p-values of a family of tests: the i-th smallest of m p-values times (m - i + 1),
    made monotone and capped at 1.  A missing or NaN p-value is no test: it stays None and does not count in m."""
    valid = sorted(((float(p), key) for key, p in pvalues.items() if p is not None and math.isfinite(p)),
                   key=lambda item: item[0])
    adjusted: dict[Any, float | None] = dict.fromkeys(pvalues)
    running, m = 0.0, len(valid)
    for i, (p, key) in enumerate(valid):
        running = max(running, min(1.0, (m - i) * p))
        adjusted[key] = running
    return adjusted


def add_holm(paired: dict[str, dict[str, Any]]) -> bool:
    """With more than 3 comparisons (``HOLM_MIN_TESTS``), add ``p_holm`` (Holm-adjusted over this family) to
    each entry of a report's ``paired`` dict (``Paired.to_json()`` values); whether it did."""
    tested = {name: d.get("p") for name, d in paired.items()}
    if sum(p is not None and math.isfinite(p) for p in tested.values()) < HOLM_MIN_TESTS:
        return False
    for name, p in holm(tested).items():
        paired[name]["p_holm"] = p
    return True
