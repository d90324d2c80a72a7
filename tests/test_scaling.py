"""Statistics over seeds, the samples-to-reach interpolation and the scaling-law fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from platonic.core.scaling import SaturatingLaw, fit_law, forecast, samples_to_reach, seed_noise
from platonic.core.stats import mean_ci


def test_mean_ci_is_the_t_interval():
    x = [0.11, 0.14, 0.12]
    s = mean_ci(x, 0.95)
    lo, hi = sps.t.interval(0.95, 2, loc=np.mean(x), scale=sps.sem(x))
    assert s["ci"] == pytest.approx([lo, hi], rel=1e-12)
    assert mean_ci([0.2])["ci"] == [None, None]
    assert mean_ci([])["mean"] is None


def test_fit_recovers_a_known_law():
    true = SaturatingLaw(a_inf=0.2, b=0.15, alpha=0.6, rmse=0.0)
    n = np.array([2_000, 4_000, 8_000, 16_000, 32_000])
    law = fit_law(n, true(n))
    assert law.a_inf == pytest.approx(0.2, abs=2e-3)
    assert law.alpha == pytest.approx(0.6, rel=0.03)
    assert float(law(100_000)) == pytest.approx(float(true(100_000)), abs=2e-3)


def test_fit_needs_three_budgets():
    with pytest.raises(ValueError, match="3 distinct budgets"):
        fit_law([1000, 1000, 2000], [0.1, 0.11, 0.12])


def test_fit_never_predicts_alignment_falling_with_samples():
    law = fit_law([1000, 2000, 4000, 8000], [0.2, 0.15, 0.12, 0.1])  # falling data
    assert law.b == 0.0 and float(law(1e6)) == pytest.approx(np.mean([0.2, 0.15, 0.12, 0.1]))


def test_forecast_interval_covers_noisy_runs_from_the_law():
    true = SaturatingLaw(0.2, 0.15, 0.6, 0.0)
    rng = np.random.default_rng(0)
    budgets = [1_000, 2_000, 4_000, 8_000]
    hits = 0
    for trial in range(20):
        runs = [(s, n, float(true(n)) + rng.normal(0, 0.004)) for s in range(4) for n in budgets]
        f = forecast(runs, 16_000, n_boot=300, seed=trial)
        new_run = float(true(16_000)) + rng.normal(0, 0.004)
        hits += f["interval"][0] <= new_run <= f["interval"][1]
        assert f["seed_noise"] == pytest.approx(0.004, rel=0.6)
    assert hits >= 16  # a 95% interval for one new run


def test_seed_noise_pools_equal_budgets():
    runs = [(0, 10, 0.1), (1, 10, 0.3), (0, 20, 0.5), (1, 20, 0.5), (0, 40, 0.9)]
    assert seed_noise(runs) == pytest.approx(math.sqrt(0.02 / 2))
    assert seed_noise([(0, 10, 0.1), (0, 20, 0.2)]) == 0.0


def test_samples_to_reach_interpolates_in_log_samples():
    n = [100, 200, 400, 800]
    y = [0.01, 0.05, 0.09, 0.12]
    v, status = samples_to_reach(n, y, 0.07)
    assert status == "reached" and v == pytest.approx(math.sqrt(200 * 400))
    assert samples_to_reach(n, y, 0.2) == (None, "not_reached")
    assert samples_to_reach(n, y, 0.005) == (100.0, "by_first")
    assert samples_to_reach(n, y, 0.12) == (800.0, "reached")
