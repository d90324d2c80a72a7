"""The captioner's data, materialised once (the `caption_data` stage), so every later stage
and its digest depend on these files and not on the world's grammar or an image folder.

    pairs.parquet          image_id, text          the map's image-caption pairs (one caption per image)
    decoder_texts.parquet  image_id, text          the decoder's training captions (text only)
    references.parquet     image_id, ref_index, text   every reference caption of each eval image
    conditions.parquet     image_id, text          per eval image, a true caption whose text embedding is decoded
    images.parquet         image_id, role, render_row, path   where each image lives (role: pairs | eval)
    attributes.parquet     image_id, shape, colour, ...   each eval scene's true attributes (world only:
                           caption/attributes.py)

Images stay where they are (the world's renders.npy by row, or files by path): a real
training split is tens of thousands of photos. `load_images` reads them batch by batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from ..config import CaptionDataConfig, EvalSetConfig, WorldConfig


class CaptionDataError(ValueError):
    """Bad captioning input; the message names the file or field."""


def _write(out: Path, name: str, cols: dict[str, list]) -> None:
    pq.write_table(pa.table(cols), out / name)


def _write_caption_data(
    out: Path,
    pairs: list[tuple[str, str]],
    decoder_texts: list[tuple[str, str]],
    refs: list[tuple[str, int, str]],
    conds: list[tuple[str, str]],
    images: dict[str, list],
) -> dict[str, int]:
    """The five files every captioning source writes (ids with texts; `images`: its columns)."""
    _write(out, "pairs.parquet", {"image_id": [p[0] for p in pairs], "text": [p[1] for p in pairs]})
    _write(
        out, "decoder_texts.parquet", {"image_id": [d[0] for d in decoder_texts], "text": [d[1] for d in decoder_texts]}
    )
    _write(
        out,
        "references.parquet",
        {
            "image_id": [r[0] for r in refs],
            "ref_index": pa.array([r[1] for r in refs], pa.int32()),
            "text": [r[2] for r in refs],
        },
    )
    _write(out, "conditions.parquet", {"image_id": [c[0] for c in conds], "text": [c[1] for c in conds]})
    _write(out, "images.parquet", images)
    n_eval = sum(r == "eval" for r in images["role"])
    return {"pairs": len(pairs), "decoder_texts": len(decoder_texts), "eval_images": n_eval, "references": len(refs)}


def world_data(
    world_dir: Path, dedup_dir: Path, world_cfg: WorldConfig, cfg: CaptionDataConfig, out: Path
) -> dict[str, int]:
    """The synthetic world as captioning data (see CaptionDataConfig): map pairs and decoder
    texts from the training scenes, several references per eval scene."""
    from ..world import load_scenes, more_captions
    from ..world.captions import scene_attributes
    from .attributes import write_attributes

    scenes = load_scenes(world_dir)
    t = pq.read_table(dedup_dir / "texts.parquet", columns=["image_id", "text_id", "source_kind", "text"]).to_pylist()
    kinds = set(cfg.decoder_kinds)
    texts = sorted((r["image_id"], r["text_id"], r["text"]) for r in t if r["source_kind"] in kinds)
    if not texts:
        raise CaptionDataError(f"{dedup_dir / 'texts.parquet'}: no training texts of kinds {sorted(kinds)}")
    first: dict[str, str] = {}
    for image_id, _, text in texts:
        first.setdefault(image_id, text)
    train = sorted(i for i in first if scenes[i][2] == "train")
    ev = pq.read_table(world_dir / "eval_captions.parquet").to_pydict()
    eval_caption = dict(zip(ev["scene_id"], ev["text"], strict=True))
    eval_ids = sorted(eval_caption)[: cfg.eval_limit]
    refs, conds = [], []
    for i in eval_ids:
        index, scene, _ = scenes[i]
        # the world's eval caption, then more annotators; one more whose text embedding is decoded
        more = more_captions(scene, index, world_cfg, cfg.references)
        refs += [(i, r, x) for r, x in enumerate([eval_caption[i], *more[:-1]])]
        conds.append((i, more[-1]))
    ids = train + eval_ids
    images = {
        "image_id": ids,
        "role": ["pairs"] * len(train) + ["eval"] * len(eval_ids),
        "render_row": pa.array([scenes[i][0] for i in ids], pa.int32()),  # a scene's index is its render row
        "path": [""] * len(ids),
    }
    write_attributes({i: scene_attributes(scenes[i][1], world_cfg.grid) for i in eval_ids}, out / "attributes.parquet")
    return _write_caption_data(out, [(i, first[i]) for i in train], [(r[0], r[2]) for r in texts], refs, conds, images)


def _karpathy(s: EvalSetConfig, default_split: str, field: str):
    from ..data.evalsets import EvalSetError, load_karpathy

    try:
        ev = load_karpathy(s.source, s.image_root or ".", s.split or default_split)
    except EvalSetError as e:
        raise CaptionDataError(f"data.{field}: {e}") from None
    ids, caps = ev.captions_by_image(s.limit)
    return ids, caps, (ev.image_paths or [])[: len(ids)]


def karpathy_data(cfg: CaptionDataConfig, out: Path) -> dict[str, int]:
    """Karpathy JSONs as captioning data: map pairs (each `pairs` image with its first
    caption), decoder texts (every caption of `texts`), eval images with all their captions as
    references; the decoder also reads each eval image's first caption's text embedding (and
    is scored against the others: see caption/evaluate.py)."""
    p_ids, p_caps, p_paths = _karpathy(cfg.pairs, "train", "pairs")
    t_ids, t_caps, _ = _karpathy(cfg.texts, "train", "texts")
    e_ids, e_caps, e_paths = _karpathy(cfg.eval, "test", "eval")
    if cfg.eval_limit is not None:
        e_ids, e_paths = e_ids[: cfg.eval_limit], e_paths[: cfg.eval_limit]
    # image ids of two sets may collide (both COCO): prefix them by role
    pid = [f"pairs/{i}" for i in p_ids]
    eid = [f"eval/{i}" for i in e_ids]
    refs = [(f"eval/{i}", r, x) for i in e_ids for r, x in enumerate(e_caps[i][: cfg.references])]
    dec = [(f"texts/{i}", x) for i in t_ids for x in t_caps[i]]
    images = {
        "image_id": pid + eid,
        "role": ["pairs"] * len(pid) + ["eval"] * len(eid),
        "render_row": pa.array([-1] * (len(pid) + len(eid)), pa.int32()),
        "path": [str(p) for p in p_paths] + [str(p) for p in e_paths],
    }
    pairs = [(f"pairs/{i}", p_caps[i][0]) for i in p_ids]
    conds = [(f"eval/{i}", e_caps[i][0]) for i in e_ids]
    return _write_caption_data(out, pairs, dec, refs, conds, images)


def karpathy_sources(cfg: CaptionDataConfig) -> dict[str, tuple[str, str, dict[str, int]]]:
    """Each Karpathy JSON as an external input: name -> (path, digest, counts). The digest
    covers the JSON's bytes and, for sets whose images are read, every image file's name
    and size in the split (a changed photo of the same size is not seen: its features are)."""
    import hashlib
    import json

    from ..artifacts import file_digest

    out = {}
    for field in ("pairs", "texts", "eval"):
        s = getattr(cfg, field)
        path = Path(s.source)
        if not path.is_file():
            raise CaptionDataError(f"data.{field}.source: no such file: {path}")
        h = hashlib.sha256(file_digest(path).encode())
        n = 0
        if field != "texts":
            try:
                images = json.loads(path.read_text()).get("images", [])
            except (OSError, json.JSONDecodeError) as e:
                raise CaptionDataError(f"data.{field}.source: {path}: cannot read Karpathy JSON ({e})") from None
            root = Path(s.image_root or ".")
            for im in images:
                if im.get("split") == (s.split or ("train" if field == "pairs" else "test")):
                    f = root / im.get("filepath", "") / im.get("filename", "")
                    h.update(f"{f.name}\0{f.stat().st_size if f.is_file() else -1}\n".encode())
                    n += 1
        out[field] = (str(path), h.hexdigest(), {"images_checked": n})
    return out


class LazyImages(Sequence):
    """Images of one role, loaded when sliced: uint8 (H, W, 3) arrays (world renders) or PIL
    images (files). `len` and slicing are all an encoder needs to go batch by batch."""

    def __init__(self, data_dir: Path, role: str, world_dir: Path | None = None):
        t = pq.read_table(data_dir / "images.parquet").to_pydict()
        rows = [k for k, r in enumerate(t["role"]) if r == role]
        self.ids = [t["image_id"][k] for k in rows]
        self._rows = [t["render_row"][k] for k in rows]
        self._paths = [t["path"][k] for k in rows]
        self._renders = None
        if any(r >= 0 for r in self._rows):
            if world_dir is None:
                raise CaptionDataError(f"{data_dir}: images are world renders, but no world artifact was given")
            self._renders = np.load(world_dir / "renders.npy", mmap_mode="r")

    def __len__(self) -> int:
        return len(self.ids)

    def _one(self, k: int):
        if self._rows[k] >= 0:
            return np.asarray(self._renders[self._rows[k], 0])  # the first render, as embed:image sees it
        from PIL import Image

        p = Path(self._paths[k])
        if not p.is_file():
            raise CaptionDataError(f"image file not found: {p} (image {self.ids[k]})")
        return Image.open(p).convert("RGB")

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self._one(j) for j in range(*k.indices(len(self)))]
        return self._one(k)


def read_texts(data_dir: Path, name: str) -> tuple[list[str], list[str]]:
    """(image ids, texts) of one of the data's caption files, in file order."""
    t = pq.read_table(data_dir / f"{name}.parquet", columns=["image_id", "text"]).to_pydict()
    return t["image_id"], t["text"]


def read_references(data_dir: Path) -> dict[str, list[str]]:
    """eval image id -> its reference captions, in reference order."""
    t = pl.from_arrow(pq.read_table(data_dir / "references.parquet"))
    # images in file order, each one's captions by ref_index (then text: one order even if an index repeats)
    refs = t.group_by("image_id", maintain_order=True).agg(pl.col("text").sort_by("ref_index", "text"))
    return dict(refs.iter_rows())
