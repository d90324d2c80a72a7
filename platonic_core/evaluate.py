"""The evaluate stage: alignment of every text model with the image encoder.

Reads the embed artifacts, scores PRH mutual kNN (clamp, L2, best over layer pairs), with a
95% bootstrap interval over eval samples, and writes scores.json, table.md, alignment.png.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from .features import load_features
from .metrics import alignment
from .report import alignment_plot, alignment_table
from .retrieval import retrieval, split_halves


def rotation_fit(text: np.ndarray, image: np.ndarray, seed: int = 0) -> dict[str, float]:
    """The theorem's "one rotation": an orthogonal Procrustes map text -> image fitted on a
    random half of the eval pairs; retrieval R@1/R@5 both ways and the normalised residual
    on the other half (each image has one caption here)."""
    fit, held = split_halves(len(text), seed)
    ids = np.arange(len(text))
    return retrieval(text[fit], image[fit], text[held], image[held], ids[held], ids[held], kind="procrustes")


def run_evaluate(embeds: dict[str, Path], cfg, out: Path, labels: dict[str, str] | None = None,
                 views: dict[str, str] | None = None) -> dict:
    ids = {m: pq.read_table(d / "ids.parquet")["image_id"].to_pylist() for m, d in embeds.items()}
    ref = ids[cfg.image_model]
    for m, i in ids.items():
        if i != ref:
            raise ValueError(f"embed:{m} and embed:{cfg.image_model} cover different eval images")
    image = load_features(embeds[cfg.image_model] / "features.npz")
    scores = {}
    for m in cfg.text_models:
        text = load_features(embeds[m] / "features.npz")
        s = alignment(text, image, k=cfg.k, clamp_q=cfg.clamp_quantile,
                      layers=cfg.layers, n_boot=cfg.bootstrap)
        scores[m] = {**s.as_dict(), "per_layer": s.per_layer,
                     "procrustes": rotation_fit(text[s.layer_a], image[s.layer_b])}
    chance = cfg.k / (len(ref) - 1)
    result = {"metric": "mutual_knn", "k": cfg.k, "image_model": cfg.image_model, "n": len(ref),
              "chance": chance, "models": scores, "labels": labels or {}, "views": views or {}}
    (out / "scores.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(alignment_table(result))
    alignment_plot(result, out / "alignment.png")
    return {f"mutual_knn_{m}": s["mutual_knn"] for m, s in scores.items()} | {"chance": chance, "n": len(ref)}



