"""Evaluation sets with images and captions: WIT-1024 (PRH), COCO and Flickr30k (Karpathy
splits), COCO caption files.

Every loader returns an `EvalSet`: images (loaded lazily from their source) and captions,
each caption naming its image, so alignment (one caption per image) and retrieval (several
captions per image, Flickr protocol) read the same object.

    wit = load_prh()                                   # minhuh/prh @ wit_1024, split train
    wit = load_prh("/data/prh_wit_1024/")              # the same rows from local Parquet
    coco = load_karpathy("dataset_coco.json", "/data/coco/images", split="test")
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class EvalSetError(ValueError):
    pass


@dataclass
class EvalSet:
    name: str
    image_ids: list[str]
    captions: list[str]
    caption_image: list[str]  # image id of each caption
    _load_image: Callable[[int], object] = field(repr=False, default=None)
    image_paths: list[str] | None = field(repr=False, default=None)  # image files, when the set has them

    def captions_by_image(self, limit: int | None = None) -> tuple[list[str], dict[str, list[str]]]:
        """The first `limit` images (all when None) and each one's captions, in caption order."""
        ids = self.image_ids if limit is None else self.image_ids[:limit]
        keep = set(ids)
        caps: dict[str, list[str]] = {}
        for c, i in zip(self.captions, self.caption_image, strict=True):
            if i in keep:
                caps.setdefault(i, []).append(c)
        return ids, caps

    def __post_init__(self) -> None:
        known = set(self.image_ids)
        missing = [c for c in self.caption_image if c not in known]
        if missing:
            raise EvalSetError(f"{self.name}: captions refer to unknown images, e.g. {missing[0]!r}")

    def image(self, i: int):
        """The i-th image as PIL (RGB)."""
        return self._load_image(i).convert("RGB")

    def first_captions(self) -> list[str]:
        """One caption per image (the first), in image order: the PRH alignment protocol."""
        first: dict[str, str] = {}
        for c, i in zip(self.captions, self.caption_image, strict=True):
            first.setdefault(i, c)
        return [first[i] for i in self.image_ids]


def load_prh(
    source: str = "minhuh/prh",
    revision: str | None = "wit_1024",
    split: str = "train",
    caption_index: int = 0,
    all_captions: bool = False,
) -> EvalSet:
    """The PRH evaluation sets (`image`: PIL, `text`: list of captions). `source` is a hub
    dataset id (revision pinned) or a local Parquet file/folder in the same format.
    Caption `caption_index` of each image (alignment), or with `all_captions` every caption
    of its list (the contamination audit checks them all)."""
    import datasets

    p = Path(source)
    if p.exists():
        files = sorted(str(f) for f in (p.rglob("*.parquet") if p.is_dir() else [p]))
        if not files:
            raise EvalSetError(f"{source}: no Parquet files")
        ds = datasets.load_dataset("parquet", data_files=files, split="train")
        name = f"prh:{p.name}"
    else:
        ds = datasets.load_dataset(source, revision=revision, split=split)
        name = f"prh:{revision or 'main'}"
    for col in ("image", "text"):
        if col not in ds.column_names:
            raise EvalSetError(f"{source}: missing field {col!r} (has {ds.column_names})")
    if not isinstance(ds.features["image"], datasets.Image):
        ds = ds.cast_column("image", datasets.Image())
    captions, ids, owner = [], [], []
    for r, texts in enumerate(ds["text"]):
        if isinstance(texts, str):
            texts = [texts]
        if not texts or len(texts) <= caption_index or not str(texts[caption_index]).strip():
            raise EvalSetError(f"{source}: row {r}: field 'text' has no caption {caption_index}")
        ids.append(f"{r:06d}")
        chosen = [str(t) for t in texts if str(t).strip()] if all_captions else [str(texts[caption_index])]
        captions += chosen
        owner += [ids[-1]] * len(chosen)
    return EvalSet(name, ids, captions, owner, lambda i: ds[int(i)]["image"])


