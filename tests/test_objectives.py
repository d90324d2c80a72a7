"""SIGReg / Epps–Pulley, the LeJEPA loss and the next-token loss (platonic_core/objectives.py).

Expected values are derived independently of the implementation:

- For x_1..x_N iid N(0, 1), φ̂_N(t) = mean(e^{itx}) is unbiased for φ(t) = e^{−t²/2} and
  E|φ̂_N(t) − φ(t)|² = Var(φ̂_N(t)) = (E|e^{itx}|² − |φ(t)|²) / N = (1 − e^{−t²}) / N.
  So E[T] = ∫_{-3}^{3} (1 − e^{−t²}) e^{−t²/2} dt (the N cancels), exactly, for any N; and for
  the implementation's quadrature E[T_trap] = Σ_i w_i (1 − e^{−t_i²}), also exactly, because
  T_trap is linear in |φ̂ − φ|² at each node.
- For U[−√3, √3] (unit variance), φ_U(t) = sin(√3 t) / (√3 t), and
  E[T / N] = ∫ |φ_U − φ|² w dt + (1/N) ∫ (1 − φ_U²) w dt (bias + variance), w = e^{−t²/2}.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.integrate import quad

from platonic.core.objectives import EppsPulley, SIGReg, lejepa_loss, linear_cross_entropy, next_token_loss

T_MAX, N_POINTS = 3.0, 17


def _trapezoid_nodes() -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the doubled trapezoid rule on [0, 3] (= the even integrand on
    [−3, 3]), times the window e^{−t²/2}, written out here independently."""
    t = np.linspace(0.0, T_MAX, N_POINTS)
    dt = T_MAX / (N_POINTS - 1)
    w = np.full(N_POINTS, 2 * dt)
    w[0] = w[-1] = dt
    return t, w * np.exp(-(t**2) / 2)


def _phi_uniform(t: np.ndarray) -> np.ndarray:
    # sin(√3 t) / (√3 t), = 1 at t = 0 (np.sinc(x) = sin(πx)/(πx))
    return np.sinc(np.sqrt(3.0) * np.asarray(t) / np.pi)


def _gauss_expected_quad() -> float:
    return quad(lambda t: (1 - math.exp(-t * t)) * math.exp(-t * t / 2), -T_MAX, T_MAX)[0]


def _gauss_expected_trap() -> float:
    t, w = _trapezoid_nodes()
    return float((w * (1 - np.exp(-(t**2)))).sum())


# ---- Epps–Pulley ----------------------------------------------------------------------


def test_trapezoid_rule_is_close_to_the_integral():
    """The 17-point rule must agree with the exact integral to well under the MC tolerance
    used below (measured: relative difference ≈ 2e-4), otherwise comparing a Monte-Carlo
    mean of T against `quad` would be testing the quadrature, not the statistic."""
    q, tr = _gauss_expected_quad(), _gauss_expected_trap()
    assert q == pytest.approx(1.0527, abs=1e-3)  # sanity of the derivation itself
    assert abs(tr - q) / q < 1e-3


def test_gaussian_mean_statistic_matches_theory():
    torch.manual_seed(0)
    n, s = 512, 4000  # 4000 independent samples of size 512, one batched call
    x = torch.randn(n, s)
    stat = EppsPulley(T_MAX, N_POINTS)(x)
    assert stat.shape == (s,)
    mean = stat.mean().item()
    se = stat.std().item() / math.sqrt(s)  # ≈ 0.016, i.e. ≈ 1.5 % of the mean
    exact_trap = _gauss_expected_trap()  # what the implementation's quadrature should give
    exact_quad = _gauss_expected_quad()
    # 4 standard errors of Monte-Carlo noise (false-failure rate ~ 6e-5; the seed is fixed
    # anyway). That is ≈ 6 %: a missing factor 2 in the weights, a missing ×N, or a wrong
    # window (e.g. no e^{−t²/2}, giving ≈ 1.52) all fall far outside.
    assert abs(mean - exact_trap) < 4 * se, (mean, exact_trap, se)
    # against the true integral: additionally allow the (computed) quadrature error
    assert abs(mean - exact_quad) < 4 * se + abs(exact_trap - exact_quad)
    assert 4 * se / exact_trap < 0.08  # the tolerance really is "a few %"


def test_statistic_does_not_depend_on_n_under_the_null():
    # E[T] is N-free under H0: the ×N exactly cancels the 1/N of the variance.
    torch.manual_seed(1)
    small = EppsPulley()(torch.randn(64, 4000))
    large = EppsPulley()(torch.randn(2048, 1000))
    for stat in (small, large):
        se = stat.std().item() / math.sqrt(stat.numel())
        assert abs(stat.mean().item() - _gauss_expected_trap()) < 4 * se


