"""Nulls for pair-free matching: is a found assignment better than one that ignores the labels?

Two questions, two tests (the labels are read only here):

- **relabelling** (`relabel_pvalue`): were the class names shuffled before matching, how often
  would the score be at least the observed one? An assignment scores through a (C, C) matrix
  h: h[c, l] = images whose cluster was assigned class c and whose label is l (top-1), or whose
  cluster lists class c among its k best (top-k). Shuffling the names by σ (the solver is
  equivariant: relabelled text gives the relabelled assignment, ties being broken at random)
  scores Σ_c h[c, σ(c)]. Seeds share one text kernel, so their h are summed and σ is common to
  all of them: a t-interval over seeds is not this test. Exact over all C! relabellings for
  C <= EXACT_MAX; exact for any C when h is a multiple of a permutation matrix (one item per
  class, one assignment: the count of fixed points of a uniform permutation, the rencontres
  numbers); otherwise Monte Carlo, p = (1 + #{≥}) / (1 + draws), which cannot go below its
  resolution 1 / (1 + draws).
- **rank of the true matching** (`true_matching_rank`): among all C! assignments of a kernel
  pair whose truth is known (labelled class means, or prototypes, against the class names),
  how many score the QAP objective f above the truth? rank = 1 + that many. A rank near 1 says
  the kernels single the truth out (the search may still miss it); a rank near C!/2 says the
  kernels do not prefer it at all. Beyond EXACT_MAX: the share of random assignments with
  f ≥ f(truth), a Monte Carlo p with its resolution (Mantel's test of the two kernels).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .solver import EXACT_MAX, TIE_TOL, enumerate_objectives, objective


def rencontres_tail(n: int, k: int) -> float:
    """P(a uniform permutation of n items has >= k fixed points), exactly: Σ_{j>=k} C(n, j)·!(n−j) / n!."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    derange = [1, 0]  # !m, the permutations of m items with no fixed point
    for m in range(2, n + 1):
        derange.append((m - 1) * (derange[-1] + derange[-2]))
    tail = sum(math.comb(n, j) * derange[n - j] for j in range(k, n + 1))
    return tail / math.factorial(n)  # Python ints: exact until the one division


def _as_permutation(h: np.ndarray) -> tuple[float, np.ndarray] | None:
    """(w, π) when h = w · (the permutation matrix of π: h[c, π(c)] = w), else None."""
    w = float(h.max())
    if w <= 0 or not np.isin(h, (0.0, w)).all():
        return None
    rows, cols = np.nonzero(h)
    if len(rows) != len(h) or len(set(cols.tolist())) != len(h):
        return None
    perm = np.empty(len(h), dtype=np.int64)
    perm[rows] = cols
    return w, perm


def _permutations(c: int) -> np.ndarray:
    """All c! permutations of range(c) as rows (c <= EXACT_MAX)."""
    return np.array(list(itertools.permutations(range(c))), dtype=np.int8)


def relabel_pvalue(h: np.ndarray, draws: int = 100_000, seed: int = 0) -> dict:
    """P(Σ_c h[c, σ(c)] ≥ trace(h)) over uniform relabellings σ (see the module's docstring)."""
    h = np.asarray(h, dtype=np.float64)
    c = h.shape[0]
    if h.shape != (c, c):
        raise ValueError(f"h must be square (assigned class x label), got {h.shape}")
    obs = float(np.trace(h))
    tol = TIE_TOL * max(1.0, abs(obs))
    perm = _as_permutation(h)
    if perm is not None:
        w, pi = perm
        fixed = int(round(obs / w))
        return {"p": rencontres_tail(c, fixed), "method": "exact (fixed points)", "null_size": math.factorial(c)}
    if c <= EXACT_MAX:
        rest = _permutations(c - 1)  # σ(0) = first, σ(1..) = the others in every order
        ge = 0
        for first in range(c):
            others = np.array([v for v in range(c) if v != first])
            stat = h[0, first] + h[np.arange(1, c), others[rest]].sum(1)
            ge += int((stat >= obs - tol).sum())
        return {"p": ge / math.factorial(c), "method": "exact", "null_size": math.factorial(c)}
    rng = np.random.default_rng(seed)
    ge, done = 0, 0
    while done < draws:
        n = min(10_000, draws - done)
        sigma = rng.permuted(np.tile(np.arange(c), (n, 1)), axis=1)
        ge += int((h[np.arange(c), sigma].sum(1) >= obs - tol).sum())
        done += n
    return {"p": (1 + ge) / (1 + draws), "method": "monte carlo", "null_size": draws, "resolution": 1 / (1 + draws)}


def true_matching_rank(
    a: np.ndarray, b: np.ndarray, truth: np.ndarray | None = None, draws: int = 10_000, seed: int = 0
) -> dict:
    """Where the true assignment `truth` (default: the identity, item i is class i) ranks by the
    objective among all C! assignments of kernels a (items) and b (classes)."""
    c = a.shape[0]
    truth = np.arange(c) if truth is None else np.asarray(truth)
    f_true = objective(a, b, truth)
    tol = TIE_TOL * max(1.0, abs(f_true))
    if c <= EXACT_MAX:
        above = ties = 0
        for _, f in enumerate_objectives(a, b):
            above += int((f > f_true + tol).sum())
            ties += int((np.abs(f - f_true) <= tol).sum())
        total = math.factorial(c)
        return {
            "rank": above + 1,
            "tied": ties,  # the truth included
            "of": total,
            "p": (above + ties) / total,
            "method": "exact",
            "objective_true": f_true,
        }
    rng = np.random.default_rng(seed)
    ge, done = 0, 0
    while done < draws:
        n = min(200, draws - done)
        sigma = rng.permuted(np.tile(np.arange(c), (n, 1)), axis=1)
        f = np.einsum("ij,nij->n", a, b[sigma[:, :, None], sigma[:, None, :]])
        ge += int((f >= f_true - tol).sum())
        done += n
    return {
        "p": (1 + ge) / (1 + draws),
        "method": "monte carlo",
        "null_size": draws,
        "resolution": 1 / (1 + draws),
        "objective_true": f_true,
    }
