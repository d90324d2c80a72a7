"""A map from image features to text features found without a single image-caption pair.

The theorem says the two representations agree up to a rotation. If they do, the rotation can
be read off the two clouds alone, since everything a rotation preserves is shared: the
spectrum of the covariance (so the principal axes correspond, up to sign), the distribution
along each axis (so its skewness fixes the sign), each point's similarities to the others
(so points that play the same part can be matched). The method (Wasserstein-Procrustes,
Grave et al. 2019, with an unsupervised start):

1. each cloud centred, scaled to unit RMS norm and reduced to its top `dim` principal
   directions (the same number on both sides: the spaces may differ in width);
2. `points` images and `points` captions, by default of *disjoint* scenes: no image's own
   caption is on the other side, so only the two distributions can agree;
3. a start from within-modality structure only: `axes` pairs the i-th principal axis of one
   cloud with the i-th of the other, its sign chosen so that the two distributions along the
   axes agree (a rotation carries a cloud's principal axes, and the distribution along each,
   along); `profiles` matches each point's sorted similarities to the others (Artetxe et al.
   2018), which a rotation leaves unchanged, and fits Procrustes on that soft matching;
4. alternate: Sinkhorn matching of the rotated images to the captions (entropy `epsilon` ×
   the mean cost), then orthogonal Procrustes on the matching, `iterations` times;
5. an axis whose sign the start got wrong is a local minimum of 4: flip each axis in turn,
   refine briefly (`flip_iterations`), keep the flip if the matching's transport cost drops;
   up to `sweeps` sweeps. The transport cost is the only criterion: no pair chooses anything.

Assumptions: (a) after centring and scaling the two clouds are close to isometric (one a
rotation of the other, plus noise): the hypothesis itself; (b) both sides sample the same
distribution of scenes (here: training scenes drawn alike); (c) the top `dim` principal
directions carry the shared structure, with distinct variances (axes of nearly equal
variance are told apart only by the matching); (d) enough points for the matching to tell a
right rotation from a wrong one through sampling noise. Where (a) fails the
method still returns *a* rotation, not the right one: the table shows how far that gets
against the paired map.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy.linalg import orthogonal_procrustes

from ..retrieval import LinearMap

if TYPE_CHECKING:
    from ..config import PairFreeConfig


def sinkhorn(cost: np.ndarray, eps: float, iters: int = 100) -> np.ndarray:
    """Entropic optimal transport between uniform marginals: the coupling T (n, m), rows
    summing to 1/n and columns to 1/m, minimising <T, cost> − eps·H(T) (Sinkhorn's scaling
    iterations; the cost shifted by its minimum so the kernel cannot underflow everywhere)."""
    n, m = cost.shape
    k = np.exp(-(cost - cost.min()) / eps)  # (n, m)
    u, v = np.full(n, 1.0 / n), np.full(m, 1.0 / m)
    for _ in range(iters):
        u = (1.0 / n) / np.maximum(k @ v, 1e-300)
        v = (1.0 / m) / np.maximum(k.T @ u, 1e-300)
    return u[:, None] * k * v[None, :]


def _sqdist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T, 0.0)


def quantile_signs(a: np.ndarray, b: np.ndarray, q: int = 49) -> np.ndarray:
    """±1 per principal axis: the sign that makes the images' distribution along the axis
    (its quantiles) closest to the captions' along theirs. A rotation carries each axis's
    distribution along, so where they are skewed the sign is fixed; where symmetric, it is
    left to the matching."""
    qs = np.linspace(0.02, 0.98, q)
    qa, qn, qb = np.quantile(a, qs, axis=0), np.quantile(-a, qs, axis=0), np.quantile(b, qs, axis=0)  # (q, d)
    return np.where(((qa - qb) ** 2).sum(0) <= ((qn - qb) ** 2).sum(0), 1.0, -1.0)


def similarity_profiles(x: np.ndarray, y: np.ndarray, eps: float) -> np.ndarray:
    """Artetxe et al.'s unsupervised start: each point's sorted similarities to the others
    (the square root of the Gram matrix, so both sides' spectra count alike), compared
    across clouds; a Sinkhorn coupling on those profile similarities."""

    def profile(a: np.ndarray) -> np.ndarray:
        u, s, _ = np.linalg.svd(a, full_matrices=False)
        p = np.sort((u * s) @ u.T, axis=1)  # (n, n)
        p = p - p.mean(1, keepdims=True)
        return p / np.maximum(np.linalg.norm(p, axis=1, keepdims=True), 1e-12)

    n = min(len(x), len(y))
    cost = 1 - profile(x[:n]) @ profile(y[:n]).T
    return sinkhorn(cost, eps * float(cost.mean()))


def _standardise(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    mean = a.mean(0)
    scale = float(np.sqrt(((a - mean) ** 2).sum(1).mean())) or 1.0  # RMS norm of the centred rows
    return mean, (a - mean) / scale, scale


def _pca(a: np.ndarray, d: int) -> np.ndarray:
    """Top-d principal directions of centred rows: (D, d)."""
    _, _, vt = np.linalg.svd(a, full_matrices=False)
    return vt[:d].T


def _refine(a: np.ndarray, b: np.ndarray, r: np.ndarray, eps: float, iterations: int) -> tuple[np.ndarray, float]:
    """Wasserstein-Procrustes from rotation r: match (Sinkhorn), fit the rotation to the
    matching (Procrustes), repeat. Returns the rotation and its matching's transport cost."""
    for _ in range(iterations):
        cost = _sqdist(a @ r, b)  # (n, m)
        plan = sinkhorn(cost, eps * float(cost.mean()))  # (n, m)
        r, _ = orthogonal_procrustes(a, plan @ b)  # (d, d): a @ r ≈ the matched b (U Vᵀ of aᵀ plan b)
    cost = _sqdist(a @ r, b)
    return r, float((sinkhorn(cost, eps * float(cost.mean())) * cost).sum())


def fit_pairfree(
    x: np.ndarray,
    y: np.ndarray,
    p: PairFreeConfig,
    seed: int = 0,
    check_pairs: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[LinearMap, dict]:
    """A map X -> Y from two unpaired clouds (x: (Nx, Dx) images, y: (Ny, Dy) captions; the
    rows need not correspond, nor their numbers agree). Returns a `LinearMap` (its `predict`
    gives Y coordinates) and diagnostics (transport cost along the way, flips accepted).

    `check_pairs` (paired rows, used after the fit and only for a diagnostic): the rotation
    the pairs would choose in the same coordinates, and its transport cost on the same points.
    If that cost is *higher* than the one found, no pair-free search could have found the
    paired map: the two clouds are not isometric enough for their distributions to tell."""
    rng = np.random.default_rng(seed)
    xm, xc, xs = _standardise(x.astype(np.float64))
    ym, yc, ys = _standardise(y.astype(np.float64))
    d = min(p.dim, x.shape[1], y.shape[1], len(x) - 1, len(y) - 1)
    px, py = _pca(xc, d), _pca(yc, d)  # (Dx, d), (Dy, d)
    if p.init == "axes":  # axis i of the images -> axis i of the captions, signed by their distributions
        px = px * quantile_signs(xc @ px, yc @ py)
    xi = rng.choice(len(x), min(p.points, len(x)), replace=False)
    yi = rng.choice(len(y), min(p.points, len(y)), replace=False)
    a, b = xc[xi] @ px, yc[yi] @ py  # (n, d), (m, d)
    if p.init == "axes":
        r = np.eye(d)
    elif p.init == "profiles":
        t = similarity_profiles(a, b, p.epsilon)  # (n', n'): the first n' = min(n, m) points
        r, _ = orthogonal_procrustes(a[: len(t)], t @ b[: len(t)])
    else:
        raise ValueError(f"unknown pair-free init {p.init!r} (axes, profiles)")
    r, cost = _refine(a, b, r, p.epsilon, p.iterations)
    trace, flips = [cost], 0
    # an axis whose sign the start got wrong is a local minimum of the refinement: try each
    # flip, keep it if the matching gets cheaper, until a sweep changes nothing
    for _ in range(p.sweeps):
        changed = False
        for i in range(d):
            flip = np.ones(d)
            flip[i] = -1.0
            r2, c2 = _refine(a, b, flip[:, None] * r, p.epsilon, p.flip_iterations)
            if c2 < cost - 1e-9:
                r, cost, changed, flips = r2, c2, True, flips + 1
        trace.append(cost)
        if not changed:
            break
    w = px @ r @ py.T  # (Dx, Dy): centred/scaled X -> centred/scaled Y through the d-dim rotation
    m = LinearMap("pairfree", w, xm, ym, xs, ys, x.shape[1])
    info = {"transport_cost": cost, "cost_per_sweep": trace, "flips": flips, "dim": d, "points": [len(a), len(b)]}
    if check_pairs is not None:
        pa, pb = ((check_pairs[0] - xm) / xs) @ px, ((check_pairs[1] - ym) / ys) @ py  # (N, d) each
        rp, _ = orthogonal_procrustes(pa, pb)
        c = _sqdist(a @ rp, b)
        info["paired_rotation_transport_cost"] = float((sinkhorn(c, p.epsilon * float(c.mean())) * c).sum())
        info["paired_rotation_residual"] = float(np.linalg.norm(pa @ rp - pb) / max(np.linalg.norm(pb), 1e-12))
    return m, info
