"""Pair-free matching's statistics (platonic_core/match/null.py) and tie-breaking: the
relabelling p-value exactly where it can be enumerated by hand, the rencontres tail, the rank
of the true matching, Monte Carlo's resolution, random ties (a constant text kernel must not
score as a perfect match), and prototypes matched as their own clusters."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from platonic.core.match.matcher import match_classes
from platonic.core.match.null import relabel_pvalue, rencontres_tail, true_matching_rank
from platonic.core.match.solver import objective, solve, solve_exact, standardise_kernel


def random_kernel(c: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.normal(size=(c, 6))
    return standardise_kernel(x @ x.T)


def test_relabelling_pvalue_is_exact_on_three_classes_by_hand():
    # h[c, l]: images assigned class c with label l; observed hits = trace = 2 + 1 + 1 = 4.
    # The 6 relabellings score 4 (identity), 2, 1, 2, 1, 0: one of six reaches 4.
    h = np.array([[2, 0, 0], [0, 1, 0], [1, 0, 1]])
    r = relabel_pvalue(h)
    assert r["p"] == pytest.approx(1 / 6) and r["method"] == "exact" and r["null_size"] == 6
    assert relabel_pvalue(np.ones((3, 3)))["p"] == 1.0  # every relabelling ties: no evidence
    assert relabel_pvalue(np.array([[0, 3, 0], [0, 0, 3], [3, 0, 0]]))["p"] == 1.0  # nothing right


def test_rencontres_tail_is_the_fixed_point_count_of_every_permutation():
    n = 6
    fixed = [sum(p[i] == i for i in range(n)) for p in itertools.permutations(range(n))]
    for k in range(n + 2):
        assert rencontres_tail(n, k) == pytest.approx(sum(f >= k for f in fixed) / math.factorial(n), abs=1e-15)
    assert rencontres_tail(4, 1) == pytest.approx(15 / 24)


def test_one_item_per_class_is_exact_at_any_c_and_monte_carlo_says_its_resolution():
    rng = np.random.default_rng(0)
    pi = np.arange(100)
    pi[3:] = rng.permutation(pi[3:])  # 3 classes right (or more, if the shuffle fixes some)
    h = np.zeros((100, 100))
    h[np.arange(100), pi] = 50.0  # 50 images per prototype's class
    r = relabel_pvalue(h)
    assert r["method"] == "exact (fixed points)" and r["p"] == rencontres_tail(100, int((pi == np.arange(100)).sum()))
    assert rencontres_tail(100, 1) == pytest.approx(1 - 1 / math.e, abs=1e-12)
    # a diagonal no relabelling approaches: Monte Carlo can only say p <= its resolution
    h2 = 5 * np.eye(20) + rng.integers(0, 2, (20, 20))
    r2 = relabel_pvalue(h2, draws=2_000, seed=1)
    assert r2["method"] == "monte carlo" and r2["p"] == r2["resolution"] == 1 / 2_001
    # no signal: Monte Carlo's p is near the exact tail of a permutation count (Poisson(1)-like)
    h3 = rng.integers(0, 3, (20, 20)).astype(float)
    assert 0.02 < relabel_pvalue(h3, draws=2_000, seed=2)["p"] <= 1


def test_true_matching_rank_counts_every_assignment_above_the_truth():
    rng = np.random.default_rng(1)
    a, b = random_kernel(5, rng), random_kernel(5, rng)
    f = np.array([objective(a, b, np.array(p)) for p in itertools.permutations(range(5))])
    f_true = objective(a, b, np.arange(5))
    r = true_matching_rank(a, b)
    assert r["rank"] == 1 + int((f > f_true + 1e-9).sum()) and r["of"] == 120 and r["method"] == "exact"
    assert r["p"] == pytest.approx((f >= f_true - 1e-9).mean())
    flat = true_matching_rank(a, np.zeros((5, 5)))  # a constant kernel prefers nothing
    assert flat["rank"] == 1 and flat["tied"] == 120 and flat["p"] == 1.0
    planted = true_matching_rank(b, b, draws=500)
    assert planted["rank"] == 1 and planted["p"] <= 2 / 120  # the truth and its mirror images tie at most
    big = random_kernel(30, rng)
    mc = true_matching_rank(big, big, draws=500, seed=0)  # C = 30: Monte Carlo, at its resolution
    assert mc["method"] == "monte carlo" and mc["p"] == mc["resolution"] == 1 / 501


def test_ties_are_broken_at_random_not_by_label_order():
    zero = np.zeros((8, 8))
    a = random_kernel(8, np.random.default_rng(2))
    perms = {tuple(solve_exact(a, zero, np.random.default_rng(s))) for s in range(10)}
    assert len(perms) >= 9  # 8! tied assignments: ten draws almost never repeat
    faq = {tuple(solve(np.pad(a, 2), np.zeros((12, 12)), "faq", restarts=3, seed=s).perm) for s in range(5)}
    assert len(faq) >= 4
    same = solve_exact(a, zero, np.random.default_rng(7)), solve_exact(a, zero, np.random.default_rng(7))
    assert (same[0] == same[1]).all()  # seeded: reproducible


def test_a_constant_text_kernel_is_not_a_perfect_match_from_labelled_means():
    """The bug: identical class texts make the text kernel constant, every assignment ties, and
    the exact solver returned the first one, the identity, which the labelled-means diagnostic
    (classes in label order) scored as 10 of 10 (here 8 of 8)."""
    rng = np.random.default_rng(3)
    y = np.repeat(np.arange(8), 6)
    images = rng.normal(size=(8, 16))[y] * 4 + rng.normal(size=(48, 16))
    text = np.ones((8, 8))  # one text for every class
    r = match_classes(images, y, text, [0, 1, 2, 3, 4], n_init=2, null_draws=1_000)
    assert r["class_means_matched"] < 0.5
    assert r["true_matching"]["p"] == 1.0 and r["pvalues"]["top1"]["p"] > 0.05
    assert not r["report_topk"] and "topk" not in r["pvalues"]  # C <= 10: top-1 only


def test_prototypes_are_their_own_clusters_and_a_shared_structure_is_significant():
    rng = np.random.default_rng(4)
    proto = rng.normal(size=(30, 12))
    proto /= np.linalg.norm(proto, axis=1, keepdims=True)  # unit rows, as class features are
    q, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    into = np.linalg.qr(rng.normal(size=(40, 12)))[0].T  # (12, 40), orthonormal rows
    images = proto @ into  # one vector per class, the same geometry in another space
    r = match_classes(
        images, np.arange(30), proto @ q, [0, 1, 2, 3, 4], solver="faq", restarts=5, clusters="items", null_draws=2_000
    )
    assert r["summary"]["top1"]["mean"] == 1.0 and r["summary"]["oracle_top1"]["mean"] == 1.0
    assert r["pvalues"]["top1"]["method"] == "exact (fixed points)" and r["pvalues"]["top1"]["p"] < 1e-30
    assert r["report_topk"] and r["pvalues"]["topk"]["p"] == 1 / 2_001
    assert r["true_matching"]["p"] == 1 / 2_001 and r["clusters"] == "items"
    noise = match_classes(
        images,
        np.arange(30),
        rng.normal(size=(30, 12)),
        [0, 1, 2, 3, 4],
        solver="faq",
        restarts=5,
        clusters="items",
        null_draws=2_000,
    )
    assert noise["pvalues"]["top1"]["p"] > 0.01 and noise["summary"]["top1"]["mean"] < 0.2
    with pytest.raises(ValueError, match="30 vectors for 10 classes"):
        match_classes(images, np.arange(30) % 10, proto[:10], [0, 1, 2, 3, 4], clusters="items")
