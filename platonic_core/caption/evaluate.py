"""Captions for the held-out images through every map, with bounds (the `caption_eval` stage).

For each seed, the decoder of that seed reads, per eval image:
- `<kind>@<N>` / `pairfree`: the image's features through that seed's map;
- `text_embedding`: a true caption's own text embedding (no image): what the decoder makes of
  the very thing it was trained to read, a test of the decoder, not a bound on the captioner
  (a map can land nearer the other references than that one caption does). It is scored
  against the image's other references, never the caption it decoded from;
- `floor_shuffled`: the paired map on all pairs applied to another image's features (a
  random permutation of the eval images): what an uninformative image feature gets.
Beside each of these, `<name>/nearest`: no decoder, the training caption whose text embedding
is nearest (cosine) to the same conditioning vector (the retrieval baseline DeCap and CapDec
report): the decoder earns its place only where it beats it.
And once (no decoder): `frequent`, the most frequent decoder training caption, for every image
(a floor); `human`, the conditioning caption itself, another true caption of the image, scored
against the others (inter-annotator agreement: the bound, what any captioner could hope for
on this metric).

Beside the caption metrics, each map's own quality on the eval images: R@1 of an image's
mapped feature retrieving its caption's text embedding among all eval captions (cosine;
chance 1/N), and their mean cosine; on the world, each caption's attribute precision and
recall per kind (attributes.py).

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

from ..retrieval import recall_at_k, unit_rows
from .attributes import attribute_scores, read_attributes
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


def nearest_captions(query: np.ndarray, bank: np.ndarray, texts: list[str], chunk: int = 1024) -> list[str]:
    """For each row of `query` (N, D), the text of `bank` (M, D; row k embeds texts[k]) with the
    highest cosine (ties: the first row)."""
    if len(bank) != len(texts):
        raise ValueError(f"{len(bank)} embeddings for {len(texts)} texts")
    return _nearest(query, unit_rows(bank), texts, chunk)


def _nearest(query: np.ndarray, unit_bank: np.ndarray, texts: list[str], chunk: int = 1024) -> list[str]:
    """`nearest_captions` on a bank already scaled to unit rows (M, D): the bank is scaled
    once per evaluation, not once per conditioning."""
    out = []
    for s in range(0, len(query), chunk):
        q = unit_rows(query[s : s + chunk])  # (n, D)
        out += [texts[k] for k in (q @ unit_bank.T).argmax(1)]
    return out


def map_quality(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """R@1 of each mapped image feature retrieving its own caption's embedding (cosine), and
    the mean cosine between them. pred, truth: (N, D), row k = image k / its caption."""
    ids = np.arange(len(pred))
    pn, tn = unit_rows(pred), unit_rows(truth)
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
    attributes = data_dir / "attributes.parquet"
    truth = read_attributes(attributes) if attributes.is_file() else None
    # a caption decoded from a true caption's embedding is never scored against that caption
    other_refs = {}
    for i, c in zip(ids, cond_texts, strict=True):
        others = [r for r in refs[i] if _norm(r) != _norm(c)]
        other_refs[i] = others or refs[i]
    systems: dict[str, dict[str, str]] = {}
    quality: dict[str, dict[str, float]] = {}
    system_refs: dict[str, dict[str, list[str]]] = {}
    if len(text["decoder_texts"]) != len(decoder_texts):
        raise ValueError(f"{len(text['decoder_texts'])} embeddings for {len(decoder_texts)} texts")
    bank = unit_rows(text["decoder_texts"])  # (M, D): the retrieval baseline's gallery
    near_text = _nearest(text["conditions"], bank, decoder_texts)  # the same for every seed
    for seed in seeds:
        dec, tok = load_decoder(decoder_dir / f"seed_{seed}", device)
        conds = {name: m.predict(image["eval"]) for name, m in maps[seed].items()}  # (N, Dt) each
        conds["text_embedding"] = text["conditions"]
        floor = next((n for n in maps[seed] if n.endswith("@all")), next(iter(maps[seed])))
        perm = np.random.default_rng(seed).permutation(len(ids))
        conds["floor_shuffled"] = maps[seed][floor].predict(image["eval"][perm])
        for name, c in conds.items():
            caps = generate(dec, tok, c, cfg.max_new_tokens, cfg.num_beams, cfg.batch_size)
            near = near_text if name == "text_embedding" else _nearest(c, bank, decoder_texts)
            key = f"{seed}|{name}"
            systems[key] = dict(zip(ids, caps, strict=True))
            systems[f"{key}/nearest"] = dict(zip(ids, near, strict=True))
            if name == "text_embedding":
                system_refs[key] = system_refs[f"{key}/nearest"] = other_refs
            else:
                quality[key] = quality[f"{key}/nearest"] = map_quality(c, text["conditions"])
            if log is not None:
                log(f"seed {seed} {name}: {caps[0]!r}")
    frequent = frequent_caption(decoder_texts)
    systems["frequent"] = dict.fromkeys(ids, frequent)
    systems["human"] = dict(zip(ids, cond_texts, strict=True))
    system_refs["human"] = other_refs
    scores = score_systems(refs, systems, list(cfg.metrics), system_refs)
    per_seed: dict[str, dict[str, dict]] = {}
    for key, s in scores.items():
        seed, _, name = key.rpartition("|") if "|" in key else ("", "", key)
        attrs = attribute_scores(systems[key], truth) if truth is not None else {}
        per_seed.setdefault(seed or "all", {})[name] = {**s, **quality.get(key, {}), **attrs}
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
