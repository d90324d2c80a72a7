"""PRH mutual kNN, clamp, layer search and bootstrap (platonic_core/metrics.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from platonic.core.metrics import (
    alignment,
    as_layers,
    bootstrap_ci,
    clamp_layers,
    clamp_threshold,
    knn_indices,
    mutual_knn,
    mutual_knn_per_sample,
)


def _on_circle(degrees: list[float]) -> torch.Tensor:
    """2-D unit vectors at the given angles: cosine similarity = cos(angle difference), so
    the nearest neighbour is the point at the smallest angular distance."""
    r = torch.tensor(degrees, dtype=torch.float64) * math.pi / 180
    return torch.stack([r.cos(), r.sin()], 1).float()


# Space A, angles [0, 10, 30, 100, 115, 200]; 1-NN by angular distance:
#   0 -> 1 (10°)    1 -> 0 (10° vs 20° to point 2)    2 -> 1 (20°)
#   3 -> 4 (15°)    4 -> 3 (15°)                      5 -> 4 (85° vs 100° to 3, 160° to 0)
A_DEG = [0, 10, 30, 100, 115, 200]
A_NN = [1, 0, 1, 4, 3, 4]
# Space B, angles [0, 50, 60, 100, 170, 180]:
#   0 -> 1 (50° vs 60° to 2, 170° to 4)   1 -> 2 (10°)   2 -> 1 (10°)
#   3 -> 2 (40° vs 50° to 1, 70° to 4)    4 -> 5 (10°)   5 -> 4 (10°)
B_DEG = [0, 50, 60, 100, 170, 180]
B_NN = [1, 2, 1, 2, 5, 4]
# agreement per sample: 0 yes, 1 no, 2 yes, 3 no, 4 no, 5 yes  -> 3/6 = 0.5
AB_PER_SAMPLE = [1, 0, 1, 0, 0, 1]


def test_hand_checked_one_nn():
    a, b = _on_circle(A_DEG), _on_circle(B_DEG)
    assert knn_indices(a, 1).squeeze(1).tolist() == A_NN
    assert knn_indices(b, 1).squeeze(1).tolist() == B_NN
    assert mutual_knn_per_sample(a, b, k=1).tolist() == AB_PER_SAMPLE
    assert mutual_knn(a, b, k=1) == pytest.approx(0.5)
    # symmetric in its arguments
    assert mutual_knn(b, a, k=1) == pytest.approx(0.5)


def test_hand_checked_two_nn():
    # k = 2 neighbour sets (angular distances as above):
    #   A: 0 {1,2}  1 {0,2}  2 {1,0}  3 {4,2} (70° to 2 vs 90° to 1)  4 {3,2} (85° to 2 / 5)...
    # point 4 (115°) is 85° from both 2 (30°) and 5 (200°): a tie, so stay off it by
    # nudging 5 to 205° (90° from 4):  4 {3,2}  5 {4,3} (90° / 105°)
    a = _on_circle([0, 10, 30, 100, 115, 205])
    #   B: 0 {1,2}  1 {2,0} (10°, 50°)  2 {1,3} (10°, 40°)  3 {2,1}  4 {5,3} (10°, 70°)
    #      5 {4,3} (10°, 80°)
    b = _on_circle(B_DEG)
    # overlaps: 0 {1,2}∩{1,2}=2  1 {0,2}∩{2,0}=2  2 {1,0}∩{1,3}=1  3 {4,2}∩{2,1}=1
    #           4 {3,2}∩{5,3}=1  5 {4,3}∩{4,3}=2   -> per sample /2, mean = 9/12 = 0.75
    assert mutual_knn_per_sample(a, b, k=2).tolist() == [1.0, 1.0, 0.5, 0.5, 0.5, 1.0]
    assert mutual_knn(a, b, k=2) == pytest.approx(0.75)


def test_identical_features_score_one():
    torch.manual_seed(0)
    x = torch.randn(40, 16)
    assert mutual_knn(x, x, k=5) == pytest.approx(1.0)
    # and any k up to N - 1 (then every other point is a neighbour)
    assert mutual_knn(x, torch.randn(40, 16), k=39) == pytest.approx(1.0)


def test_self_is_excluded_from_neighbours():
    torch.manual_seed(1)
    x = F.normalize(torch.randn(30, 8), dim=-1)
    idx = knn_indices(x, 5)
    assert not (idx == torch.arange(30).unsqueeze(1)).any()
    # exact duplicates: each copy's nearest neighbour is the other copy, never itself
    dup = F.normalize(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]), dim=-1)
    assert knn_indices(dup, 1)[:2].squeeze(1).tolist() == [1, 0]


def test_rotation_and_scale_invariance():
    torch.manual_seed(2)
    a, b = torch.randn(60, 12), torch.randn(60, 12)
    q, _ = torch.linalg.qr(torch.randn(12, 12, dtype=torch.float64))
    rotated = (b.double() @ q).float()
    base = mutual_knn(a, b, k=5)
    assert 0.0 < base < 1.0  # random features: a non-trivial score
    assert mutual_knn(a, rotated, k=5) == pytest.approx(base, abs=1e-9)
    assert mutual_knn(a * 7.0, b, k=5) == pytest.approx(base, abs=1e-9)
    # alignment without the clamp (q = 1) is invariant too (the clamp is per coordinate
    # and therefore not rotation invariant, so it is switched off here)
    s1 = alignment(a, b, k=5, clamp_q=1.0, n_boot=0).score
    s2 = alignment(a, rotated, k=5, clamp_q=1.0, n_boot=0).score
    assert s1 == pytest.approx(base) and s2 == pytest.approx(base)


def test_clamp_uses_one_threshold_over_all_layers():
    l0 = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    l1 = torch.tensor([[10.0, -20.0], [30.0, 40.0]])
    # |values| sorted: [1, 2, 3, 4, 10, 20, 30, 40]; int(0.5 * 8) = 4 -> threshold 10
    out0, out1 = clamp_layers([l0, l1], q=0.5, mode="exact")
    assert torch.allclose(out0, F.normalize(l0, dim=-1))  # all below 10: untouched
    expected1 = F.normalize(torch.tensor([[10.0, -10.0], [10.0, 10.0]]), dim=-1)
    assert torch.allclose(out1, expected1)
    # per-layer thresholds would differ: layer 0's own is 3 (row [3, 4] -> [3, 3]) and
    # layer 1's own is 30 (row [10, -20] untouched); both results differ from the above
    per0, per1 = clamp_layers([l0], 0.5, "exact")[0], clamp_layers([l1], 0.5, "exact")[0]
    assert torch.allclose(per0[1], F.normalize(torch.tensor([3.0, 3.0]), dim=0))
    assert torch.allclose(per1[0], F.normalize(torch.tensor([10.0, -20.0]), dim=0))
    assert not torch.allclose(out0, per0) and not torch.allclose(out1, per1)


def test_clamp_threshold_is_the_exact_sorted_value():
    torch.manual_seed(3)
    layers = [torch.randn(20, 7) * 3, torch.randn(20, 5)]
    q = 0.95
    flat = np.sort(np.abs(np.concatenate([t.numpy().ravel() for t in layers])))  # 240 values
    thr = float(flat[int(q * flat.size)])  # the 228-th (0-based) sorted |value|
    expected = [F.normalize(t.clamp(-thr, thr), dim=-1) for t in layers]
    got = clamp_layers(layers, q, "exact")
    for g, e in zip(got, expected, strict=True):
        assert torch.allclose(g, e, atol=1e-7)
    # exactly the values above the threshold were changed
    n_clamped = sum(int((t.abs() > thr).sum()) for t in layers)
    assert n_clamped == flat.size - int(q * flat.size) - 1
    # q >= 1: no clamp, only normalisation
    for g, t in zip(clamp_layers(layers, 1.0), layers, strict=True):
        assert torch.allclose(g, F.normalize(t, dim=-1))


def test_mean_clamp_is_the_published_one_by_hand():
    # platonic-rep with --precise off: per sample, the q-quantile of |x| over all its layers
    # (linear interpolation), then the mean over samples; one threshold for every layer
    l0 = torch.tensor([[1.0, -2.0], [3.0, 4.0]])
    l1 = torch.tensor([[10.0, 20.0, -30.0], [0.5, 0.0, -1.0]])
    # sample 0: |x| = [1, 2, 10, 20, 30]; q = 0.5 -> position 2.0 -> 10
    # sample 1: |x| = [3, 4, 0.5, 0, 1] -> sorted [0, 0.5, 1, 3, 4] -> 1
    # threshold (10 + 1) / 2 = 5.5
    assert clamp_threshold([l0, l1], 0.5, "mean") == pytest.approx(5.5)
    # q = 0.75 -> position 3.0: sample 0 -> 20, sample 1 -> 3; mean 11.5
    assert clamp_threshold([l0, l1], 0.75, "mean") == pytest.approx(11.5)
    # q = 0.6 -> position 2.4: sample 0 -> 10 + 0.4 * 10 = 14; sample 1 -> 1 + 0.4 * 2 = 1.8
    assert clamp_threshold([l0, l1], 0.6, "mean") == pytest.approx(7.9)
    out0, out1 = clamp_layers([l0, l1], 0.5, "mean")
    assert torch.allclose(out0, F.normalize(torch.tensor([[1.0, -2.0], [3.0, 4.0]]), dim=-1))
    assert torch.allclose(out1[0], F.normalize(torch.tensor([5.5, 5.5, -5.5]), dim=0))
    # the global sorted quantile is a different number: 10 values, int(0.5 * 10) = 5 -> 3.0
    assert clamp_threshold([l0, l1], 0.5, "exact") == pytest.approx(3.0)
    assert clamp_threshold([l0, l1], 0.5, "none") is None
    with pytest.raises(ValueError, match="unknown clamp"):
        clamp_threshold([l0], 0.5, "median")


def test_mean_clamp_matches_torch_quantile_on_random_features():
    torch.manual_seed(5)
    layers = [torch.randn(40, 6) * 2, torch.randn(40, 9)]
    stacked = torch.cat(layers, dim=1).abs()  # (N, L·D) as platonic-rep flattens (N, L, D)
    expected = torch.quantile(stacked, 0.95, dim=1).mean().item()
    assert clamp_threshold(layers, 0.95, "mean") == pytest.approx(expected, rel=1e-6)
    a, b = torch.randn(40, 6), torch.randn(40, 5)
    mean, exact = (alignment(a, b, k=5, clamp=c, n_boot=0).score for c in ("mean", "exact"))
    assert 0 <= mean <= 1 and 0 <= exact <= 1  # both defined; they may or may not differ


def test_best_layer_pair_is_found():
    torch.manual_seed(4)
    b = torch.randn(50, 8)
    a = torch.stack([torch.randn(50, 8), b.clone(), torch.randn(50, 8)])  # layer 1 == B
    # with the clamp, A's threshold comes from A's whole stack and B's from B alone, so the
    # equal layer is clamped slightly differently: best, but not exactly 1
    clamped = alignment(a, b, k=5, clamp_q=0.95, n_boot=50)
    assert (clamped.layer_a, clamped.layer_b) == (1, 0)
    assert clamped.score > 0.9
    res = alignment(a, b, k=5, clamp_q=1.0, n_boot=50)
    assert (res.layer_a, res.layer_b) == (1, 0)
    assert res.score == pytest.approx(1.0)
    assert len(res.per_layer) == 3 and all(len(r) == 1 for r in res.per_layer)
    assert res.per_layer[1][0] == pytest.approx(1.0)
    assert res.per_layer[0][0] < 0.6 and res.per_layer[2][0] < 0.6
    assert res.as_dict()["layer_a"] == 1
    # layers="last" only scores the last pair; the rest of the grid stays NaN
    last = alignment(a, b, k=5, clamp_q=1.0, layers="last", n_boot=0)
    assert (last.layer_a, last.layer_b) == (2, 0)
    assert last.score == pytest.approx(res.per_layer[2][0])
    assert math.isnan(last.per_layer[0][0]) and math.isnan(last.per_layer[1][0])


def test_layers_given_as_a_list_of_different_widths():
    torch.manual_seed(5)
    b = torch.randn(30, 4)
    res = alignment([torch.randn(30, 6), b.numpy(), torch.randn(30, 9)], b, k=3, clamp_q=1.0, n_boot=0)
    assert (res.layer_a, res.layer_b) == (1, 0) and res.score == pytest.approx(1.0)


def test_errors_have_clear_messages():
    torch.manual_seed(6)
    x = torch.randn(20, 4)
    with pytest.raises(ValueError, match="sample counts differ: 20 vs 19"):
        alignment(x, torch.randn(19, 4), k=3)
    with pytest.raises(ValueError, match="different sample counts"):
        mutual_knn(x, torch.randn(19, 4), k=3)
    bad = x.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        alignment(bad, x, k=3)
    inf = x.clone()
    inf[0, 0] = float("inf")
    with pytest.raises(ValueError, match="inf"):
        alignment(x, inf, k=3)
    with pytest.raises(ValueError, match=r"need at least k\+1 = 21 samples for 20-NN, got 20"):
        alignment(x, x, k=20)
    with pytest.raises(ValueError, match=r"k\+1"):
        mutual_knn(x, x, k=20)
    with pytest.raises(ValueError, match=r"\(N, D\) or \(L, N, D\)"):
        as_layers(torch.randn(2, 3, 4, 5))
    with pytest.raises(ValueError, match="layer 1 has 5 samples"):
        as_layers([torch.randn(4, 3), torch.randn(5, 3)])


def test_bootstrap_ci():
    rng = np.random.default_rng(0)
    ps = rng.random(200)
    lo, hi = bootstrap_ci(ps, n_boot=500, seed=1)
    assert lo < ps.mean() < hi
    # the percentile interval of a mean is about ±1.96 σ/√n wide
    half = 1.96 * ps.std() / math.sqrt(len(ps))
    assert (hi - lo) == pytest.approx(2 * half, rel=0.25)
    assert bootstrap_ci(ps, 500, seed=1) == (lo, hi)  # seeded
    # a constant vector: every resample has the same mean -> a point
    assert bootstrap_ci(np.full(50, 0.3), n_boot=200) == pytest.approx((0.3, 0.3))
    # no resamples: the mean twice
    assert bootstrap_ci(ps, n_boot=0) == (pytest.approx(ps.mean()), pytest.approx(ps.mean()))


def test_bootstrap_ci_is_scipys_bca_over_the_resamples_the_hand_written_one_drew():
    """scipy.stats.bootstrap in place of the hand-written percentile bootstrap: the same
    resampling unit (samples) and the same draws for a seed; BCa instead of the percentile
    interval, which for a skewed score (rare hits) moves the interval, not the mean."""
    from scipy import stats

    ps = (np.random.default_rng(3).random(400) < 0.04).astype(np.float32)  # rare hits: skewed
    rng = np.random.default_rng(0)
    means = ps[rng.integers(0, len(ps), size=(1000, len(ps)))].mean(1)
    hand = np.quantile(means, [0.025, 0.975])  # the code this replaced
    percentile = stats.bootstrap((ps,), np.mean, n_resamples=1000, method="percentile", rng=np.random.default_rng(0))
    np.testing.assert_allclose(percentile.confidence_interval, hand, atol=1e-6)  # same draws
    assert percentile.bootstrap_distribution == pytest.approx(means, abs=1e-7)
    lo, hi = bootstrap_ci(ps, 1000, seed=0)
    bca = stats.bootstrap((ps,), np.mean, n_resamples=1000, method="BCa", rng=np.random.default_rng(0))
    assert (lo, hi) == (float(bca.confidence_interval.low), float(bca.confidence_interval.high))
    assert (lo, hi) != pytest.approx(tuple(hand), abs=1e-4)  # BCa, not the percentile interval
    assert lo < ps.mean() < hi and hi - lo == pytest.approx(hand[1] - hand[0], rel=0.2)


def test_alignment_ci_contains_score():
    torch.manual_seed(7)
    a = torch.randn(80, 8)
    b = a + 0.8 * torch.randn(80, 8)
    res = alignment(a, b, k=5, n_boot=300)
    assert 0.0 < res.score < 1.0
    assert res.ci_low <= res.score <= res.ci_high
    assert res.ci_low < res.ci_high
