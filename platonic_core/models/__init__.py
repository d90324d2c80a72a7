"""Models, built from `ModelConfig`: architectures are config, not code.

- text_jepa: a BERT encoder (transformers BertModel) + projector; from random weights, or
  from a pretrained encoder (`init`: models/pretrained.py); or a pretrained decoder
  (Gemma-3, models/decoder.py) + projector
- causal_lm: a GPT-2 of the same width/depth (transformers GPT2LMHeadModel)
- image_jepa: a small CNN + projector

The projector (both JEPAs) is a BatchNorm MLP whose shape is config too: `projector`
(`custom` or the `lejepa` preset), `proj_hidden`, `proj_act`, `proj_dim` (presets.py).

Every model exposes `layer_features(...) -> list[(B, D_l)]`: one pooled representation per
layer (embeddings first), which the evaluation compares layer pair by layer pair (PRH).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import load_model, save_model

from .decoder import DecoderEncoder
from .image import ImageEncoder
from .presets import PRESETS, PROJECTOR_PRESETS, resolve_dims, resolve_projector
from .text import CausalLM, TextEncoder

if TYPE_CHECKING:
    from ..config import ModelConfig

__all__ = [
    "PRESETS",
    "PROJECTOR_PRESETS",
    "resolve_dims",
    "resolve_projector",
    "build_model",
    "save_checkpoint",
    "load_checkpoint",
    "TextEncoder",
    "CausalLM",
    "DecoderEncoder",
    "ImageEncoder",
]


def build_model(
    cfg: ModelConfig,
    vocab_size: int | None = None,
    max_len: int = 64,
    image_size: int = 32,
    special_ids: dict[str, int] | None = None,
    bert_config: dict | None = None,
    decoder_config: dict | None = None,
) -> torch.nn.Module:
    """`special_ids`: pad/bos/eos ids of a tokenizer that does not use the built-in layout.
    `bert_config` / `decoder_config`: a pretrained text encoder's or decoder's architecture
    (`init`, models/pretrained.py); the decoder's vocabulary and lengths are its own."""
    layers, width, heads = resolve_dims(getattr(cfg, "preset", "custom"), cfg.width, cfg.layers, cfg.heads)
    if bert_config is not None:
        width = bert_config["hidden_size"]
    if decoder_config is not None:
        if cfg.kind != "text_jepa":
            raise ValueError(f"decoder_config is a text_jepa's pretrained encoder, not a {cfg.kind}'s")
        proj = resolve_projector(cfg.projector, decoder_config["hidden_size"], cfg.proj_hidden, cfg.proj_act)
        return DecoderEncoder(decoder_config, cfg.proj_dim, cfg.pooling, cfg.attention, proj.hidden, proj.act)
    if cfg.kind == "causal_lm":
        return CausalLM(vocab_size, width, layers, heads, max_len, cfg.attention, special_ids, cfg.tie_embeddings)
    if cfg.kind not in ("text_jepa", "image_jepa"):
        raise ValueError(f"unknown model kind {cfg.kind!r}")
    # the image model's width is the recipe's own (presets are text sizes)
    proj_in = width if cfg.kind == "text_jepa" else cfg.width
    proj = resolve_projector(cfg.projector, proj_in, cfg.proj_hidden, cfg.proj_act)
    if cfg.kind == "text_jepa":
        return TextEncoder(
            vocab_size,
            width,
            layers,
            heads,
            cfg.proj_dim,
            max_len,
            cfg.attention,
            special_ids,
            proj.hidden,
            proj.act,
            bert_config,
        )
    return ImageEncoder(cfg.width, cfg.proj_dim, image_size, proj.hidden, proj.act)


def save_checkpoint(model: torch.nn.Module, build_args: dict, out: Path) -> None:
    """Weights as safetensors (shared tensors handled) + the arguments that rebuild it."""
    out.mkdir(parents=True, exist_ok=True)
    save_model(model, str(out / "model.safetensors"))
    (out / "model.json").write_text(json.dumps(build_args, sort_keys=True, indent=1))


def load_checkpoint(path: Path, cfg: ModelConfig) -> torch.nn.Module:
    args = json.loads((path / "model.json").read_text())
    model = build_model(cfg, **args)
    load_model(model, str(path / "model.safetensors"))
    return model.eval()
