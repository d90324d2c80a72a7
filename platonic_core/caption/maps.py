"""The maps from image features into a text encoder's space (the `caption_map` stage).

Per seed: a paired map of each kind (`lstsq`: ridge least squares; `procrustes`: orthogonal,
retrieval.py's `fit_map`) on N random image-caption pairs for each N of the recipe, and the
pair-free rotation (pairfree.py) on unpaired halves. Each is a `LinearMap`, saved as arrays
in `maps.npz` (keys `<seed>/<name>/<field>`), with its diagnostics in `maps.json`.

A map's name is its method: `lstsq@100`, `procrustes@all`, `pairfree`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..retrieval import LinearMap, fit_map, residual
from .pairfree import fit_pairfree

if TYPE_CHECKING:
    from ..config import CaptionMapsConfig

FIELDS = ("weight", "x_mean", "y_mean", "x_scale", "y_scale", "width")


def map_names(cfg: CaptionMapsConfig) -> list[str]:
    return [f"{k}@{n}" for k in cfg.paired for n in cfg.n_pairs] + (["pairfree"] if cfg.pairfree else [])


def fit_maps(
    image: np.ndarray, text: np.ndarray, cfg: CaptionMapsConfig, seed: int
) -> tuple[dict[str, LinearMap], dict[str, dict]]:
    """Every map of one seed. image, text: (N, Di), (N, Dt) features of the same N pairs (row
    k of each is one image and its caption)."""
    if len(image) != len(text):
        raise ValueError(f"{len(image)} pair images but {len(text)} pair captions")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(image))  # nested subsets: the N = 100 pairs include the N = 10
    maps, info = {}, {}
    for n in cfg.n_pairs:
        k = len(image) if n == "all" else min(int(n), len(image))
        rows = np.sort(order[:k])
        for kind in cfg.paired:
            m = fit_map(image[rows], text[rows], kind, cfg.ridge)
            maps[f"{kind}@{n}"] = m
            info[f"{kind}@{n}"] = {"pairs": int(k), "train_residual": residual(m, image[rows], text[rows])}
    if cfg.pairfree is not None:
        pf = cfg.pairfree
        # disjoint: images of one half of the scenes, captions of the other half
        half = len(image) // 2
        xi, yi = (order[:half], order[half:]) if pf.disjoint else (order, rng.permutation(len(text)))
        # the pairs only grade the result afterwards (maps.json), never steer it
        m, stats = fit_pairfree(image[xi], text[yi], pf, seed, check_pairs=(image, text))
        maps["pairfree"] = m
        info["pairfree"] = {"pairs": 0, "images": int(len(xi)), "captions": int(len(yi)), **stats}
    return maps, info


def save_maps(maps: dict[int, dict[str, LinearMap]], info: dict, out: Path) -> None:
    arrays = {}
    for seed, ms in maps.items():
        for name, m in ms.items():
            for f in FIELDS:
                arrays[f"{seed}/{name}/{f}"] = np.asarray(getattr(m, f))
            arrays[f"{seed}/{name}/kind"] = np.asarray(m.kind)
    np.savez(out / "maps.npz", **arrays)
    (out / "maps.json").write_text(json.dumps(info, indent=1))


def load_maps(folder: Path) -> dict[int, dict[str, LinearMap]]:
    out: dict[int, dict[str, LinearMap]] = {}
    with np.load(folder / "maps.npz", allow_pickle=False) as z:
        keys = {k.rsplit("/", 1)[0] for k in z.files}
        for key in sorted(keys):
            seed, name = key.split("/", 1)
            a = {f: z[f"{key}/{f}"] for f in (*FIELDS, "kind")}
            out.setdefault(int(seed), {})[name] = LinearMap(
                str(a["kind"]),
                a["weight"],
                a["x_mean"],
                a["y_mean"],
                float(a["x_scale"]),
                float(a["y_scale"]),
                int(a["width"]),
            )
    return out
