"""Image encoder for the image JEPA: a small CNN on (B, 3, H, W) renders."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .projector import projector


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.GELU())


class ImageEncoder(nn.Module):
    def __init__(
        self,
        width: int,
        proj_dim: int,
        image_size: int = 32,
        proj_hidden: Sequence[int] | None = None,
        proj_act: str = "gelu",
    ):
        super().__init__()
        c = max(16, width // 4)
        self.blocks = nn.ModuleList(
            [
                _block(3, c, 1),  # (B, c, H, W)
                _block(c, 2 * c, 2),  # (B, 2c, H/2, W/2)
                _block(2 * c, 4 * c, 2),  # (B, 4c, H/4, W/4)
            ]
        )
        side = image_size // 4
        # position matters in the world, so the head sees the spatial map, not a global pool
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * c * side * side, width))
        self.proj = projector(width, proj_dim, proj_hidden, proj_act)

    @staticmethod
    def prepare(images: torch.Tensor) -> torch.Tensor:
        """uint8 (B, H, W, 3) -> float (B, 3, H, W) in [-1, 1]."""
        return images.permute(0, 3, 1, 2).float().div(127.5).sub(1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for b in self.blocks:
            x = b(x)
        emb = self.head(x)  # (B, D)
        return emb, self.proj(emb)

    @torch.no_grad()
    def layer_features(self, x: torch.Tensor) -> list[torch.Tensor]:
        feats = []
        for b in self.blocks:
            x = b(x)
            feats.append(x.mean((2, 3)))  # (B, C) pooled block output
        feats.append(self.head(x))  # (B, D)
        return feats
