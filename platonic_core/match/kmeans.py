"""k-means for the pair-free matcher: scikit-learn's `KMeans` (k-means++ seeding, Lloyd
iterations, the best of `n_init` starts by inertia), seeded, on float64 features.

(A numpy k-means lived here until issue 34; scikit-learn is installed with MLflow anyway.)
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans


def kmeans(
    x: np.ndarray, k: int, seed: int = 0, n_init: int = 10, max_iter: int = 100, tol: float = 1e-6
) -> tuple[np.ndarray, np.ndarray]:
    """(N, D) -> (labels (N,), centres (k, D)); the best of `n_init` runs by inertia."""
    x = np.asarray(x, dtype=np.float64)
    if not 1 <= k <= len(x):
        raise ValueError(f"k-means: k = {k} clusters for {len(x)} points")
    km = KMeans(n_clusters=k, n_init=n_init, max_iter=max_iter, tol=tol, random_state=seed, algorithm="lloyd")
    km.fit(x)
    return km.labels_, km.cluster_centers_
