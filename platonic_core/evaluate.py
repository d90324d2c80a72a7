"""The evaluate stage: alignment of every text model with the image encoder.

Reads the embed artifacts, scores PRH mutual kNN (clamp, L2, best over layer pairs), with a
95% bootstrap interval over eval samples, and writes scores.json, table.md, alignment.png.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq
from safetensors.torch import load_model

from .features import checkpoint_text_features, eval_captions, load_features
from .metrics import alignment
from .models import load_checkpoint
from .report import alignment_plot, alignment_table
from .retrieval import retrieval, split_halves

if TYPE_CHECKING:
    from .config import EvaluateConfig, ModelConfig


def rotation_fit(text: np.ndarray, image: np.ndarray, seed: int = 0) -> dict[str, float]:
    """The theorem's "one rotation": an orthogonal Procrustes map text -> image fitted on a
    random half of the eval pairs; retrieval R@1/R@5 both ways and the normalised residual
    on the other half (each image has one caption here)."""
    fit, held = split_halves(len(text), seed)
    ids = np.arange(len(text))
    return retrieval(text[fit], image[fit], text[held], image[held], ids[held], ids[held], kind="procrustes")


def model_scores(out: Path) -> dict[str, dict]:
    """Each text model's scores in an evaluate artifact (scores.json) under the names every
    model shares: mutual_knn and its 95% interval, the best layer pair, text->image and
    image->text R@1 and the held-out residual of the rotation, the fraction of the ceiling
    (the world), the chance level; `per_layer`: each text layer's best score over image layers."""
    s = json.loads((Path(out) / "scores.json").read_text())
    scores = {}
    for m, r in s["models"].items():
        rot = r.get("procrustes", {})
        metrics = {
            "mutual_knn": r["mutual_knn"],
            "mutual_knn_ci_low": r["ci95"][0],
            "mutual_knn_ci_high": r["ci95"][1],
            "best_layer": r["layer_a"],
            "best_image_layer": r["layer_b"],
            "r_at_1_t2i": rot.get("t2i_R@1"),
            "r_at_1_i2t": rot.get("i2t_R@1"),
            "residual": rot.get("heldout_residual"),
            "fraction_of_ceiling": r.get("fraction_of_ceiling"),
            "chance": s["chance"],
            **{f"mutual_knn_{n}": v for n, v in r.get("subsets", {}).items()},
        }
        scores[m] = {
            "metrics": {k: v for k, v in metrics.items() if v is not None},
            "per_layer": [max(row) for row in r["per_layer"]],
        }
    return scores