def test_uniform_statistic_matches_theory_and_exceeds_gaussian():
    torch.manual_seed(2)
    n, s = 20000, 16
    u = (torch.rand(n, s) * 2 - 1) * math.sqrt(3.0)  # U[−√3, √3]: mean 0, variance 1
    stat = EppsPulley()(u)
    per_n = stat / n
    t, w = _trapezoid_nodes()
    dist_quad = quad(lambda v: (_phi_uniform(v) - math.exp(-v * v / 2)) ** 2 * math.exp(-v * v / 2), -T_MAX, T_MAX)[0]
    dist_trap = float((w * (_phi_uniform(t) - np.exp(-(t**2) / 2)) ** 2).sum())
    var_term = float((w * (1 - _phi_uniform(t) ** 2)).sum()) / n  # finite-N bias, ≈ 3 % of D
    assert dist_quad == pytest.approx(0.0161, abs=5e-4)
    assert abs(dist_trap - dist_quad) / dist_quad < 2e-3  # measured ≈ 7.5e-4
    mean = per_n.mean().item()
    se = per_n.std().item() / math.sqrt(s)
    assert abs(mean - (dist_trap + var_term)) < 4 * se + 1e-5, (mean, dist_trap + var_term, se)
    # and against the asymptotic value from quad, within 5 %
    assert mean == pytest.approx(dist_quad, rel=0.05)
    # the statistic grows like N·D for a non-Gaussian: hundreds vs ≈ 1 under H0
    gauss = EppsPulley()(torch.randn(n, s))
    assert stat.min().item() > 50 * gauss.max().item()


def test_closed_form_on_a_tiny_fixed_sample():
    x = np.array([-1.3, -0.2, 0.0, 0.45, 0.7, 2.1, -0.9], dtype=np.float64)
    n = len(x)
    t = np.linspace(0, 3, 17)
    dt = 3 / 16
    weights = np.array([dt] + [2 * dt] * 15 + [dt])
    re = np.cos(np.outer(t, x)).mean(1)  # real part of φ̂ at each t
    im = np.sin(np.outer(t, x)).mean(1)  # imaginary part
    integrand = ((re - np.exp(-(t**2) / 2)) ** 2 + im**2) * np.exp(-(t**2) / 2)
    expected = n * float((integrand * weights).sum())
    got = EppsPulley()(torch.tensor(x, dtype=torch.float32).unsqueeze(-1))  # (N, 1) -> (1,)
    assert got.shape == (1,)
    assert got.item() == pytest.approx(expected, abs=1e-5, rel=1e-5)
    # a second column that is the first shifted changes only its own statistic
    two = torch.tensor(np.stack([x, x + 1.0], 1), dtype=torch.float32)
    both = EppsPulley()(two)
    assert both[0].item() == pytest.approx(expected, abs=1e-5, rel=1e-5)
    assert both[1].item() > both[0].item()


def test_leading_dimensions_are_kept():
    torch.manual_seed(3)
    x = torch.randn(3, 5, 100, 7)
    stat = EppsPulley()(x)
    assert stat.shape == (3, 5, 7)
    assert torch.allclose(stat[1, 2], EppsPulley()(x[1, 2]), atol=1e-5)


def test_gradient_is_autograds_through_cos_and_sin():
    """EppsPulley's backward (cos and sin kept from forward, not taken again) against
    autograd through the statistic written out with torch's own cos and sin: the same values
    and gradients, bit for bit (the same products in the same order)."""
    torch.manual_seed(4)
    ep = EppsPulley()

    def reference(x: torch.Tensor) -> torch.Tensor:
        xt = x.unsqueeze(-1) * ep.t
        err = (xt.cos().mean(-3) - ep.phi).square() + xt.sin().mean(-3).square()
        return (err @ ep.weights) * x.size(-2)

    for shape in [(2, 128, 64), (300, 5), (3, 2, 40, 7)]:
        x = torch.randn(*shape, requires_grad=True)
        (got,) = torch.autograd.grad(ep(x).sum(), x)
        (want,) = torch.autograd.grad(reference(x).sum(), x)
        assert torch.equal(ep(x), reference(x)) and torch.equal(got, want)


def test_n_points_must_be_at_least_two():
    with pytest.raises(ValueError, match="n_points"):
        EppsPulley(n_points=1)


# ---- SIGReg ---------------------------------------------------------------------------


def test_directions_are_unit_and_seeded_by_step():
    sig = SIGReg(slices=32, seed=5)
    a = sig.directions(16, step=7, device=torch.device("cpu"))
    assert a.shape == (16, 32)
    assert torch.allclose(a.norm(dim=0), torch.ones(32), atol=1e-6)
    assert torch.equal(a, sig.directions(16, step=7, device=torch.device("cpu")))
    assert torch.equal(a, SIGReg(slices=32, seed=5).directions(16, 7, torch.device("cpu")))
    b = sig.directions(16, step=8, device=torch.device("cpu"))
    assert not torch.allclose(a, b)
    c = SIGReg(slices=32, seed=6).directions(16, 7, torch.device("cpu"))
    assert not torch.allclose(a, c)
    # directions are not all the same column
    assert (a.T @ a - torch.eye(32)).abs().max() < 1.0


