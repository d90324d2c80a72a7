"""A pretrained decoder (Gemma-3) as a text JEPA's encoder: post-training a causal LM.

    model = DecoderEncoder(decoder_config, proj_dim=64, pooling="mean")   # models/pretrained.py
    emb, z = model(ids, mask)                     # (B, D) pooled, (B, K) projected
    loss = model(ids, mask, loss="mean")          # its own objective: next-token, tied head

The encoder is transformers' `Gemma3TextModel` (what `AutoModel` gives for a gemma3_text
checkpoint), causal attention as it ships; a text's embedding is its last hidden state pooled
by the recipe's rule (`pooling`: mean over real tokens, or the last real token, the only
position that has read the whole text). The JEPA projector on top is new. `freeze_below`
keeps all but the last decoder blocks (and the final norm) as they ship: what a 2-core CPU
affords on a 268M-parameter model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from transformers import Gemma3TextConfig, Gemma3TextModel

from ..objectives import next_token_loss
from .pooling import pool_tokens
from .projector import projector

DECODER_TYPES = ("gemma3_text",)  # the decoder architectures `init` can start from


class DecoderEncoder(nn.Module):
    """Gemma-3 text decoder + JEPA projector; embedding = the recipe's pooling of the last layer."""

    def __init__(
        self,
        decoder_config: dict,
        proj_dim: int,
        pooling: str = "mean",
        attention: str = "eager",
        proj_hidden: Sequence[int] | None = None,
        proj_act: str = "gelu",
    ):
        """`decoder_config`: the pretrained decoder's architecture (models/pretrained.py's
        init_decoder_config, as model.json keeps it); its weights are loaded after."""
        super().__init__()
        if decoder_config.get("model_type") not in DECODER_TYPES:
            got = decoder_config.get("model_type")
            raise ValueError(f"decoder_config: a {got!r} model, not one of {DECODER_TYPES}")
        if pooling not in ("mean", "last"):
            raise ValueError(f"pooling {pooling!r}: mean or last")
        config = Gemma3TextConfig(**{k: v for k, v in decoder_config.items() if k != "model_type"})
        config._attn_implementation = attention
        self.decoder = Gemma3TextModel(config)
        self.pooling = pooling
        self.proj = projector(config.hidden_size, proj_dim, proj_hidden, proj_act)

    @property
    def blocks(self) -> int:
        return len(self.decoder.layers)

    def freeze_below(self, train_blocks: int) -> None:
        """Only the last `train_blocks` decoder blocks and the final norm keep requires_grad
        (and the projector); the embeddings (also the tied output layer) and the blocks below
        stay as they ship. Autograd then builds no graph below the first trained block."""
        if not 1 <= train_blocks <= self.blocks:
            raise ValueError(f"train_blocks = {train_blocks}, but the decoder has {self.blocks} blocks")
        trained = {f"layers.{i}." for i in range(self.blocks - train_blocks, self.blocks)}
        for name, p in self.decoder.named_parameters():
            p.requires_grad_(name.startswith("norm.") or any(name.startswith(t) for t in trained))

    def _hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return out.last_hidden_state  # (B, T, D), after the final norm

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, loss: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | torch.Tensor:
        """(pooled (B, D), projected (B, K)); with `loss` ("mean" or "sum") the next-token loss
        through the input embeddings (Gemma's output layer is tied to them) instead, so training
        calls it through forward (DDP, torch.compile) as it calls the causal LM."""
        h = self._hidden(input_ids, attention_mask)  # (B, T, D)
        if loss is not None:
            return next_token_loss(h, self.decoder.embed_tokens.weight, input_ids, attention_mask, loss)
        emb = pool_tokens(h, attention_mask, self.pooling)  # (B, D)
        return emb, self.proj(emb)  # (B, D), (B, K)

    @torch.no_grad()
    def layer_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
        out = self.decoder(
            input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False
        )
        return [pool_tokens(h, attention_mask, self.pooling) for h in out.hidden_states]  # L+1 x (B, D)
