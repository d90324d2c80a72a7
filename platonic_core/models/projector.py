"""The JEPA projector: MLP with BatchNorm (LeJEPA reference)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class GlobalBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d whose training statistics are those of the global batch under
    torch.distributed (any backend, CPU included: torch's SyncBatchNorm is GPU-only), so
    N processes normalise as one process with the whole batch would. Outside DDP it is
    exactly nn.BatchNorm1d (same weights, same numbers)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        # differentiable all-reduce: gradients flow back to every process's rows
        from ..objectives import all_reduce_sum as all_reduce

        c = x.size(1)
        xf = x.float()  # (B, C)
        count = torch.full((1,), float(x.size(0)), device=x.device)
        stats = all_reduce(torch.cat([xf.sum(0), xf.square().sum(0), count]))  # (2C + 1,) summed
        total = stats[-1]
        mean = stats[:c] / total
        var = (stats[c : 2 * c] / total - mean.square()).clamp_min(0)
        with torch.no_grad():
            self.num_batches_tracked += 1
            m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
            self.running_mean.mul_(1 - m).add_(m * mean.detach())
            self.running_var.mul_(1 - m).add_(m * var.detach() * total / (total - 1).clamp_min(1))
        y = (xf - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            y = y * self.weight + self.bias
        return y.to(x.dtype)


def projector(width: int, out_dim: int, hidden: int | None = None) -> nn.Sequential:
    hidden = hidden or 2 * width
    return nn.Sequential(nn.Linear(width, hidden), GlobalBatchNorm1d(hidden), nn.GELU(), nn.Linear(hidden, out_dim))