def test_sigreg_small_for_isotropic_gaussian_large_for_collapse():
    torch.manual_seed(4)
    n, d = 512, 32
    sig = SIGReg(slices=128, seed=0)
    iso = sig(torch.randn(n, d), step=0).item()
    # isotropic N(0, I): every projection is N(0, 1), so the mean statistic ≈ E[T] ≈ 1.05
    assert iso == pytest.approx(_gauss_expected_trap(), rel=0.25)
    # rank-1 collapse: z_i = g_i v, projection onto a is (a·v) g_i with variance (a·v)² ≈ 1/d
    v = torch.nn.functional.normalize(torch.randn(d), dim=0)
    collapsed = torch.randn(n, 1) * v
    col = sig(collapsed, step=0).item()
    assert col > 50 * iso
    # full collapse to a point is the worst case
    assert sig(torch.zeros(n, d), step=0).item() > col


def test_lejepa_prediction_term_is_zero_for_equal_views_and_loss_is_differentiable():
    torch.manual_seed(5)
    sig = SIGReg(slices=16)
    x = torch.randn(64, 8)
    same = x.unsqueeze(0).expand(3, -1, -1).clone().requires_grad_(True)
    loss, terms = lejepa_loss(same, sig, lam=0.1, step=0)
    # (3x)/3 need not round back to x in float32: zero up to rounding
    assert terms["prediction"] == pytest.approx(0.0, abs=1e-12)
    loss.backward()
    assert same.grad is not None and torch.isfinite(same.grad).all() and same.grad.abs().sum() > 0

    z = torch.randn(2, 64, 8, requires_grad=True)
    loss, terms = lejepa_loss(z, sig, lam=0.1, step=0)
    # V = 2: center − z_v = ±(z_0 − z_1)/2, so prediction = mean((z_0 − z_1)²) / 4
    expected_pred = ((z[0] - z[1]) ** 2).mean().item() / 4
    assert terms["prediction"] == pytest.approx(expected_pred, rel=1e-5)
    loss.backward()
    assert torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0


@pytest.mark.parametrize("form", ["minimal", "stable_pretraining"])
def test_loss_forms_combine_terms_as_documented(form):
    torch.manual_seed(6)
    sig = SIGReg(slices=16)
    z = torch.randn(3, 50, 8)
    lam, step = 0.2, 3
    loss, terms = lejepa_loss(z, sig, lam=lam, step=step, form=form)
    if form == "minimal":
        # SIGReg per view, averaged over views
        reg = torch.stack([sig(z[v], step) for v in range(3)]).mean().item()
        expected = (1 - lam) * terms["prediction"] + lam * reg
    else:
        # SIGReg of all views flattened into one batch of 150
        reg = sig(z.reshape(-1, 8), step).item()
        expected = terms["prediction"] + lam * reg
    assert terms["sigreg"] == pytest.approx(reg, rel=1e-5)
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_unknown_loss_form_raises():
    with pytest.raises(ValueError, match="unknown loss form"):
        lejepa_loss(torch.randn(2, 10, 4), SIGReg(slices=4), lam=0.1, step=0, form="nope")


# ---- next-token ------------------------------------------------------------------------


