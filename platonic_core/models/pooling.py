"""Pooling token states into one vector per text (torch only)."""

from __future__ import annotations

import torch


def masked_mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, D), (B, T) -> (B, D): mean over real tokens (mask 1). The mask is cast to h's
    dtype, so the result keeps it; a row without real tokens pools to zeros."""
    m = mask.unsqueeze(-1).to(h.dtype)
    return (h * m).sum(1) / m.sum(1).clamp_min(1)


def pool_tokens(h: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """(B, T, D), (B, T) -> (B, D): mean over real tokens, or the last real token (either
    padding side)."""
    if pooling == "mean":
        return masked_mean(h, mask)
    if pooling == "last":
        # position of the last 1 in each mask row
        idx = (mask * torch.arange(1, mask.size(1) + 1, device=mask.device)).argmax(1)
        return h[torch.arange(h.size(0), device=h.device), idx]
    raise ValueError(f"unknown pooling {pooling!r} (mean or last)")
