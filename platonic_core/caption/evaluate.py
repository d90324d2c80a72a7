"""Captions for the held-out images through every map, with bounds (the `caption_eval` stage).

For each seed, the decoder of that seed reads, per eval image:
- `<kind>@<N>` / `pairfree`: the image's features through that seed's map;
- `ceiling`: a true caption's own text embedding (no image): the most the decoder can do.
  It is scored against the image's other references, never the caption it decoded from;
- `floor_shuffled`: the paired map on all pairs applied to another image's features (a
  random permutation of the eval images): what an uninformative image feature gets.
And once (no decoder): `frequent`, the most frequent decoder training caption, for every image
(a floor); `human`, the conditioning caption itself, another true caption of the image, scored
like the ceiling (inter-annotator agreement: what any captioner could hope for on this metric).

Beside the caption metrics, each map's own quality on the eval images: R@1 of an image's
mapped feature retrieving its caption's text embedding among all eval captions (cosine;
chance 1/N), and their mean cosine.

Writes generations.parquet (seed, method, image_id, caption) and scores.json.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..retrieval import recall_at_k
from .data import read_references, read_texts
from .decoder import generate, load_decoder
from .encode import load_roles
from .maps import load_maps
from .score import score_systems

if TYPE_CHECKING:
    from ..config import CaptionEvalConfig


def _norm(s: str) -> str:
    return " ".join(s.lower().replace(".", " ").replace(",", " ").split())


def frequent_caption(texts: list[str]) -> str:
    """The most frequent text (ties: the alphabetically first)."""
    counts = Counter(texts)
    return min(counts, key=lambda t: (-counts[t], t))


def map_quality(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """R@1 of each mapped image feature retrieving its own caption's embedding (cosine), and
    the mean cosine between them. pred, truth: (N, D), row k = image k / its caption."""
    ids = np.arange(len(pred))
    pn = pred / np.maximum(np.linalg.norm(pred, axis=1, keepdims=True), 1e-12)
    tn = truth / np.maximum(np.linalg.norm(truth, axis=1, keepdims=True), 1e-12)
    return {"map_R@1": recall_at_k(pred, truth, ids, ids, ks=(1,))[1], "map_cosine": float((pn * tn).sum(1).mean())}


def run_caption_eval(
    data_dir: Path,
    text_dir: Path,
    image_dir: Path,
    decoder_dir: Path,
    maps_dir: Path,
    cfg: CaptionEvalConfig,
    seeds: list[int],
    out: Path,
    device: str = "auto",
    log=None,
) -> dict:
    refs = read_references(data_dir)
    ids, cond_texts = read_texts(data_dir, "conditions")
    roles = pq.read_table(data_dir / "images.parquet", columns=["image_id", "role"]).to_pydict()
    if [i for i, r in zip(roles["image_id"], roles["role"], strict=True) if r == "eval"] != ids:
        raise ValueError(f"{data_dir}: eval images and conditioning captions are not in one order")
    text, image = load_roles(text_dir), load_roles(image_dir)
    maps = load_maps(maps_dir)
    _, decoder_texts = read_texts(data_dir, "decoder_texts")
    # the ceiling is never scored against the caption it decodes from
    ceiling_refs = {}
    for i, c in zip(ids, cond_texts, strict=True):
        others = [r for r in refs[i] if _norm(r) != _norm(c)]
        ceiling_refs[i] = others or refs[i]
    systems: dict[str, dict[str, str]] = {}
    quality: dict[str, dict[str, float]] = {}
    system_refs: dict[str, dict[str, list[str]]] = {}
    for seed in seeds:
        dec, tok = load_decoder(decoder_dir / f"seed_{seed}", device)
        conds = {name: m.predict(image["eval"]) for name, m in maps[seed].items()}  # (N, Dt) each
        conds["ceiling"] = text["conditions"]
        floor = next((n for n in maps[seed] if n.endswith("@all")), next(iter(maps[seed])))
        perm = np.random.default_rng(seed).permutation(len(ids))
        conds["floor_shuffled"] = maps[seed][floor].predict(image["eval"][perm])
        for name, c in conds.items():
            caps = generate(dec, tok, c, cfg.max_new_tokens, cfg.num_beams, cfg.batch_size)
            key = f"{seed}|{name}"
            systems[key] = dict(zip(ids, caps, strict=True))
            if name == "ceiling":
                system_refs[key] = ceiling_refs
            else:
                quality[key] = map_quality(c, text["conditions"])
            if log is not None:
                log(f"seed {seed} {name}: {caps[0]!r}")
    frequent = frequent_caption(decoder_texts)
    systems["frequent"] = dict.fromkeys(ids, frequent)
    systems["human"] = dict(zip(ids, cond_texts, strict=True))
    system_refs["human"] = ceiling_refs
    scores = score_systems(refs, systems, list(cfg.metrics), system_refs)
    per_seed: dict[str, dict[str, dict]] = {}
    for key, s in scores.items():
        seed, _, name = key.rpartition("|") if "|" in key else ("", "", key)
        per_seed.setdefault(seed or "all", {})[name] = {**s, **quality.get(key, {})}
    rows = [
        (k.split("|")[0] if "|" in k else "", k.split("|")[-1], i, c)
        for k, caps in systems.items()
        for i, c in caps.items()
    ]
    pq.write_table(
        pa.table(
            {
                "seed": [r[0] for r in rows],
                "method": [r[1] for r in rows],
                "image_id": [r[2] for r in rows],
                "caption": [r[3] for r in rows],
            }
        ),
        out / "generations.parquet",
    )
    result = {
        "n_images": len(ids),
        "references_per_image": float(np.mean([len(refs[i]) for i in ids])),
        "metrics": list(cfg.metrics),
        "seeds": seeds,
        "floor_map": floor,
        "frequent_caption": frequent,
        "scores": per_seed,
    }
    (out / "scores.json").write_text(json.dumps(result, indent=1))
    return result
