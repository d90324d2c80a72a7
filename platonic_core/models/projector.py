"""The JEPA projector: MLP with BatchNorm (LeJEPA reference)."""

from __future__ import annotations

from torch import nn


def projector(width: int, out_dim: int, hidden: int | None = None) -> nn.Sequential:
    hidden = hidden or 2 * width
    return nn.Sequential(
        nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.GELU(), nn.Linear(hidden, out_dim)
    )
