"""Pooling token states into one vector per text (torch only)."""

from __future__ import annotations

import torch


def masked_mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, D), (B, T) -> (B, D): mean over real tokens (mask 1). The mask is cast to h's
    dtype, so the result keeps it; a row without real tokens pools to zeros."""
    m = mask.unsqueeze(-1).to(h.dtype)
    return (h * m).sum(1) / m.sum(1).clamp_min(1)
