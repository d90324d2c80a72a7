"""Statistics over seeds: Student-t intervals for a handful of runs.

A grid cell has 3-5 seeds, too few for a bootstrap over seeds; the t interval is the
standard choice and is exact when seed-to-seed scores are normal. The t quantile is
computed here (numerically integrating the density) so the library needs no SciPy.
"""

from __future__ import annotations

import math

import numpy as np


def t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    # substitute t = tan(u): the heavy tail becomes a finite interval [0, atan|x|]
    u = np.linspace(0.0, math.atan(abs(x)), 4097)
    t = np.tan(u)
    dens = np.exp(log_c - (df + 1) / 2 * np.log1p(t * t / df)) / np.cos(u) ** 2
    half = float(np.sum((dens[1:] + dens[:-1]) / 2 * np.diff(u)))
    return 0.5 + math.copysign(half, x)


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t (bisection on `t_cdf`)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    lo, hi = -1e3, 1e3  # t_0.9995 with 1 dof is 637
    for _ in range(64):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mean_ci(values, confidence: float = 0.95) -> dict:
    """Mean, sample std and the t interval of the mean over independent runs (seeds)."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    n = len(x)
    if n == 0:
        return {"mean": None, "std": None, "ci": [None, None], "n": 0}
    mean = float(x.mean())
    if n == 1:
        return {"mean": mean, "std": None, "ci": [None, None], "n": 1}
    std = float(x.std(ddof=1))
    half = t_quantile(0.5 + confidence / 2, n - 1) * std / math.sqrt(n)
    return {"mean": mean, "std": std, "ci": [mean - half, mean + half], "n": n}
