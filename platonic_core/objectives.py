"""Training objectives: LeJEPA (view prediction + SIGReg), next-token prediction, and the
in-batch contrastive loss (InfoNCE) pretrained sentence encoders are trained with.

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


class _EmpiricalCF(torch.autograd.Function):
    """The empirical characteristic function's real and imaginary parts, mean(cos t·x) and
    mean(sin t·x) over dim -3 of x·t: x (..., N, S), t (T,) -> 2 x (..., S, T).

    autograd would take cos and sin again in backward (∂cos = −sin, ∂sin = cos), the step's
    costliest element-wise work after attention; forward keeps the two it computed (2 x
    (..., N, S, T), the size of the x·t autograd keeps) and backward only multiplies."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xt = x.unsqueeze(-1) * t  # (..., N, S, T)
        cos, sin = xt.cos(), xt.sin()
        ctx.save_for_backward(cos, sin, t)
        return cos.mean(-3), sin.mean(-3)

    @staticmethod
    def backward(ctx, grad_cos: torch.Tensor, grad_sin: torch.Tensor):
        cos, sin, t = ctx.saved_tensors
        n = cos.size(-3)
        # mean's backward (g / N at every row), then ∂cos(u) = −sin(u), ∂sin(u) = cos(u)
        grad_xt = (grad_cos / n).unsqueeze(-3) * -sin + (grad_sin / n).unsqueeze(-3) * cos  # (..., N, S, T)
        return (grad_xt * t).sum(-1), None  # ∂(x·t)/∂x = t, summed over the T points


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
        cos_mean, sin_mean = _EmpiricalCF.apply(x.float(), self.t)  # (..., S, T) each
        cos_mean, sin_mean = _all_reduce_mean(cos_mean), _all_reduce_mean(sin_mean)
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


def info_nce(a: torch.Tensor, b: torch.Tensor, temperature: float) -> tuple[torch.Tensor, dict[str, float]]:
    """In-batch InfoNCE of paired rows a[i] <-> b[i], both (N, D): cross-entropy of the cosine
    similarities / temperature, every other row of the batch a negative, averaged over both
    directions (two views of a synset have no anchor). sentence-transformers' training loss for
    all-MiniLM-L6-v2 (MultipleNegativesRankingLoss, scale 20 = temperature 0.05), symmetric.
    One process's batch: under DDP each process contrasts its own rows."""
    F = torch.nn.functional
    logits = F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T / temperature  # (N, N)
    target = torch.arange(a.size(0), device=a.device)
    loss = 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))
    top1 = (logits.argmax(1) == target).float().mean()
    return loss, {"infonce": loss.item(), "in_batch_top1": top1.item()}


