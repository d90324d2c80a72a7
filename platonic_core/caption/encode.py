"""Features of the captioning data with one encoder, one layer (`caption_text`, `caption_image`).

A text encoder embeds the decoder's training captions, the map's pair captions and the
conditioning captions (true captions of the eval images); the image encoder embeds the pair images and the eval images.
Each goes to `features.npz` under its role's name (`decoder_texts`, `pairs`, `conditions`;
`pairs`, `eval`), rows in the data's file order.

Encoders: a checkpoint this project trained (the pipeline's `train` artifact: our text JEPAs,
causal LM, image JEPA; features.py), or any transformers model (hf_features.py: mean/last-token
pooled hidden states, the CLS token of vision blocks). Work goes in chunks, so memory holds one
layer of the rows, not every layer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..compare import load_trained
from .data import LazyImages, read_texts

if TYPE_CHECKING:
    from ..config import CaptionEncoderConfig

TEXT_ROLES = ("decoder_texts", "pairs", "conditions")
IMAGE_ROLES = ("pairs", "eval")
CHUNK = 8192  # rows per call of a checkpoint encoder (which returns every layer)


def _pick(layers: list[np.ndarray], layer: int, what: str) -> np.ndarray:
    if not -len(layers) <= layer < len(layers):
        raise ValueError(f"{what}: layer {layer}, but the encoder has {len(layers)} layers (embeddings first)")
    return layers[layer].astype(np.float32)


def encode_texts(cfg: CaptionEncoderConfig, texts: list[str], checkpoint: Path | None = None) -> np.ndarray:
    """(N, D) features of `texts` at `cfg.layer`. `checkpoint`: a train artifact folder
    (sources pipeline / checkpoint)."""
    if cfg.source == "hf":
        from ..hf_features import hf_text_layer_features

        return _pick(
            hf_text_layer_features(
                cfg.id,
                texts,
                cfg.pooling,
                cfg.batch_size,
                cfg.revision,
                cfg.dtype,
                cfg.trust_remote_code,
                keep=cfg.layer,
            ),
            0,
            cfg.id,
        )
    from ..features import checkpoint_text_features

    model, mcfg = load_trained(checkpoint)
    if mcfg.kind == "image_jepa":
        raise ValueError(f"{checkpoint}: an image model cannot embed texts")
    return np.concatenate(
        [
            _pick(checkpoint_text_features(model, checkpoint, texts[s : s + CHUNK], cfg.batch_size), cfg.layer, cfg.id)
            for s in range(0, len(texts), CHUNK)
        ]
    )


def encode_images(cfg: CaptionEncoderConfig, images: LazyImages, checkpoint: Path | None = None) -> np.ndarray:
    """(N, D) features of `images` at `cfg.layer`."""
    if cfg.source == "hf":
        from ..hf_features import hf_image_layer_features

        return _pick(
            hf_image_layer_features(
                cfg.id, images, cfg.batch_size, cfg.revision, cfg.dtype, cfg.trust_remote_code, keep=cfg.layer
            ),
            0,
            cfg.id,
        )
    from PIL import Image

    from ..features import image_layer_features

    model, mcfg = load_trained(checkpoint)
    if mcfg.kind != "image_jepa":
        raise ValueError(f"{checkpoint}: a {mcfg.kind} cannot embed images")
    size = json.loads((checkpoint / "model.json").read_text())["image_size"]

    def array(im) -> np.ndarray:  # our CNN reads uint8 (H, W, 3) at its training size
        if isinstance(im, np.ndarray) and im.shape[:2] == (size, size):
            return im
        pic = im if isinstance(im, Image.Image) else Image.fromarray(im)
        return np.asarray(pic.convert("RGB").resize((size, size)))

    out = []
    for s in range(0, len(images), CHUNK):
        batch = np.stack([array(im) for im in images[s : s + CHUNK]])  # (B, H, W, 3)
        out.append(_pick(image_layer_features(model, batch, cfg.batch_size), cfg.layer, cfg.id))
    return np.concatenate(out)


def run_text_features(
    cfg: CaptionEncoderConfig, data_dir: Path, out: Path, checkpoint: Path | None = None
) -> dict[str, int]:
    texts = {role: read_texts(data_dir, role)[1] for role in TEXT_ROLES}
    # a pair caption is also a decoder text: each distinct text is embedded once
    unique = sorted({t for v in texts.values() for t in v})
    row = {t: k for k, t in enumerate(unique)}
    emb = encode_texts(cfg, unique, checkpoint)  # (U, D)
    feats = {role: emb[[row[t] for t in v]] for role, v in texts.items()}
    np.savez(out / "features.npz", **feats)
    return {f"{r}_rows": int(f.shape[0]) for r, f in feats.items()} | {"dim": int(feats["pairs"].shape[1])}


def run_image_features(
    cfg: CaptionEncoderConfig, data_dir: Path, out: Path, checkpoint: Path | None = None, world_dir: Path | None = None
) -> dict[str, int]:
    feats = {role: encode_images(cfg, LazyImages(data_dir, role, world_dir), checkpoint) for role in IMAGE_ROLES}
    np.savez(out / "features.npz", **feats)
    return {f"{r}_rows": int(f.shape[0]) for r, f in feats.items()} | {"dim": int(feats["pairs"].shape[1])}


def load_roles(folder: Path) -> dict[str, np.ndarray]:
    """role -> (N, D) features of a caption_text / caption_image artifact."""
    with np.load(folder / "features.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