def test_next_token_loss_ignores_padding():
    torch.manual_seed(7)
    b, t, v, d = 3, 6, 11, 5
    ids = torch.randint(5, v, (b, t))
    lengths = [6, 4, 2]
    mask = torch.zeros(b, t, dtype=torch.long)
    for r, n in enumerate(lengths):
        mask[r, :n] = 1
        ids[r, n:] = 0  # [PAD]
    hidden, head = torch.randn(b, t, d), torch.randn(v, d)
    loss = next_token_loss(hidden, head, ids, mask)

    # by hand: position p predicts token p+1, counted iff token p+1 is real
    logp = torch.log_softmax(hidden @ head.T, -1)
    terms = [-logp[r, p, ids[r, p + 1]] for r, n in enumerate(lengths) for p in range(n - 1)]
    assert loss.item() == pytest.approx(torch.stack(terms).mean().item(), rel=1e-5)
    assert next_token_loss(hidden, head, ids, mask, "sum").item() == pytest.approx(
        torch.stack(terms).sum().item(), rel=1e-5
    )

    # states at padded positions (and at the last real position, which would predict a pad)
    # do not matter
    changed = hidden.clone()
    for r, n in enumerate(lengths):
        changed[r, n - 1 :] = torch.randn(t - n + 1, d) * 100
    assert next_token_loss(changed, head, ids, mask).item() == pytest.approx(loss.item(), rel=1e-6)
    # ... whereas states at a real position do
    changed[1, 0] += torch.randn(d) * 10
    assert next_token_loss(changed, head, ids, mask).item() != pytest.approx(loss.item(), rel=1e-3)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_linear_cross_entropy_equals_logits_then_cross_entropy(chunk, reduction):
    """The fused output layer + cross-entropy gives F.cross_entropy(h @ W.T)'s value and
    gradients (h and W) for any chunking of the rows: it is the same objective, computed
    without the (N, V) logits."""
    g = torch.Generator().manual_seed(3)
    n, d, v = 50, 8, 97
    h = torch.randn(n, d, generator=g, dtype=torch.float64).float().requires_grad_()
    w = (torch.randn(v, d, generator=g) * 0.5).requires_grad_()
    target = torch.randint(0, v, (n,), generator=g)
    ref = torch.nn.functional.cross_entropy(h @ w.T, target, reduction=reduction)
    gh, gw = torch.autograd.grad(3.0 * ref, (h, w))  # an upstream factor, as a loss scale is
    got = linear_cross_entropy(h, w, target, reduction, chunk=chunk)
    fh, fw = torch.autograd.grad(3.0 * got, (h, w))
    assert got.item() == pytest.approx(ref.item(), rel=1e-5)
    torch.testing.assert_close(fh, gh, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fw, gw, rtol=1e-5, atol=1e-6)


def test_linear_cross_entropy_under_bf16_autocast_is_autocasts_output_layer_with_an_fp32_softmax():
    """Under bf16 autocast the products take bf16 operands, as autocast's own output layer
    (F.linear) does, and the log-sum-exp and softmax stay fp32 (a bf16 softmax over 8,000
    words loses the loss's third digit): the loss and gradients are those of F.linear under
    autocast followed by an fp32 cross-entropy; the gradients come back in the inputs' dtypes."""
    g = torch.Generator().manual_seed(4)
    h = torch.randn(40, 16, generator=g).bfloat16().requires_grad_()
    w = torch.randn(300, 16, generator=g).requires_grad_()
    target = torch.randint(0, 300, (40,), generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = torch.nn.functional.cross_entropy(torch.nn.functional.linear(h, w).float(), target)
        got = linear_cross_entropy(h, w, target, chunk=7)
    rh, rw = torch.autograd.grad(ref, (h, w))
    gh, gw = torch.autograd.grad(got, (h, w))
    assert got.dtype == torch.float32 and got.item() == pytest.approx(ref.item(), rel=1e-5)
    assert gh.dtype == torch.bfloat16 and gw.dtype == torch.float32
    torch.testing.assert_close(gh, rh, rtol=2e-2, atol=1e-3)
    torch.testing.assert_close(gw, rw, rtol=2e-2, atol=1e-3)
    # and within bf16's rounding of the fp32 objective
    assert got.item() == pytest.approx(torch.nn.functional.cross_entropy(h.float() @ w.T, target).item(), rel=1e-2)


def test_linear_cross_entropy_where_a_targets_probability_underflows_is_still_the_log_sum_exp():
    """A target logit 200 below its row's largest has probability 0 in fp32, so −log p would be
    inf: those rows' losses come from the log-sum-exp instead, equal to F.cross_entropy's, and
    their gradients stay finite."""
    g = torch.Generator().manual_seed(5)
    h = torch.randn(30, 8, generator=g).requires_grad_()
    w = torch.randn(50, 8, generator=g)
    w[7] = h.detach()[3] * 400 / h.detach()[3].norm() ** 2  # row 3's logit for word 7 is 400
    w.requires_grad_()
    target = torch.randint(0, 50, (30,), generator=g)
    target[3] = 0  # word 0's logit is small: p(0) = e^{-~400} underflows
    ref = torch.nn.functional.cross_entropy(h @ w.T, target, reduction="none")
    assert ref[3] > 300  # the case this test is for
    got = linear_cross_entropy(h, w, target, "sum", chunk=4)
    fh, fw = torch.autograd.grad(got, (h, w))
    assert torch.isfinite(got) and got.item() == pytest.approx(ref.sum().item(), rel=1e-5)
    rh, rw = torch.autograd.grad(ref.sum(), (h, w))
    torch.testing.assert_close(fh, rh, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fw, rw, rtol=1e-5, atol=1e-5)


def test_linear_cross_entropy_rejects_an_unknown_reduction():
    with pytest.raises(ValueError, match="reduction"):
        linear_cross_entropy(torch.randn(2, 3), torch.randn(4, 3), torch.tensor([0, 1]), "none")