class _LinearCrossEntropy(torch.autograd.Function):
    """Σ_i CE(h_i·Wᵀ, y_i) with its gradients taken in the same pass, chunk by chunk of rows.

    The (N, V) logits never exist at once and nothing of size V is kept for backward: each
    chunk's softmax becomes its gradient in place (p − onehot), which is multiplied into
    ∂h and accumulated into ∂W at once; backward only scales the two by the incoming grad.
    Exact in fp32: the same sum as F.cross_entropy over h @ Wᵀ. The softmax is torch's fused
    kernel (max, exp, sum and scale row by row), not five passes of amax / sub / exp / sum /
    div over the chunk; the loss is −log p(target). A row whose target probability underflows
    fp32 (its logit ~87 below the row's largest) would give inf: after the loop those rows'
    losses are recomputed as log-sum-exp − target logit (one check a call, not a chunk).
    Under bf16 autocast the three products take bf16 operands, as autocast's own output layer
    would (their cost is most of a next-token step at a large vocabulary; bf16 products are
    ~2x faster where the CPU has bf16 arithmetic); the softmax, the loss and ∂W's sum over
    chunks stay fp32."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, w: torch.Tensor, target: torch.Tensor, chunk: int) -> torch.Tensor:
        device = h.device.type
        # the products' operand dtype: autocast's (bf16) where it is on, else fp32
        mm = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else torch.float32
        with torch.autocast(device, enabled=False):  # the softmax and the sums in fp32
            hm, wm = h.to(mm), w.to(mm)  # (N, D), (V, D)
            need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
            grad_h = torch.empty(h.shape, dtype=torch.float32, device=h.device) if need_grad else None
            grad_w = torch.zeros(w.shape, dtype=torch.float32, device=w.device) if need_grad else None
            picked = torch.empty(target.shape, dtype=torch.float32, device=h.device)  # (N,)
            arange = torch.arange(min(chunk, hm.size(0)), device=h.device)
            for s in range(0, hm.size(0), chunk):
                hc, tc = hm[s : s + chunk], target[s : s + chunk]  # (C, D), (C,)
                rows = arange[: len(tc)]
                p = torch.softmax(hc @ wm.T, -1, dtype=torch.float32)  # (C, V)
                picked[s : s + chunk] = pc = p[rows, tc]  # (C,): the targets' probabilities
                if need_grad:
                    p[rows, tc] = pc - 1  # ∂loss/∂logits = p − onehot
                    if mm == torch.float32:
                        torch.mm(p, wm, out=grad_h[s : s + chunk])
                        grad_w.addmm_(p.T, hc)
                    else:
                        pm = p.to(mm)
                        grad_h[s : s + chunk] = pm @ wm
                        grad_w += pm.T @ hc
            log_p = picked.log()  # (N,)
            under = picked < torch.finfo(torch.float32).tiny  # log p is inf or imprecise there
            if under.any():  # rare: those rows' log-sum-exp, from their logits again
                lu = (hm[under] @ wm.T).float()  # (U, V)
                log_p[under] = lu.gather(1, target[under][:, None]).squeeze(1) - torch.logsumexp(lu, -1)
            loss = -log_p.sum()
        ctx.save_for_backward(grad_h, grad_w)
        ctx.dtypes = (h.dtype, w.dtype)
        return loss

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad_h, grad_w = ctx.saved_tensors
        dh, dw = ctx.dtypes
        return (grad_h * grad).to(dh), (grad_w * grad).to(dw), None, None


def linear_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, reduction: str = "mean", chunk: int | None = None
) -> torch.Tensor:
    """Cross-entropy of the logits h @ weight.T against `target`, fused with the output layer
    (`_LinearCrossEntropy`): h (N, D), weight (V, D), target (N,) -> scalar (`mean` or `sum`).
    `chunk` rows at a time; by default about 2^22 logits (16 MB in fp32) and at least 256 rows:
    524 rows at V = 8,000, 256 at 30,522, one chunk for the world's 121 words. Each chunk adds a
    (V, D) product into ∂W, so small chunks cost most at a large width: at width 256 and
    V = 8,000 the output layer takes ~230 ms at 524 rows against ~300 ms at 131 (2 cores)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be mean or sum, not {reduction!r}")
    chunk = chunk or max(256, (1 << 22) // weight.size(0))
    total = _LinearCrossEntropy.apply(h, weight, target, chunk)
    return total / max(target.numel(), 1) if reduction == "mean" else total


def next_token_loss(
    hidden: torch.Tensor,
    head_weight: torch.Tensor,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    reduction: str = "mean",
) -> torch.Tensor:
    """Cross-entropy of predicting token t+1 from tokens ≤ t (mean, or `sum` over the real
    targets: the trainer divides by the global target count under DDP). hidden: (B, T, D)
    last-layer states; head_weight: (V, D) the output layer (no bias). Only positions whose
    next token is real go through the output layer: padding costs no vocabulary work."""
    real = attention_mask[:, 1:] != 0  # (B, T-1)
    h = hidden[:, :-1][real]  # (n, D): the positions with a target
    target = input_ids[:, 1:][real]  # (n,)
    return linear_cross_entropy(h, head_weight, target, reduction)
