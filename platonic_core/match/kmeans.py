"""k-means (k-means++ seeding, Lloyd iterations, best of `n_init` by inertia) in numpy.

Small and deterministic given the seed; enough for 10k x 1280 features and C up to a few
hundred clusters on one CPU thread. (scikit-learn's KMeans would do the same; the library
keeps to numpy/scipy.)
"""

from __future__ import annotations

import numpy as np


def _sq_dists(x: np.ndarray, x_sq: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """(N, D), (N,), (K, D) -> (N, K) squared Euclidean distances (clipped at 0)."""
    d = x_sq[:, None] - 2.0 * (x @ centres.T) + (centres * centres).sum(1)[None, :]
    return np.maximum(d, 0.0)


def _plus_plus(x: np.ndarray, x_sq: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding: each next centre drawn with probability ∝ squared distance to the
    nearest centre so far."""
    n = len(x)
    centres = [x[rng.integers(n)]]
    d = _sq_dists(x, x_sq, np.asarray(centres))[:, 0]
    for _ in range(1, k):
        total = d.sum()
        i = int(rng.choice(n, p=d / total)) if total > 0 else int(rng.integers(n))
        centres.append(x[i])
        d = np.minimum(d, _sq_dists(x, x_sq, x[i : i + 1])[:, 0])
    return np.asarray(centres)


def kmeans(
    x: np.ndarray, k: int, seed: int = 0, n_init: int = 10, max_iter: int = 100, tol: float = 1e-6
) -> tuple[np.ndarray, np.ndarray]:
    """(N, D) -> (labels (N,), centres (k, D)); the best of `n_init` runs by inertia."""
    x = np.asarray(x, dtype=np.float64)
    if not 1 <= k <= len(x):
        raise ValueError(f"k-means: k = {k} clusters for {len(x)} points")
    rng = np.random.default_rng(seed)
    x_sq = (x * x).sum(1)
    best = (np.inf, None, None)
    for _ in range(n_init):
        centres = _plus_plus(x, x_sq, k, rng)
        prev = np.inf
        for _ in range(max_iter):
            d = _sq_dists(x, x_sq, centres)
            labels = d.argmin(1)
            inertia = float(d[np.arange(len(x)), labels].sum())
            counts = np.bincount(labels, minlength=k)
            sums = np.zeros_like(centres)
            np.add.at(sums, labels, x)
            empty = counts == 0
            centres = np.where(empty[:, None], centres, sums / np.maximum(counts, 1)[:, None])
            if empty.any():  # an empty cluster restarts at the points farthest from their centre
                far = np.argsort(-d[np.arange(len(x)), labels])[: int(empty.sum())]
                centres[empty] = x[far]
            if prev - inertia <= tol * max(prev, 1e-12):
                break
            prev = inertia
        d = _sq_dists(x, x_sq, centres)
        labels = d.argmin(1)
        inertia = float(d[np.arange(len(x)), labels].sum())
        if inertia < best[0]:
            best = (inertia, labels, centres)
    return best[1], best[2]