def run_evaluate(
    embeds: dict[str, Path],
    cfg: EvaluateConfig,
    out: Path,
    labels: dict[str, str] | None = None,
    views: dict[str, str] | None = None,
    ceiling_dir: Path | None = None,
    references_dir: Path | None = None,
) -> dict:
    """Score every text model against the image model; with a ceiling artifact (the synthetic
    world), each score also as a fraction of the learned ceiling (ceiling.py); with a
    references artifact (real data), the reference rows beside them (realdata/references.py).
    Where the image side defines subsets (the concept set's dog classes), each model is also
    scored on each subset's items alone, at its best layer pair."""
    from .realdata.evalset import subset_rows

    ids = {m: pq.read_table(d / "ids.parquet")["image_id"].to_pylist() for m, d in embeds.items()}
    ref = ids[cfg.image_model]
    for m, i in ids.items():
        if i != ref:
            raise ValueError(f"embed:{m} and embed:{cfg.image_model} cover different eval images")
    image = load_features(embeds[cfg.image_model] / "features.npz")
    subsets = subset_rows(embeds[cfg.image_model], ref, cfg.k)
    scores = {}
    for m in cfg.text_models:
        text = load_features(embeds[m] / "features.npz")
        s = alignment(
            text, image, k=cfg.k, clamp_q=cfg.clamp_quantile, clamp=cfg.clamp, layers=cfg.layers, n_boot=cfg.bootstrap
        )
        scores[m] = {
            **s.as_dict(),
            "per_layer": s.per_layer,
            "procrustes": rotation_fit(text[s.layer_a], image[s.layer_b]),
        }
        if subsets:
            scores[m]["subsets"] = {
                n: alignment(
                    [text[s.layer_a][r]],
                    [image[s.layer_b][r]],
                    k=cfg.k,
                    clamp_q=cfg.clamp_quantile,
                    clamp=cfg.clamp,
                    n_boot=0,
                ).score
                for n, r in subsets.items()
            }
    chance = cfg.k / (len(ref) - 1)
    ceilings = {}
    if ceiling_dir is not None:
        oracles = json.loads((ceiling_dir / "ceiling.json").read_text())["oracles"]
        ceilings = {name: o["mutual_knn"] for name, o in oracles.items() if o.get("mutual_knn") is not None}
        if "learned" in ceilings:
            for s in scores.values():
                s["fraction_of_ceiling"] = s["mutual_knn"] / ceilings["learned"]
    references = {}
    if references_dir is not None:
        references = json.loads((references_dir / "references.json").read_text())["rows"]
    result = {
        "metric": "mutual_knn",
        "k": cfg.k,
        "image_model": cfg.image_model,
        "n": len(ref),
        "chance": chance,
        "models": scores,
        "ceilings": ceilings,  # oracle name -> its score; "learned" is the ceiling (ceiling.py)
        "labels": labels or {},
        "views": views or {},
    }
    if references:  # real data: row -> its score (realdata/references.py); the world's bytes unchanged
        result["references"] = references
    (out / "scores.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(alignment_table(result))
    alignment_plot(result, out / "alignment.png")
    fractions = {
        f"fraction_of_ceiling_{m}": s["fraction_of_ceiling"] for m, s in scores.items() if "fraction_of_ceiling" in s
    }
    return (
        {f"mutual_knn_{m}": s["mutual_knn"] for m, s in scores.items()}
        | fractions
        | {f"ceiling_{name}": v for name, v in ceilings.items()}
        | {"chance": chance, "n": len(ref)}
    )


def run_curve(
    model_cfg: ModelConfig,
    train_dir: Path,
    ingest_dir: Path,
    image_embed_dir: Path,
    cfg: EvaluateConfig,
    out: Path,
    batch_size: int = 256,
) -> dict:
    """Alignment along one run: the model's eval-caption features at every saved snapshot
    (and the final weights) scored against the image features, as in `run_evaluate` but with
    no bootstrap (the curve's spread comes from seeds). Writes curve.json."""
    ids, texts = eval_captions(ingest_dir)
    if ids != pq.read_table(image_embed_dir / "ids.parquet")["image_id"].to_pylist():
        raise ValueError(f"{ingest_dir} and {image_embed_dir} cover different eval images")
    image = load_features(image_embed_dir / "features.npz")
    model = load_checkpoint(train_dir, model_cfg)
    weights = sorted((train_dir / "snapshots").glob("step_*.safetensors")) if (train_dir / "snapshots").is_dir() else []
    points = []
    for steps, path in [
        *((int(p.stem.split("_")[1]), p) for p in weights),
        (model_cfg.total_steps, train_dir / "model.safetensors"),
    ]:
        load_model(model, str(path))
        s = alignment(
            checkpoint_text_features(model.eval(), train_dir, texts, batch_size),
            image,
            k=cfg.k,
            clamp_q=cfg.clamp_quantile,
            clamp=cfg.clamp,
            layers=cfg.layers,
            n_boot=0,
        )
        points.append(
            {
                "steps": steps,
                "samples": steps * model_cfg.batch_size,
                "mutual_knn": s.score,
                "layer_a": s.layer_a,
                "layer_b": s.layer_b,
            }
        )
    texts_per_sample = model_cfg.n_views if model_cfg.views in ("good", "documents") else 1
    curve = {
        "kind": model_cfg.kind,
        "views": model_cfg.views,
        "batch_size": model_cfg.batch_size,
        "texts_per_sample": texts_per_sample,
        "n": len(ids),
        "points": points,
    }
    (out / "curve.json").write_text(json.dumps(curve, indent=1))
    return {"points": len(points), "final_mutual_knn": points[-1]["mutual_knn"]}
