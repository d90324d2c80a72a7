"""Alignment metrics with the Platonic Representation Hypothesis semantics (minyoungg/platonic-rep).

mutual kNN (k = 10): L2-normalised features; neighbours by cosine similarity with the point
itself excluded; per sample |kNN_A ∩ kNN_B| / k; the mean over samples is the score.
Before scoring, features are clamped to ± the q = 0.95 quantile of |features| (exact: the
int(q·numel)-th sorted value over the whole (L, N, D) stack), as `prepare_features` does.
With several layers per model every (layer_a, layer_b) pair is scored and the best kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


def knn_indices(feats: torch.Tensor, k: int) -> torch.Tensor:
    """(N, D) L2-normalised features -> (N, k) neighbour indices, self excluded."""
    n = feats.size(0)
    if n < k + 1:
        raise ValueError(f"need at least k+1 = {k + 1} samples for {k}-NN, got {n}")
    sim = feats @ feats.T  # (N, N)
    sim.fill_diagonal_(float("-inf"))
    return sim.topk(k, dim=1).indices


def mutual_knn_per_sample(a: torch.Tensor, b: torch.Tensor, k: int = 10) -> torch.Tensor:
    """Per-sample overlap |kNN_a(i) ∩ kNN_b(i)| / k for already-normalised a: (N, Da), b: (N, Db)."""
    if a.size(0) != b.size(0):
        raise ValueError(f"feature sets have different sample counts: {a.size(0)} vs {b.size(0)}")
    n = a.size(0)
    ka, kb = knn_indices(a, k), knn_indices(b, k)
    mask_a = torch.zeros(n, n, dtype=torch.bool)
    mask_a[torch.arange(n).unsqueeze(1), ka] = True
    hits = mask_a.gather(1, kb)  # (N, k): is b's neighbour also a's?
    return hits.float().sum(1) / k


def mutual_knn(a: torch.Tensor, b: torch.Tensor, k: int = 10) -> float:
    return mutual_knn_per_sample(F.normalize(a.float(), dim=-1), F.normalize(b.float(), dim=-1), k).mean().item()


@dataclass(frozen=True)
class AlignmentScore:
    score: float
    layer_a: int
    layer_b: int
    ci_low: float
    ci_high: float
    per_layer: list[list[float]]  # (La, Lb) scores

    def as_dict(self) -> dict:
        return {
            "mutual_knn": self.score, "ci95": [self.ci_low, self.ci_high],
            "layer_a": self.layer_a, "layer_b": self.layer_b,
        }


def as_layers(x) -> list[torch.Tensor]:
    """(N, D), (L, N, D) or a list of (N, D_l) -> list of float (N, D_l) tensors, checked."""
    if isinstance(x, (list, tuple)):
        layers = [torch.as_tensor(np.asarray(t), dtype=torch.float32) for t in x]
    else:
        t = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        if t.ndim == 2:
            t = t.unsqueeze(0)
        if t.ndim != 3:
            raise ValueError(f"features must be (N, D) or (L, N, D), got shape {tuple(t.shape)}")
        layers = list(t)
    if not layers:
        raise ValueError("no feature layers")
    for i, t in enumerate(layers):
        if t.ndim != 2:
            raise ValueError(f"layer {i}: expected (N, D), got shape {tuple(t.shape)}")
        if t.size(0) != layers[0].size(0):
            raise ValueError(f"layer {i} has {t.size(0)} samples, layer 0 has {layers[0].size(0)}")
        if not torch.isfinite(t).all():
            raise ValueError(f"layer {i}: features contain NaN or inf")
    return layers


def clamp_layers(layers: list[torch.Tensor], q: float) -> list[torch.Tensor]:
    """The PRH clamp over the whole stack of a model's layers (one threshold), per layer
    L2 normalisation after."""
    if q >= 1:
        return [F.normalize(t, dim=-1) for t in layers]
    flat = torch.cat([t.reshape(-1) for t in layers]).abs().sort().values
    q_val = flat[min(int(q * flat.numel()), flat.numel() - 1)]
    return [F.normalize(t.clamp(-q_val, q_val), dim=-1) for t in layers]


def bootstrap_ci(per_sample: np.ndarray, n_boot: int, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean over samples (neighbourhoods held fixed)."""
    if n_boot <= 0:
        m = float(per_sample.mean())
        return m, m
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(per_sample), size=(n_boot, len(per_sample)))
    means = per_sample[idx].mean(1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(lo), float(hi)


def alignment(
    feats_a,
    feats_b,
    k: int = 10,
    clamp_q: float = 0.95,
    layers: str = "best",
    n_boot: int = 1000,
    seed: int = 0,
) -> AlignmentScore:
    """PRH mutual kNN between two models' features, (N, D) or (L, N, D) each.

    layers="best": every layer pair, best kept (PRH); "last": the last layer of each.
    """
    a, b = as_layers(feats_a), as_layers(feats_b)
    if a[0].size(0) != b[0].size(0):
        raise ValueError(f"sample counts differ: {a[0].size(0)} vs {b[0].size(0)}")
    if a[0].size(0) < k + 1:
        raise ValueError(f"need at least k+1 = {k + 1} samples for {k}-NN, got {a[0].size(0)}")
    a, b = clamp_layers(a, clamp_q), clamp_layers(b, clamp_q)
    la = range(len(a)) if layers == "best" else [len(a) - 1]
    lb = range(len(b)) if layers == "best" else [len(b) - 1]
    grid = [[float("nan")] * len(b) for _ in range(len(a))]
    best, best_ij, best_ps = -1.0, (0, 0), None
    for i in la:
        for j in lb:
            ps = mutual_knn_per_sample(a[i], b[j], k)
            s = ps.mean().item()
            grid[i][j] = s
            if s > best:
                best, best_ij, best_ps = s, (i, j), ps
    lo, hi = bootstrap_ci(best_ps.numpy(), n_boot, seed)
    return AlignmentScore(best, best_ij[0], best_ij[1], lo, hi, grid)
