"""The rows every real-data score stands beside (the `references` stage): chance-level rows
(random features, a permutation null), the simplest methods that could explain a score
(TF-IDF of the same class texts, a text-free vector of each class's WordNet ancestors), and
pretrained text encoders (all-MiniLM-L6-v2; Gemma-3 270M when `concepts.references` names
it, minutes on a CPU, at its last layer fixed in advance), each scored against the concept
set's prototypes with the evaluate stage's own metric settings, on all classes and on each
subset.

Sparse rows (TF-IDF, ancestors) and the PRH clamp: the clamp's threshold is the mean
per-sample 0.95 quantile of |x|, which is 0 for rows that are mostly zeros, so under
`evaluate.clamp: mean` such a row is clamped to nothing and scores at chance; the real-data
recipes score with `clamp: none` for that reason (docs/realdata.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq

from ..features import eval_captions, load_features
from ..metrics import alignment
from .baselines import ancestor_vectors, tfidf_features
from .evalset import subset_rows
from .hierarchy import NounHierarchy

if TYPE_CHECKING:
    from ..config import ConceptsConfig, EvaluateConfig

ENCODERS = {"minilm": "all-MiniLM-L6-v2", "gemma": "gemma-3-270m"}  # packaged models (match/features.py)
# encoders scored at one layer fixed before any score, not at the best of their layers: Gemma,
# a causal LM whose best layer for this metric is not known in advance (on the probe it was
# 16 of 18 unclamped, 13 clamped), so "best" would be picked by the very score it reports.
# Mean pooling over the last layer is the fixed choice: the pooling every other row uses, and
# the layer one takes when no labels may choose it.
# The best layer is reported beside it as `<name>_best_layer`, a diagnostic labelled so.
FIXED_LAST = ("gemma",)


def encoder_layers(name: str, texts: list[str]) -> list[np.ndarray]:
    """Mean-pooled hidden states of every layer (embeddings first) of a packaged encoder."""
    from ..hf_features import hf_text_layer_features
    from ..match.features import packaged_model

    folder, gguf = packaged_model(ENCODERS[name])
    return hf_text_layer_features(folder, texts, pooling="mean", dtype="float32", gguf_file=gguf)


def score_references(
    concepts_dir: Path,
    cfg: ConceptsConfig,
    ev: EvaluateConfig,
    out: Path,
    log: Callable[[str], None] = print,
) -> dict[str, float]:
    """Score cfg.references against the prototypes; write references.json; return
    `reference_<row>` metrics (all classes)."""
    concepts_dir = Path(concepts_dir)
    ids, texts = eval_captions(concepts_dir)
    image = load_features(concepts_dir / "features.npz")[-1]
    order = pq.read_table(concepts_dir / "ids.parquet")["image_id"].to_pylist()
    if ids != order:
        raise ValueError(f"{concepts_dir}: eval.parquet and ids.parquet list different classes")
    rows_of = subset_rows(concepts_dir, ids, ev.k)
    rng = np.random.default_rng(0)

    def scored(feats: list[np.ndarray], rows: list[int] | None = None, layers: str = "best"):
        text, img = (feats, image) if rows is None else ([f[rows] for f in feats], image[rows])
        return alignment(text, img, k=ev.k, clamp_q=ev.clamp_quantile, clamp=ev.clamp, layers=layers, n_boot=0)

    def one(feats: list[np.ndarray], note: str, layers: str = "best") -> dict:
        s = scored(feats, layers=layers)
        return {
            "mutual_knn": s.score,
            "layer": s.layer_a,
            "note": note,
            "subsets": {n: scored([feats[s.layer_a]], r).score for n, r in rows_of.items()},
        }

    def spread(draws: list[np.ndarray], note: str) -> dict:
        vals = np.array([scored([d]).score for d in draws])
        return {
            "mutual_knn": float(vals.mean()),
            "sd": float(vals.std()),
            "note": note,
            "subsets": {n: float(np.mean([scored([d], r).score for d in draws])) for n, r in rows_of.items()},
        }

    encoded: dict[str, list[np.ndarray]] = {}
    for name in ENCODERS:
        if name in cfg.references:
            t = time.perf_counter()
            encoded[name] = encoder_layers(name, texts)
            log(f"references: {ENCODERS[name]} features in {time.perf_counter() - t:.0f} s")
    rows: dict[str, dict] = {}
    n = cfg.permutations
    for name in cfg.references:
        if name == "random":
            draws = [rng.standard_normal((len(ids), 384)).astype(np.float32) for _ in range(n)]
            rows[name] = spread(draws, f"N(0, 1) features, 384-d, {n} draws")
        elif name == "permutation":
            base = encoded["minilm"][-1] if "minilm" in encoded else tfidf_features(texts)
            what = "MiniLM's last layer" if "minilm" in encoded else "TF-IDF"
            draws = [base[rng.permutation(len(base))] for _ in range(n)]
            rows[name] = spread(draws, f"{what} with its rows shuffled, {n} draws")
        elif name == "tfidf":
            rows[name] = one([tfidf_features(texts)], "TF-IDF of the same class texts")
        elif name == "ancestors":
            hierarchy = NounHierarchy.read(cfg.wordnet)
            rows[name] = one([ancestor_vectors(hierarchy, ids)], "WordNet ancestors, TF-IDF weighted (no text)")
        elif name in FIXED_LAST:  # the row is the layer fixed in advance; the best layer only a diagnostic
            rows[name] = one([encoded[name][-1]], f"{ENCODERS[name]}, mean pooling, last layer (fixed)", layers="last")
            best = one(encoded[name], f"{ENCODERS[name]}, mean pooling, best layer: a diagnostic picked by this score")
            rows[f"{name}_best_layer"] = best
        else:
            rows[name] = one(encoded[name], f"{ENCODERS[name]}, mean pooling, best layer")
            rows[f"{name}_last"] = one([encoded[name][-1]], f"{ENCODERS[name]}, last layer", layers="last")
        log(f"references: {name} {rows[name]['mutual_knn']:.3f}")
    result = {"k": ev.k, "clamp": ev.clamp, "n": len(ids), "subsets": {n: len(r) for n, r in rows_of.items()}}
    (out / "references.json").write_text(json.dumps(result | {"rows": rows}, indent=1))
    return {f"reference_{name}": r["mutual_knn"] for name, r in rows.items()}
