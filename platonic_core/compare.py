"""The paper's comparison table: text models x vision encoders x eval sets.

Three steps, each a cached stage in `flows/compare.py`:
1. `materialize_evalset`: an eval set -> `captions.parquet` (one caption per image, the
   first, PRH protocol) + `images.parquet` (PNG bytes), so later steps and their digests do
   not depend on the hub or on image folders;
2. `embed_model`: one model's per-layer features of one eval set (`features.npz`), keyed by
   model id, revision, pooling and the eval set's digest;
3. `compare_grid`: mutual kNN (PRH: clamp, L2, best layer pair) for every
   (text model, vision model, eval set), with 95% bootstrap intervals -> scores.json, table.md.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .data.evalsets import load_coco_captions, load_karpathy, load_prh
from .features import image_layer_features, load_features, save_features, text_layer_features
from .metrics import alignment
from .retrieval import retrieval

if TYPE_CHECKING:
    from .config import CompareConfig, EvalSetConfig, FeatureModelConfig


def materialize_evalset(cfg: EvalSetConfig, out: Path) -> dict[str, int]:
    if cfg.kind == "prh":
        ev = load_prh(cfg.source, cfg.revision, split=cfg.split or "train")
    elif cfg.kind == "karpathy":
        ev = load_karpathy(cfg.source, cfg.image_root or ".", cfg.split or "test")
    else:
        ev = load_coco_captions(cfg.source, cfg.image_root or ".")
    ids, rows = ev.captions_by_image(cfg.limit)
    n = len(ids)
    # every caption, grouped by image in image order; caption_index 0 = the one for alignment
    cap_img = [i for i in ev.image_ids[:n] for _ in rows[i]]
    cap_idx = [j for i in ev.image_ids[:n] for j in range(len(rows[i]))]
    caps = [c for i in ev.image_ids[:n] for c in rows[i]]
    pngs = []
    for i in range(n):
        buf = io.BytesIO()
        ev.image(i).save(buf, format="PNG")
        pngs.append(buf.getvalue())
    pq.write_table(
        pa.table({"image_id": cap_img, "caption_index": pa.array(cap_idx, pa.int32()), "caption": caps}),
        out / "captions.parquet",
    )
    pq.write_table(pa.table({"image_id": ev.image_ids[:n], "png": pa.array(pngs, pa.binary())}), out / "images.parquet")
    return {"images": n, "captions": len(caps)}


def _images(evalset_dir: Path) -> list:
    from PIL import Image

    return [
        Image.open(io.BytesIO(b)).convert("RGB")
        for b in pq.read_table(evalset_dir / "images.parquet")["png"].to_pylist()
    ]


def load_trained(path: Path):
    """A `train` artifact folder -> (model, its ModelConfig)."""
    from .artifacts import Manifest
    from .config import ModelConfig
    from .models import load_checkpoint

    manifest = Manifest.read(path)
    section = next(v for k, v in manifest.config.items() if k.startswith("train.models."))
    cfg = ModelConfig.model_validate(section)
    return load_checkpoint(path, cfg), cfg


def embed_model(cfg: FeatureModelConfig, modality: str, evalset_dir: Path, out: Path) -> dict[str, int]:
    """Per-layer features of one eval set with one model (`modality`: text or vision)."""
    from .hf_features import hf_image_layer_features, hf_text_layer_features
    from .tokenizer import load_tokenizer

    if modality == "text":
        texts = pq.read_table(evalset_dir / "captions.parquet")["caption"].to_pylist()
        if cfg.source == "hf":
            layers = hf_text_layer_features(
                cfg.id, texts, cfg.pooling, cfg.batch_size, cfg.revision, cfg.dtype, cfg.trust_remote_code
            )
        else:
            model, mcfg = load_trained(Path(cfg.id))
            if mcfg.kind == "image_jepa":
                raise ValueError(f"{cfg.id}: an image model cannot embed texts")
            max_len = json.loads((Path(cfg.id) / "model.json").read_text())["max_len"]
            layers = text_layer_features(
                model, load_tokenizer(Path(cfg.id) / "tokenizer.json"), texts, max_len, cfg.batch_size
            )
    else:
        images = _images(evalset_dir)
        if cfg.source == "hf":
            layers = hf_image_layer_features(
                cfg.id, images, cfg.batch_size, cfg.revision, cfg.dtype, cfg.trust_remote_code
            )
        else:
            model, mcfg = load_trained(Path(cfg.id))
            if mcfg.kind != "image_jepa":
                raise ValueError(f"{cfg.id}: a {mcfg.kind} cannot embed images")
            size = json.loads((Path(cfg.id) / "model.json").read_text())["image_size"]
            arr = np.stack([np.asarray(im.resize((size, size))) for im in images])
            layers = image_layer_features(model, arr, cfg.batch_size)
    save_features(layers, out / "features.npz")
    return {"samples": int(layers[0].shape[0]), "layers": len(layers)}


def _caption_rows(evalset_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    t = pq.read_table(evalset_dir / "captions.parquet", columns=["image_id", "caption_index"]).to_pydict()
    return np.asarray(t["image_id"]), np.asarray(t["caption_index"])


def compare_grid(
    features: dict[tuple[str, str], Path], cfg: CompareConfig, out: Path, evalsets: dict[str, Path]
) -> dict:
    """features[(model, eval set)] -> folder with features.npz; mutual kNN of every
    text x vision pair per eval set (first caption of each image), and retrieval through one
    fitted map (Flickr protocol) for the `retrieval` entries, at the best mutual-kNN layer pair."""
    loaded: dict[tuple[str, str], list[np.ndarray]] = {}

    def feats(model: str, ev: str) -> list[np.ndarray]:  # each features file read once
        if (model, ev) not in loaded:
            loaded[(model, ev)] = load_features(features[(model, ev)] / "features.npz")
        return loaded[(model, ev)]

    scores: dict[str, dict[str, dict[str, dict]]] = {}
    for ev in cfg.eval_sets:
        _, first = _caption_rows(evalsets[ev])
        for t in cfg.text_models:
            text = [a[first == 0] for a in feats(t, ev)]
            for v in cfg.vision_models:
                s = alignment(
                    text,
                    feats(v, ev),
                    k=cfg.k,
                    clamp_q=cfg.clamp_quantile,
                    clamp=cfg.clamp,
                    layers=cfg.layers,
                    n_boot=cfg.bootstrap,
                )
                scores.setdefault(ev, {}).setdefault(t, {})[v] = s.as_dict()
    retrieval_scores = {}
    for r in cfg.retrieval:
        fit_owner, _ = _caption_rows(evalsets[r.fit])
        ev_owner, _ = _caption_rows(evalsets[r.eval])
        fit_images = pq.read_table(evalsets[r.fit] / "images.parquet", columns=["image_id"])["image_id"].to_pylist()
        ev_images = np.asarray(
            pq.read_table(evalsets[r.eval] / "images.parquet", columns=["image_id"])["image_id"].to_pylist()
        )
        pos = {i: k for k, i in enumerate(fit_images)}
        for t in cfg.text_models:
            for v in cfg.vision_models:
                s = scores[r.eval][t][v]
                tx_fit, im_fit = feats(t, r.fit)[s["layer_a"]], feats(v, r.fit)[s["layer_b"]]
                tx_ev, im_ev = feats(t, r.eval)[s["layer_a"]], feats(v, r.eval)[s["layer_b"]]
                paired = im_fit[[pos[i] for i in fit_owner]]  # every caption with its image
                for kind in r.maps:
                    res = retrieval(tx_fit, paired, tx_ev, im_ev, ev_owner, ev_images, kind=kind)
                    retrieval_scores.setdefault(f"{r.fit}->{r.eval}", {}).setdefault(t, {}).setdefault(v, {})[kind] = (
                        res
                    )
    result = {"metric": "mutual_knn", "k": cfg.k, "scores": scores, "retrieval": retrieval_scores}
    (out / "scores.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(compare_table(result, list(cfg.vision_models)))
    return result


def compare_table(result: dict, vision: list[str]) -> str:
    """Rows: text models; columns: (eval set, vision model); cells: mutual kNN [CI]."""
    sets = list(result["scores"])
    head = "| text model | " + " | ".join(f"{e}: {v}" for e in sets for v in vision) + " |"
    lines = [head, "|---|" + "---|" * (len(sets) * len(vision))]
    texts = list(next(iter(result["scores"].values())))
    for t in texts:
        cells = []
        for e in sets:
            for v in vision:
                s = result["scores"][e][t][v]
                cells.append(f"{s['mutual_knn']:.3f} [{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}]")
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    for name, grid in result.get("retrieval", {}).items():
        lines += [
            "",
            f"Retrieval {name} (one map fitted on the first set): R@1 / R@5 text→image, image→text",
            "",
            "| text model | vision | map | t→i R@1 | t→i R@5 | i→t R@1 | i→t R@5 |",
            "|---|---|---|---|---|---|---|",
        ]
        for t, vs in grid.items():
            for v, maps in vs.items():
                for kind, r in maps.items():
                    lines.append(
                        f"| {t} | {v} | {kind} | {r['t2i_R@1']:.3f} | {r['t2i_R@5']:.3f} "
                        f"| {r['i2t_R@1']:.3f} | {r['i2t_R@5']:.3f} |"
                    )
    return "\n".join(lines) + "\n"
