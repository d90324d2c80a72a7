"""Statistics over seeds: Student-t intervals for a handful of runs.

A grid cell has 3-5 seeds, too few for a bootstrap over seeds; the t interval is the
standard choice and is exact when seed-to-seed scores are normal.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


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
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    return {"mean": mean, "std": std, "ci": [mean - half, mean + half], "n": n}
