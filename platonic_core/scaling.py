"""Alignment against samples: the number of samples needed to reach a score, and a
saturating scaling law fitted on finished runs.

The law is a(n) = a_inf − b · n^(−alpha) (b ≥ 0, alpha > 0): alignment rises with the
samples seen and saturates at a_inf. The paper says a scaling law predicts unseen runs
within seed noise but does not publish its form; this is the simplest saturating one. For
each alpha on a grid, (a_inf, b) is an ordinary least-squares problem, so the fit is a
1-D search with no optimiser and no starting point to tune.

    law = fit_law(samples, scores)
    f = forecast(runs, at=57_600)          # runs: (seed, samples, score) of finished runs
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

ALPHAS = np.geomspace(0.02, 3.0, 300)
UNIT = 1000.0  # samples are fitted in thousands: n^(-alpha) stays well scaled


@dataclass(frozen=True)
class SaturatingLaw:
    a_inf: float
    b: float
    alpha: float
    rmse: float  # on the fitted points

    def __call__(self, samples) -> np.ndarray:
        n = np.asarray(samples, dtype=np.float64) / UNIT
        return self.a_inf - self.b * n ** (-self.alpha)

    def as_dict(self) -> dict:
        return asdict(self)


def fit_law(samples, scores) -> SaturatingLaw:
    """Least squares over (a_inf, b) for each alpha on a grid; the best alpha is kept."""
    n = np.asarray(samples, dtype=np.float64) / UNIT
    y = np.asarray(scores, dtype=np.float64)
    if len(np.unique(n)) < 3:
        raise ValueError(
            f"a 3-parameter law needs runs at >= 3 distinct budgets, got {sorted(set((n * UNIT).tolist()))}"
        )
    x = n[None, :] ** (-ALPHAS[:, None])  # (A, N): one row per alpha on the grid
    xm = x.mean(1)
    xc = x - xm[:, None]
    denom = np.maximum((xc * xc).sum(1), 1e-300)
    b = np.maximum(0.0, -(xc @ (y - y.mean())) / denom)  # alignment may not fall with samples
    a_inf = y.mean() + b * xm
    sse = ((a_inf[:, None] - b[:, None] * x - y[None, :]) ** 2).sum(1)
    i = int(np.argmin(sse))
    return SaturatingLaw(float(a_inf[i]), float(b[i]), float(ALPHAS[i]), math.sqrt(float(sse[i]) / len(y)))


def forecast(
    runs: list[tuple[int, float, float]], at: float, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> dict:
    """Predict the score of one run with budget `at` from finished runs (seed, samples, score).

    The interval is for a single new run: the law is refitted on bootstrap resamples of
    the seeds (whole seeds, so each resample keeps every budget of a seed together), and
    each prediction gets seed noise added: a normal draw with the pooled seed-to-seed
    standard deviation at the fitted budgets.
    """
    if not runs:
        raise ValueError("no finished runs to fit")
    seeds = sorted({s for s, _, _ in runs})
    law = fit_law([n for _, n, _ in runs], [y for _, _, y in runs])
    noise = seed_noise(runs)
    rng = np.random.default_rng(seed)
    preds = []
    by_seed = {s: [(n, y) for s_, n, y in runs if s_ == s] for s in seeds}
    for _ in range(n_boot):
        pick = rng.choice(len(seeds), size=len(seeds), replace=True)
        pts = [p for i in pick for p in by_seed[seeds[i]]]
        try:
            f = fit_law([n for n, _ in pts], [y for _, y in pts])
        except ValueError:
            continue
        preds.append(float(f(at)) + rng.normal(0.0, noise))
    lo, hi = np.quantile(preds, [(1 - confidence) / 2, (1 + confidence) / 2])
    return {
        "samples": float(at),
        "prediction": float(law(at)),
        "interval": [float(lo), float(hi)],
        "confidence": confidence,
        "seed_noise": noise,
        "law": law.as_dict(),
        "fitted_runs": len(runs),
        "fitted_budgets": sorted({float(n) for _, n, _ in runs}),
        "seeds": seeds,
    }


def seed_noise(runs: list[tuple[int, float, float]]) -> float:
    """Pooled standard deviation of the score across seeds at equal budgets (0 if no budget
    has two seeds)."""
    by_budget: dict[float, list[float]] = {}
    for _, n, y in runs:
        by_budget.setdefault(n, []).append(y)
    groups = [np.asarray(v) for v in by_budget.values() if len(v) > 1]
    dof = sum(len(g) - 1 for g in groups)
    if dof == 0:
        return 0.0
    return float(math.sqrt(sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / dof))


def samples_to_reach(samples, scores, target: float) -> tuple[float | None, str]:
    """The samples at which a curve first reaches `target`, interpolated linearly in
    log(samples) between checkpoints. Status: "reached"; "by_first" (already at the first
    checkpoint: the value is an upper bound); "not_reached" (value None)."""
    n = np.asarray(samples, dtype=np.float64)
    y = np.asarray(scores, dtype=np.float64)
    above = np.nonzero(y >= target)[0]
    if len(above) == 0:
        return None, "not_reached"
    i = int(above[0])
    if i == 0:
        return float(n[0]), "by_first"
    if y[i] == target:
        return float(n[i]), "reached"
    frac = (target - y[i - 1]) / (y[i] - y[i - 1])
    return float(np.exp(np.log(n[i - 1]) + frac * (np.log(n[i]) - np.log(n[i - 1])))), "reached"