def _open(path: Path):
    from PIL import Image

    if not path.is_file():
        raise EvalSetError(f"image file not found: {path}")
    return Image.open(path)


def load_karpathy(json_path: str | Path, image_root: str | Path, split: str = "test") -> EvalSet:
    """Karpathy's `dataset_coco.json` / `dataset_flickr30k.json`: images with `filename`
    (and `filepath` for COCO), `split`, `sentences[].raw`. Several captions per image."""
    json_path, root = Path(json_path), Path(image_root)
    try:
        data = json.loads(json_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise EvalSetError(f"{json_path}: cannot read Karpathy JSON ({e})") from None
    if "images" not in data:
        raise EvalSetError(f"{json_path}: missing field 'images'")
    ids, paths, captions, owner = [], [], [], []
    for r, im in enumerate(data["images"]):
        for f in ("filename", "split", "sentences"):
            if f not in im:
                raise EvalSetError(f"{json_path}: images[{r}]: missing field {f!r}")
        if im["split"] != split:
            continue
        iid = str(im.get("cocoid", im.get("imgid", im["filename"])))
        ids.append(iid)
        paths.append(root / im.get("filepath", "") / im["filename"])
        for s, sent in enumerate(im["sentences"]):
            if not str(sent.get("raw", "")).strip():
                raise EvalSetError(f"{json_path}: images[{r}].sentences[{s}]: empty 'raw'")
            captions.append(str(sent["raw"]).strip())
            owner.append(iid)
    if not ids:
        raise EvalSetError(f"{json_path}: no images in split {split!r}")
    return EvalSet(
        f"{json_path.stem}:{split}", ids, captions, owner, lambda i: _open(paths[i]), [str(p) for p in paths]
    )


def load_coco_captions(json_path: str | Path, image_root: str | Path) -> EvalSet:
    """COCO `captions_*.json`: `images[].{id, file_name}`, `annotations[].{image_id, caption}`."""
    json_path, root = Path(json_path), Path(image_root)
    data = json.loads(json_path.read_text())
    for f in ("images", "annotations"):
        if f not in data:
            raise EvalSetError(f"{json_path}: missing field {f!r}")
    ids = [str(im["id"]) for im in data["images"]]
    paths = [root / im["file_name"] for im in data["images"]]
    order = np.argsort([int(a.get("id", k)) for k, a in enumerate(data["annotations"])], kind="stable")
    anns = [data["annotations"][k] for k in order]
    return EvalSet(
        f"{json_path.stem}",
        ids,
        [str(a["caption"]).strip() for a in anns],
        [str(a["image_id"]) for a in anns],
        lambda i: _open(paths[i]),
    )


def _no_image(i: int):
    raise EvalSetError("this eval set has captions only (no images)")


def load_world_eval(path: str | Path) -> EvalSet:
    """The synthetic world's eval split: a `world` artifact (`eval_captions.parquet`:
    scene_id, text), an `ingest` artifact (`eval.parquet` in the text schema), or either file.
    Captions only: the renders stay in the world artifact."""
    import pyarrow.parquet as pq

    p = Path(path)
    if p.is_dir():
        p = next((p / f for f in ("eval.parquet", "eval_captions.parquet") if (p / f).is_file()), p / "eval.parquet")
    if not p.is_file():
        raise EvalSetError(f"{path}: no world eval split (eval.parquet or eval_captions.parquet)")
    t = pq.read_table(p)
    id_col = "image_id" if "image_id" in t.column_names else "scene_id"
    if id_col not in t.column_names or "text" not in t.column_names:
        raise EvalSetError(f"{p}: expected columns scene_id|image_id and text (has {t.column_names})")
    ids = [str(x) for x in t[id_col].to_pylist()]
    return EvalSet(
        f"world:{p.parent.name}", list(dict.fromkeys(ids)), [str(x) for x in t["text"].to_pylist()], ids, _no_image
    )


def load_caption_file(path: str | Path) -> EvalSet:
    """Any caption file: `.txt` (one caption per line), `.jsonl` / `.json` (a list of
    objects) / `.parquet` / `.csv` with a `caption` or `text` field and optionally `image_id`.
    Without `image_id` every caption is its own image. Captions only."""
    import pyarrow.parquet as pq

    p = Path(path)
    if not p.is_file():
        raise EvalSetError(f"{path}: no such caption file")
    suffix = p.suffix.lower()
    try:
        if suffix == ".txt":
            rows = [{"caption": line} for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
        elif suffix == ".jsonl":
            rows = [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
        elif suffix == ".json":
            rows = json.loads(p.read_text(encoding="utf-8"))
        elif suffix == ".parquet":
            rows = pq.read_table(p).to_pylist()
        elif suffix == ".csv":
            import csv

            with open(p, newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
        else:
            raise EvalSetError(f"{p}: unknown caption file type {suffix!r} (.txt, .jsonl, .json, .parquet, .csv)")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EvalSetError(f"{p}: cannot read ({e})") from None
    if not isinstance(rows, list) or not rows:
        raise EvalSetError(f"{p}: no captions")
    captions, owner = [], []
    for r, row in enumerate(rows):
        if not isinstance(row, dict):
            raise EvalSetError(f"{p}: row {r} is not an object")
        text = row.get("caption", row.get("text"))
        if text is None or not str(text).strip():
            raise EvalSetError(f"{p}: row {r}: no 'caption' or 'text'")
        captions.append(str(text).strip())
        owner.append(str(row["image_id"]) if row.get("image_id") not in (None, "") else f"{r:07d}")
    return EvalSet(f"captions:{p.stem}", list(dict.fromkeys(owner)), captions, owner, _no_image)


EVAL_SPECS = {
    "wit_1024": "WIT-1024 of the PRH paper (minhuh/prh @ wit_1024); `prh:SOURCE` for a hub id or local Parquet",
    "coco_karpathy:PATH": "COCO Karpathy test split (dataset_coco.json)",
    "flickr_karpathy:PATH": "Flickr30k Karpathy test split (dataset_flickr30k.json)",
    "coco_captions:PATH": "COCO captions_*.json",
    "world:PATH": "the synthetic world's eval split (a world or ingest artifact folder)",
    "captions:PATH": "any caption file (.txt, .jsonl, .json, .parquet, .csv)",
}


def load_eval_spec(spec: str) -> tuple[str, EvalSet]:
    """`KIND[:PATH]` -> (a short name for reports, the EvalSet) through the loaders above.
    A Karpathy PATH may end in `@split` (default test)."""
    kind, _, arg = spec.partition(":")
    if kind == "wit_1024" and not arg:
        return "wit_1024", load_prh(all_captions=True)
    if kind == "prh":
        return f"prh:{Path(arg).name or arg}", load_prh(arg or "minhuh/prh", all_captions=True)
    if not arg:
        raise EvalSetError(f"eval set {spec!r}: expected one of {', '.join(EVAL_SPECS)}")
    if kind in ("coco_karpathy", "flickr_karpathy"):
        path, _, split = arg.rpartition("@") if "@" in Path(arg).name else (arg, "", "test")
        return f"{kind}:{split}", load_karpathy(path, Path(path).parent, split=split)
    if kind == "coco_captions":
        return f"coco_captions:{Path(arg).stem}", load_coco_captions(arg, Path(arg).parent)
    if kind == "world":
        return "world", load_world_eval(arg)
    if kind == "captions":
        return f"captions:{Path(arg).stem}", load_caption_file(arg)
    raise EvalSetError(f"eval set {spec!r}: unknown kind {kind!r}; expected one of {', '.join(EVAL_SPECS)}")
