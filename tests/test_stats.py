"""llmguide.stats against values computed independently: closed forms, exact counts, simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmguide import stats

T975 = {2: 4.302652729911275, 3: 3.182446305284263, 9: 2.262157162798205}  # Student-t 0.975 quantiles (tables)


def t3_two_sided_p(t: float) -> float:
    """Two-sided p of a t statistic with 3 degrees of freedom, from the closed-form CDF
    F(t) = 1/2 + (1/pi) * [ (t/sqrt3) / (1 + t^2/3) + atan(t/sqrt3) ]."""
    x = abs(t) / math.sqrt(3)
    return 1 - (2 / math.pi) * (x / (1 + x * x) + math.atan(x))


def test_paired_t_matches_a_hand_computed_example():
    # treatment - control per seed: 2, 3, 2, 3 -> mean 2.5, sd sqrt(1/3), se sqrt(1/3)/2, t = 8.660
    treatment = {3: 6.0, 0: 3.0, 2: 4.0, 1: 5.0, 7: 100.0}   # seed 7 has no control: not paired
    control = {0: 1.0, 1: 2.0, 2: 2.0, 3: 3.0}
    r = stats.paired(treatment, control, names=("arm", "ctl"))
    assert r.seeds == (0, 1, 2, 3) and r.differences == (2.0, 3.0, 2.0, 3.0) and r.n == 4
    se = math.sqrt(1 / 3) / 2
    assert r.mean == pytest.approx(2.5) and r.sd == pytest.approx(math.sqrt(1 / 3))
    assert r.t_low == pytest.approx(2.5 - T975[3] * se, abs=1e-9)   # 1.58131
    assert r.t_high == pytest.approx(2.5 + T975[3] * se, abs=1e-9)  # 3.41869
    assert r.p == pytest.approx(t3_two_sided_p(2.5 / se), rel=1e-9)  # 0.003239
    assert r.p == pytest.approx(0.003239, abs=1e-6)
    # <= 5 seeds: what a reader sees is the range of the differences, never a CI; no rank tests, no bootstrap
    assert r.interval == stats.Interval("range", 2.0, 3.0)
    assert "CI" not in r.interval.format() and r.interval.format() == "range [2.00, 3.00]"
    assert r.wilcoxon_p is None and r.sign_p is None and r.bootstrap_low is None
    js = r.to_json()
    assert {"mean", "t_low", "t_high", "p", "n"} <= set(js) and js["interval"] == "range" and js["positive"] == 4


def test_pairing_is_by_seed_not_by_position():
    control = {0: 1.0, 1: 5.0, 2: 9.0, 3: 13.0}
    treatment = {3: 14.0, 2: 10.0, 1: 6.0, 0: 2.0}   # +1 at every seed, listed in another order
    r = stats.paired(treatment, control)
    assert r.differences == (1.0, 1.0, 1.0, 1.0) and r.sd == 0.0
    assert (r.t_low, r.t_high) == (1.0, 1.0) and math.isnan(r.p) and r.detectable == 0.0
    with pytest.raises(ValueError, match="share no seed"):
        stats.paired({5: 1.0}, {0: 1.0})


def test_rank_tests_from_six_seeds_exact_values():
    control = dict.fromkeys(range(6), 0.0)
    # differences 1, -2, 3, 4, 5, 6: W- = 2; P(W- <= 2) = #{{}, {1}, {2}} / 2^6 -> two-sided 6/64
    r = stats.paired(dict(enumerate([1.0, -2.0, 3.0, 4.0, 5.0, 6.0])), control)
    assert r.wilcoxon_p == pytest.approx(6 / 64)
    assert r.sign_p == pytest.approx(2 * (1 + 6) / 64)   # 5 of 6 positive: 2 * P(X <= 1), X ~ Bin(6, 1/2)
    assert r.interval.kind == "t95" and r.interval.low == r.t_low and r.bootstrap_low is None
    every = stats.paired(dict(enumerate([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])), control)
    assert every.wilcoxon_p == pytest.approx(2 / 64) and every.sign_p == pytest.approx(2 / 64)
    five = stats.paired(dict(enumerate([1.0, -2.0, 3.0, 4.0, 5.0])), control)
    assert five.wilcoxon_p is None and five.sign_p is None and five.interval.kind == "range"
    assert stats.sign_test([0.0, 0.0, 1.0]) == 1.0 and stats.wilcoxon_test([0.0] * 6) == 1.0


def test_bootstrap_only_from_ten_seeds():
    rng = np.random.default_rng(3)
    base = dict(enumerate(rng.normal(0, 1, 12)))
    nine = {s: base[s] + 1.0 + rng.normal(0, 0.5) for s in range(9)}
    assert stats.paired(nine, base).bootstrap_low is None
    ten = {s: base[s] + 1.0 + rng.normal(0, 0.5) for s in range(10)}
    r = stats.paired(ten, base)
    assert r.bootstrap_low < r.mean < r.bootstrap_high
    # for near-normal differences the bootstrap and t intervals of the mean roughly agree
    assert r.bootstrap_high - r.bootstrap_low == pytest.approx(r.t_high - r.t_low, rel=0.35)
    assert stats.paired(ten, base, seed=0).bootstrap_low == r.bootstrap_low   # seeded: reproducible


def test_value_interval_labels_by_seed_count():
    assert stats.value_interval([1.0]).kind == "none"
    three = stats.value_interval([2.0, 9.0, 4.0])
    assert three == stats.Interval("range", 2.0, 9.0) and three.label == "range"
    assert stats.value_interval([1.0, 2.0, 3.0, 4.0, 5.0]).kind == "range"
    six = [1.0, 2.0, 3.0, 4.0, 5.0, 9.0]   # mean 4, sd sqrt(52/5)... t-interval by hand below
    iv = stats.value_interval(six)
    sd = math.sqrt(sum((x - 4.0) ** 2 for x in six) / 5)
    half = 2.570581835636314 * sd / math.sqrt(6)   # t_{0.975, 5}
    assert iv.kind == "t95" and iv.low == pytest.approx(4.0 - half) and iv.high == pytest.approx(4.0 + half)
    assert iv.format().startswith("t 95% CI [")
    assert stats.value_interval(np.arange(10.0)).kind == "bootstrap95"


def test_detectable_difference_gives_power_080_by_simulation():
    """At the returned difference a two-sided paired t-test rejects in 80% of simulated studies."""
    rng = np.random.default_rng(0)
    for n, sd in ((10, 1.0), (3, 2.5)):
        delta = stats.detectable_difference(sd, n)
        d = rng.normal(delta, sd, size=(40_000, n))
        t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
        assert np.mean(np.abs(t) > T975[n - 1]) == pytest.approx(0.80, abs=0.012)
    # published anchor (G*Power / R power.t.test, one-sample, n = 10): d = 0.996
    assert stats.detectable_difference(1.0, 10) == pytest.approx(0.996, abs=0.001)
    # large n: the normal approximation (z_0.975 + z_0.8) / sqrt(n)
    assert stats.detectable_difference(1.0, 2000) == pytest.approx((1.959964 + 0.841621) / math.sqrt(2000), rel=0.002)
    assert stats.detectable_difference(2.0, 10) == pytest.approx(2 * stats.detectable_difference(1.0, 10))
    assert math.isnan(stats.detectable_difference(1.0, 1))
    # smaller for more seeds, and the paired result carries it at the observed sd
    assert stats.detectable_difference(1.0, 5) > stats.detectable_difference(1.0, 6)
    r = stats.paired({0: 2.0, 1: 3.0, 2: 2.0, 3: 3.0}, dict.fromkeys(range(4), 0.0))
    assert r.detectable == pytest.approx(stats.detectable_difference(math.sqrt(1 / 3), 4))


def test_t_interval_rejects_bad_input():
    with pytest.raises(ValueError):
        stats.t_interval([1.0])
    with pytest.raises(ValueError, match="finite"):
        stats.value_interval([1.0, float("nan")])
