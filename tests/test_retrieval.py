"""Procrustes / least-squares maps and R@k, on data with a known answer."""

from __future__ import annotations

import numpy as np
import pytest

from platonic.core.retrieval import fit_map, recall_at_k, residual, retrieval


def rotated_pair(n=400, d=12, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return x, 2.5 * x @ q + 3.0 + noise * rng.standard_normal((n, d)), q


def test_procrustes_recovers_a_rotation_exactly():
    x, y, q = rotated_pair()
    m = fit_map(x, y, "procrustes")
    assert np.allclose(m.weight, q, atol=1e-8)  # the rotation itself
    assert np.allclose(m.weight.T @ m.weight, np.eye(12), atol=1e-8)  # orthogonal
    assert residual(m, x, y) < 1e-8
    _, y_noisy, _ = rotated_pair(noise=1.0)
    assert residual(fit_map(x, y_noisy), x, y_noisy) > 0.1


def test_procrustes_pads_to_a_common_width_and_lstsq_fits_a_linear_map():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((300, 5))
    a = rng.standard_normal((5, 8))
    y = x @ a
    assert residual(fit_map(x, y, "lstsq", ridge=1e-9), x, y) < 1e-6
    m = fit_map(x, y, "procrustes")  # 5 -> 8: padded, still orthogonal
    assert m.weight.shape == (8, 8) and np.allclose(m.weight @ m.weight.T, np.eye(8), atol=1e-8)
    with pytest.raises(ValueError, match="unknown map"):
        fit_map(x, y, "cca")


def test_recall_at_k_hand_example():
    q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    g = np.array([[1.0, 0.1], [0.1, 1.0], [-1.0, 0.0]])
    # query 0 -> gallery 0 first; query 1 -> gallery 1 first; query 2's own item (2) ranks last
    r = recall_at_k(q, g, np.array([0, 1, 2]), np.array([0, 1, 2]), ks=(1, 2, 3))
    assert r == {1: pytest.approx(2 / 3), 2: pytest.approx(2 / 3), 3: 1.0}


def test_retrieval_through_a_fitted_rotation_is_perfect_and_chance_without_one():
    x, y, _ = rotated_pair(n=600, d=16, noise=0.05)
    ids = np.arange(600)
    good = retrieval(x[:400], y[:400], x[400:], y[400:], ids[400:], ids[400:])
    assert good["t2i_R@1"] > 0.95 and good["i2t_R@1"] > 0.95 and good["train_residual"] < 0.05
    rng = np.random.default_rng(3)
    bad = retrieval(
        x[:400], rng.standard_normal((400, 16)), x[400:], rng.standard_normal((200, 16)), ids[400:], ids[400:]
    )
    assert bad["t2i_R@5"] < 0.15  # chance is 5/200


def test_residual_of_unrelated_representations_is_about_sqrt2():
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((4000, 8)), rng.standard_normal((4000, 8))
    from platonic.core.retrieval import split_halves

    fit, held = split_halves(4000)
    m = fit_map(x[fit], y[fit])
    assert residual(m, x[held], y[held]) == pytest.approx(np.sqrt(2), abs=0.03)
    assert sorted(np.concatenate([fit, held]).tolist()) == list(range(4000))


@pytest.mark.parametrize("dx,dy", [(16, 16), (7, 12), (12, 7)])
def test_procrustes_is_the_hand_written_svd_it_replaced(dx, dy):
    """scipy.linalg.orthogonal_procrustes in place of U Vᵀ from np.linalg.svd(Xᵀ Y): the same
    map (bit for bit on the demo's features on this project's machines; here to 1e-12)."""
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((200, dx)), rng.standard_normal((200, dy)) + 0.5
    m = fit_map(x, y, "procrustes")
    xc, yc = x - x.mean(0), y - y.mean(0)
    xc, yc = xc / np.linalg.norm(xc), yc / np.linalg.norm(yc)
    w = max(dx, dy)
    u, _, vt = np.linalg.svd(np.pad(xc, ((0, 0), (0, w - dx))).T @ np.pad(yc, ((0, 0), (0, w - dy))))
    np.testing.assert_allclose(m.weight, u @ vt, rtol=0, atol=1e-12)
    assert m.width == w
