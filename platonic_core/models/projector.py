"""The JEPA projector: an MLP with BatchNorm, its shape from the recipe (`projector`,
`proj_hidden`, `proj_act`; presets in presets.py).

The default (`projector: custom`, nothing else set) is this project's small head,
Linear(width, 2·width) -> BatchNorm -> GELU -> Linear(2·width, proj_dim), sized for the tiny
demo models. LeJEPA's reference head is larger: `projector: lejepa`, two hidden layers of
2048 with BatchNorm and ReLU.
"""

from __future__ import annotations

from collections.abc import Sequence

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


ACTIVATIONS: dict[str, type[nn.Module]] = {"gelu": nn.GELU, "relu": nn.ReLU}


def projector(width: int, out_dim: int, hidden: Sequence[int] | None = None, act: str = "gelu") -> nn.Sequential:
    """Linear -> BatchNorm -> `act` for each size in `hidden`, then Linear to `out_dim`
    (torchvision's MLP layout with BatchNorm, as LeJEPA builds it, without its p=0 dropouts).
    `hidden` None: one layer of 2·width. The layers are created in this order so the default
    draws the same initial weights as before this was configurable."""
    if act not in ACTIVATIONS:
        raise ValueError(f"unknown projector activation {act!r}; activations: {', '.join(ACTIVATIONS)}")
    sizes = list(hidden) if hidden is not None else [2 * width]
    if any(h < 1 for h in sizes):
        raise ValueError(f"projector hidden sizes must be >= 1 (got {sizes})")
    layers: list[nn.Module] = []
    d = width
    for h in sizes:
        layers += [nn.Linear(d, h), GlobalBatchNorm1d(h), ACTIVATIONS[act]()]
        d = h
    layers.append(nn.Linear(d, out_dim))
    return nn.Sequential(*layers)
