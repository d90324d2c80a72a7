"""CKA (linear, RBF), unbiased CKA, CKNNA, cycle kNN, and the faiss kNN backend."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from platonic.core.metrics import (
    alignment,
    cka,
    cknna,
    cycle_knn_per_sample,
    knn_indices,
    mutual_knn_per_sample,
)


def rand(n, d, seed):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((n, d)))


def test_linear_cka_matches_the_feature_space_formula():
    # biased linear CKA = ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F) (Kornblith et al. 2019)
    x, y = rand(50, 7, 0), rand(50, 5, 1)
    y = y + 0.5 * x[:, :5]
    xc, yc = x - x.mean(0), y - y.mean(0)
    expected = (yc.T @ xc).norm() ** 2 / ((xc.T @ xc).norm() * (yc.T @ yc).norm())
    assert cka(x, y) == pytest.approx(expected.item(), rel=1e-4)


def test_linear_cka_feature_and_kernel_forms_agree():
    from platonic.core.metrics import _hsic_biased

    for n, da, db in ((60, 5, 4), (10, 20, 12)):  # feature form (N > Da + Db), then the kernel form
        x, y = rand(n, da, 20), rand(n, db, 21)
        y[:, :4] += x[:, :4]
        kk, ll = x @ x.T, y @ y.T
        kernel = _hsic_biased(kk, ll) / (torch.sqrt(_hsic_biased(kk, kk) * _hsic_biased(ll, ll)) + 1e-6)
        assert cka(x, y) == pytest.approx(kernel.item(), abs=1e-12)


def test_linear_cka_memory_is_o_n_d_and_kernel_metrics_refuse_before_allocating(monkeypatch):
    import platonic.core.metrics as m

    # N = 60k: the kernel form would hold 28.8 GB per N x N float64 matrix
    x = rand(60_000, 8, 22)
    assert cka(x, x @ torch.linalg.qr(rand(8, 8, 23))[0]) == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match=r"unbiased_cka at N = 60,000 needs about 144\.0 GB .* 16\.0 GB available"):
        m.check_kernel_memory("unbiased_cka", 60_000, available=16 * 10**9)
    monkeypatch.setattr(m, "available_memory", lambda: 10**5)  # 100 kB: N = 100 kernels do not fit
    x = rand(100, 8, 24).float()
    for metric in ("cka_rbf", "unbiased_cka", "cknna"):
        with pytest.raises(ValueError, match=f"{metric} at N = 100 needs about"):
            alignment(x, x, metric=metric, k=5)
    for metric in ("cka", "mutual_knn"):  # bounded: never refused
        assert alignment(x, x, metric=metric, k=5, n_boot=0).score == pytest.approx(1.0, abs=1e-4)


def test_cka_invariances_and_bias():
    x = rand(80, 6, 2)
    q, _ = torch.linalg.qr(rand(6, 6, 3))
    assert cka(x, x @ q) == pytest.approx(1.0, abs=1e-4)  # rotation
    assert cka(x, 3.0 * x) == pytest.approx(1.0, abs=1e-4)  # isotropic scale
    assert cka(x, x, unbiased=True) == pytest.approx(1.0, abs=1e-4)
    # independent features: the biased estimator is clearly positive, the unbiased one ~0
    a, b = rand(60, 20, 4), rand(60, 20, 5)
    assert cka(a, b) > 0.2
    assert abs(cka(a, b, unbiased=True)) < 0.05
    assert 0 < cka(a, a + 0.1 * b, kernel="rbf", sigma=5.0) <= 1.0001
    with pytest.raises(ValueError, match="kernel"):
        cka(a, b, kernel="poly")


def test_cknna_with_all_neighbours_is_unbiased_cka():
    # with k = N-1 every off-diagonal pair is a neighbour in both spaces, and the unbiased
    # HSIC ignores the diagonal: CKNNA reduces to unbiased linear CKA
    x, y = rand(30, 4, 6), rand(30, 3, 7)
    y = y + x[:, :3]
    assert cknna(x, y, k=29) == pytest.approx(cka(x, y, unbiased=True), abs=1e-6)
    assert cknna(x, x, k=5) == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(ValueError, match="k >= 2"):
        cknna(x, y, k=1)


def test_cycle_knn_hand_example():
    # unit vectors at angles 0, .1, .3, .6, 1.0 rad; 1-NN by cosine: 0->1, 1->0, 2->1, 3->2, 4->3.
    # With B = A the cycle i -> nnB(i) -> nnA(nnB(i)) returns to i for 0 and 1 only.
    ang = torch.tensor([0.0, 0.1, 0.3, 0.6, 1.0])
    a = torch.stack([ang.cos(), ang.sin()], 1)
    per = cycle_knn_per_sample(a, a, k=1)
    assert per.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("n,d,k", [(300, 16, 10), (1000, 64, 5)])
def test_faiss_backend_matches_dense(n, d, k):
    pytest.importorskip("faiss")
    x = F.normalize(rand(n, d, 8).float(), dim=-1)
    y = F.normalize(rand(n, d, 9).float(), dim=-1)
    dense, fast = knn_indices(x, k, "dense"), knn_indices(x, k, "faiss")
    assert all(set(a.tolist()) == set(b.tolist()) for a, b in zip(dense, fast, strict=True))
    assert not (fast == torch.arange(n)[:, None]).any()  # self excluded
    assert torch.equal(mutual_knn_per_sample(x, y, k, "dense"), mutual_knn_per_sample(x, y, k, "faiss"))


def test_dense_knn_is_the_same_in_chunks(monkeypatch):
    import platonic.core.metrics as m

    x = F.normalize(rand(200, 8, 10).float(), dim=-1)
    whole = knn_indices(x, 7)
    monkeypatch.setattr(m, "KNN_CHUNK", 33)
    assert torch.equal(whole, knn_indices(x, 7))


def test_alignment_any_metric_best_layer_and_ci():
    x = rand(100, 8, 11).float()
    noise = rand(100, 8, 12).float()
    for metric in ("cka", "unbiased_cka", "cknna", "cycle_knn", "cka_rbf"):
        s = alignment([noise, x], x + 0.01 * noise, metric=metric, k=5, n_boot=50)
        assert s.layer_a == 1, metric
        assert s.metric == metric and metric in s.as_dict()
        if metric == "cycle_knn":
            assert s.ci_low is not None and s.ci_low <= s.score <= s.ci_high
        else:
            assert s.ci_low is None
    with pytest.raises(ValueError, match="unknown metric"):
        alignment(x, x, metric="svcca")
