"""Training objectives: LeJEPA (view prediction + SIGReg) and next-token prediction.

SIGReg follows the LeJEPA reference (rbalestr-lab/lejepa) exactly:
- Epps–Pulley statistic of 1-D samples x_1..x_N against N(0, 1):
      T = N * ∫ |φ̂_N(t) − e^{−t²/2}|² e^{−t²/2} dt,   φ̂_N(t) = mean(cos t x) + i mean(sin t x)
  on t = linspace(0, t_max=3, 17) with trapezoid weights 2·dt inside and dt at both ends
  (the 2 accounts for t < 0, the integrand being even), times the window e^{−t²/2}.
  Under DDP the empirical means are averaged over processes and N is the global count.
- SIGReg = mean over S random unit directions of T(projected embeddings). The directions
  come from a generator seeded by the step counter, so every process draws the same ones.

Loss forms (config `loss_form`):
- "minimal" (LeJEPA MINIMAL.md): (1 − λ)·prediction + λ·SIGReg, SIGReg per view, averaged.
- "stable_pretraining": prediction + λ·SIGReg of all views flattened into one batch.
prediction = mean over views of mean((center − z_v)²), center = mean over views.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


class _AllReduceSum(torch.autograd.Function):
    """Sum over processes whose backward sums the gradients over processes too: every
    process's loss depends on every process's rows, so each row's gradient is the sum of
    what all processes' losses send it (DDP then averages parameter gradients)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad


def all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """Differentiable all-reduce (sum); the identity outside torch.distributed."""
    return _AllReduceSum.apply(x) if _distributed() else x


def _all_reduce_mean(x: torch.Tensor) -> torch.Tensor:
    if not _distributed():
        return x
    return all_reduce_sum(x) / dist.get_world_size()


class EppsPulley(torch.nn.Module):
    """Epps–Pulley normality statistic along dim -2 of x: (..., N, S) -> (..., S)."""

    def __init__(self, t_max: float = 3.0, n_points: int = 17):
        super().__init__()
        if n_points < 2:
            raise ValueError("n_points must be >= 2")
        t = torch.linspace(0, t_max, n_points, dtype=torch.float32)
        dt = t_max / (n_points - 1)
        weights = torch.full((n_points,), 2 * dt, dtype=torch.float32)
        weights[[0, -1]] = dt
        phi = torch.exp(-t.square() / 2)
        self.register_buffer("t", t, persistent=False)
        self.register_buffer("phi", phi, persistent=False)
        self.register_buffer("weights", weights * phi, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.size(-2)
        xt = x.float().unsqueeze(-1) * self.t  # (..., N, S, T)
        cos_mean = _all_reduce_mean(xt.cos().mean(-3))  # (..., S, T)
        sin_mean = _all_reduce_mean(xt.sin().mean(-3))
        err = (cos_mean - self.phi).square() + sin_mean.square()
        world = dist.get_world_size() if _distributed() else 1
        return (err @ self.weights) * (n * world)  # (..., S)


class SIGReg(torch.nn.Module):
    """Sketched isotropic Gaussian regulariser: mean Epps–Pulley over random directions."""

    def __init__(self, slices: int = 256, t_max: float = 3.0, n_points: int = 17, seed: int = 0):
        super().__init__()
        self.slices = slices
        self.seed = seed
        self.test = EppsPulley(t_max, n_points)

    def directions(self, dim: int, step: int, device: torch.device) -> torch.Tensor:
        """(D, S) unit columns drawn from the step counter: identical on every process."""
        g = torch.Generator(device="cpu").manual_seed(self.seed * 1_000_003 + step)
        a = torch.randn(dim, self.slices, generator=g)
        return (a / a.norm(dim=0, keepdim=True)).to(device)

    def forward(self, z: torch.Tensor, step: int) -> torch.Tensor:
        """z: (..., N, D) -> scalar; statistic per leading index, then averaged."""
        a = self.directions(z.size(-1), step, z.device)
        # fp32 even under bf16 autocast (which would run this matmul in bf16): the statistic
        # compares a characteristic function to exp(-t²/2) to a few decimals
        with torch.autocast(z.device.type, enabled=False):
            return self.test(z.float() @ a).mean()


def lejepa_loss(
    z: torch.Tensor, sigreg: SIGReg, lam: float, step: int, form: str = "minimal"
) -> tuple[torch.Tensor, dict[str, float]]:
    """z: (V, N, K) projections of V views of N samples -> (loss, {terms})."""
    z = z.float()  # a no-op in fp32; under bf16 autocast the loss terms are taken in fp32
    center = z.mean(0, keepdim=True)  # (1, N, K)
    prediction = (center - z).square().mean()
    if form == "minimal":
        reg = sigreg(z, step)  # per view, averaged
        loss = (1 - lam) * prediction + lam * reg
    elif form == "stable_pretraining":
        reg = sigreg(z.reshape(-1, z.size(-1)), step)
        loss = prediction + lam * reg
    else:
        raise ValueError(f"unknown loss form {form!r}")
    return loss, {"prediction": prediction.item(), "sigreg": reg.item()}


def next_token_loss(
    logits: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy of predicting token t+1 from tokens ≤ t (mean, or `sum` over the real
    targets: the trainer divides by the global target count under DDP). logits: (B, T, V)."""
    target = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)  # (B, T-1)
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)).float(), target.reshape(-1), ignore_index=-100, reduction=reduction
    )
