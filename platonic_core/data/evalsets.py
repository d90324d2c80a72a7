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


def load_prh(source: str = "minhuh/prh", revision: str | None = "wit_1024", split: str = "train",
             caption_index: int = 0) -> EvalSet:
    """The PRH evaluation sets (`image`: PIL, `text`: list of captions). `source` is a hub
    dataset id (revision pinned) or a local Parquet file/folder in the same format."""
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
    captions, ids = [], []
    for r, texts in enumerate(ds["text"]):
        if isinstance(texts, str):
            texts = [texts]
        if not texts or len(texts) <= caption_index or not str(texts[caption_index]).strip():
            raise EvalSetError(f"{source}: row {r}: field 'text' has no caption {caption_index}")
        captions.append(str(texts[caption_index]))
        ids.append(f"{r:06d}")
    return EvalSet(name, ids, captions, list(ids), lambda i: ds[int(i)]["image"])


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
    return EvalSet(f"{json_path.stem}:{split}", ids, captions, owner, lambda i: _open(paths[i]))


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
    return EvalSet(f"{json_path.stem}", ids, [str(a["caption"]).strip() for a in anns],
                   [str(a["image_id"]) for a in anns], lambda i: _open(paths[i]))
