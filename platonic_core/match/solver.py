"""Pair-free assignment: which class name goes with which image cluster, from the shape of
the two similarity structures alone.

Both sides give a C x C kernel (clusters: centroid similarities; classes: prompt-embedding
similarities). A one-to-one assignment π (cluster i -> class π(i)) is scored by the
quadratic-assignment (QAP) objective

    f(π) = Σ_{i,j} A[i, j] · B[π(i), π(j)]

(Gromov–Wasserstein with a permutation coupling and the inner-product loss: maximising f is
minimising ||A − P B Pᵀ||², since both norms are fixed under permutation). No pair of an
image and a text is seen.

Solvers (`solve`):
- `exact` (C <= 10): every permutation, enumerated level by level with running partial
  scores in numpy (10! = 3.6M complete assignments, about a second). Exact, so a wrong
  match is the kernels' fault, never the search's.
- `faq` (any C): scipy's `quadratic_assignment` (the Fast Approximate QAP of Vogelstein et
  al.: Frank–Wolfe on the doubly-stochastic relaxation, projected by a linear assignment)
  from `restarts` random doubly-stochastic starts (the first from the barycentre), each
  polished by 2-opt (pairwise swaps while any improves f). QAP is NP-hard; restarts + 2-opt
  is the standard heuristic for C up to a few hundred. Schnaus et al. (CVPR 2025) use a
  factorised Hahn–Grant solver instead; FAQ ships with scipy and, on the instances checked in
  tests/test_match.py, reaches the exact optimum at C = 8.
- `auto`: exact when C <= 10, faq otherwise.

Soft scores for top-k (`swap_gains`): the score of (cluster i, class c) is the change in f
when c is swapped into cluster i (c's cluster gets i's class): 0 for the assigned class,
<= 0 for every other at a 2-opt optimum. A cluster's top-5 are its 5 best-scoring classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EXACT_MAX = 10  # 10! complete assignments; 11! would need ~40M rows in memory
TIE_TOL = 1e-9  # relative: objective values this close are one value (summation order differs)


def standardise_kernel(k: np.ndarray) -> np.ndarray:
    """(C, C) similarities -> zero diagonal, off-diagonal entries z-scored: the two kernels
    come from different spaces, so only their relative structure is comparable."""
    k = np.asarray(k, dtype=np.float64)
    c = k.shape[0]
    off = ~np.eye(c, dtype=bool)
    vals = k[off]
    std = vals.std()
    out = np.zeros_like(k)
    out[off] = (vals - vals.mean()) / (std if std > 0 else 1.0)
    return (out + out.T) / 2  # exact symmetry (the swap algebra assumes it)


def objective(a: np.ndarray, b: np.ndarray, perm: np.ndarray) -> float:
    """f(π) = Σ_ij A[i,j] B[π(i), π(j)]."""
    return float((a * b[np.ix_(perm, perm)]).sum())


def swap_gains(a: np.ndarray, b: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """(C, C) Δ[i, j] = f(π after swapping the classes of clusters i and j) − f(π).

    For symmetric A, B with zero diagonals, with Bp = B[π][:, π] and M = A·Bp:
    Δ[i,j] = 2 (M[i,j] + M[j,i] − M[i,i] − M[j,j] + 2 A[i,j] Bp[i,j]), and Δ[i,i] = 0."""
    bp = b[np.ix_(perm, perm)]
    m = a @ bp
    d = np.diag(m)
    delta = 2 * (m + m.T - d[:, None] - d[None, :] + 2 * a * bp)
    np.fill_diagonal(delta, 0.0)
    return delta


def two_opt(a: np.ndarray, b: np.ndarray, perm: np.ndarray, max_iter: int = 10_000) -> np.ndarray:
    """Best-improvement pairwise swaps until none increases f (a 2-opt local optimum)."""
    perm = perm.copy()
    for _ in range(max_iter):
        delta = swap_gains(a, b, perm)
        i, j = np.unravel_index(np.argmax(delta), delta.shape)
        if delta[i, j] <= 1e-12 * max(1.0, abs(objective(a, b, perm))):
            break
        perm[[i, j]] = perm[[j, i]]
    return perm


def enumerate_objectives(a: np.ndarray, b: np.ndarray):
    """Every one of the C! assignments with its f (C <= EXACT_MAX), in C chunks (the class of
    cluster 0): yields (perms (M, C), f (M,)). Level by level: after level k every partial
    assignment of clusters 0..k-1 carries its score, and adding cluster k with class v adds
    2·Σ_{t<k} A[t,k]·B[π(t), v] (A, B symmetric, zero diagonal), so the arrays stay cache-sized."""
    c = a.shape[0]
    if c > EXACT_MAX:
        raise ValueError(f"the exact solver enumerates C! assignments: C = {c} > {EXACT_MAX}; use solver faq")
    a, b = a.astype(np.float64), b.astype(np.float64)
    for first in range(c):
        perms = np.array([[first]], dtype=np.int64)  # (M, k): classes of clusters 0..k-1
        scores = np.zeros(1)
        for k in range(1, c):
            gain = np.zeros((len(perms), c))  # (M, C): what each class v adds at cluster k
            for t in range(k):
                if a[t, k] != 0:
                    gain += a[t, k] * b[perms[:, t]]
            used = np.zeros((len(perms), c), dtype=bool)
            np.put_along_axis(used, perms, True, axis=1)
            rows, cols = np.nonzero(~used)  # each partial assignment's free classes
            scores = scores[rows] + 2 * gain[rows, cols]
            perms = np.concatenate([perms[rows], cols[:, None]], axis=1)
        yield perms, scores


def _tied(values: np.ndarray, best: float) -> np.ndarray:
    """Indices of the values equal to `best` up to round-off (what counts as a tie)."""
    return np.flatnonzero(values >= best - TIE_TOL * max(1.0, abs(best)))


def solve_exact(a: np.ndarray, b: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """The maximiser of f over all C! permutations (C <= EXACT_MAX). Ties are broken uniformly
    at random by `rng` (default: seed 0): taking the first would return the identity when a
    kernel is constant, which any score that lists classes in label order reads as perfect."""
    rng = rng if rng is not None else np.random.default_rng(0)
    found = []  # per chunk: its best f, how many assignments tie at it, one of them drawn uniformly
    for perms, f in enumerate_objectives(a, b):
        t = _tied(f, float(f.max()))
        found.append((float(f.max()), len(t), perms[t[rng.integers(len(t))]]))
    best_f = max(m for m, _, _ in found)
    at_best = [(n, p) for m, n, p in found if m >= best_f - TIE_TOL * max(1.0, abs(best_f))]
    counts = np.array([n for n, _ in at_best], dtype=np.float64)
    return at_best[int(rng.choice(len(at_best), p=counts / counts.sum()))][1]  # uniform over every tie


def solve_faq(a: np.ndarray, b: np.ndarray, restarts: int, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """FAQ from `restarts` starts (barycentre first, then random), each polished by 2-opt;
    the best by f. Also returns how many starts reached that best (a confidence signal)."""
    from scipy.optimize import quadratic_assignment

    values, perms = [], []
    for r in range(max(1, restarts)):
        # each start sees the classes in a random order: FAQ's linear steps break ties by index,
        # so with a flat kernel it would return the classes in label order
        order = rng.permutation(len(b))
        opts = {"maximize": True, "P0": "barycenter" if r == 0 else "randomized", "rng": rng}
        res = quadratic_assignment(a, b[np.ix_(order, order)], method="faq", options=opts)
        perm = two_opt(a, b, order[np.asarray(res.col_ind)])
        f = objective(a, b, perm)
        values.append(f)
        perms.append(perm)
    best_f = max(values)
    at_best = _tied(np.asarray(values), best_f)
    best = perms[int(rng.choice(at_best))]  # ties at random, not the first start's
    hits = int(sum(abs(v - best_f) <= 1e-6 * max(1.0, abs(best_f)) for v in values))
    return best, {"restarts": len(values), "restarts_at_best": hits}


@dataclass
class Assignment:
    perm: np.ndarray  # (C,) cluster i -> class perm[i]
    objective: float
    scores: np.ndarray  # (C clusters, C classes): swap gain of each class at each cluster
    info: dict


def solve(a: np.ndarray, b: np.ndarray, method: str = "auto", restarts: int = 100, seed: int = 0) -> Assignment:
    """Match cluster kernel `a` to class kernel `b` (both (C, C), already standardised)."""
    c = a.shape[0]
    if b.shape != (c, c):
        raise ValueError(f"kernels differ in size: clusters {a.shape}, classes {b.shape}")
    if method == "auto":
        method = "exact" if c <= EXACT_MAX else "faq"
    if method == "exact":
        perm, info = solve_exact(a, b, np.random.default_rng(seed)), {"solver": "exact"}
    elif method == "faq":
        perm, info = solve_faq(a, b, restarts, np.random.default_rng(seed))
        info["solver"] = "faq+2opt"
    else:
        raise ValueError(f"unknown solver {method!r} (auto, exact, faq)")
    gains = swap_gains(a, b, perm)  # (cluster i, cluster j): class perm[j] moved into i
    scores = np.empty((c, c))
    scores[:, perm] = gains  # column = class
    return Assignment(perm, objective(a, b, perm), scores, info)
