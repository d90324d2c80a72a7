"""Image bytes as the ingest stage addresses them, for recaptioning.

- the synthetic world: `images.parquet` rows point at `renders.npy#<render_row>` of the
  world artifact; the captioner gets render 0 of the scene, as a PNG;
- webdataset corpora: `images/shard=<id>/data.parquet` locates each image member (tar,
  offset, size) and `shards.parquet` where the tar is now; the bytes are read with one seek.
Other corpus formats (recap parquet, coco, jsonl) carry no images at ingest: recaptioning
them is an error that says so.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

MIME = {"jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp", "gif": "image/gif"}


def png_bytes(pixels: np.ndarray) -> bytes:
    """(H, W, 3) uint8 -> PNG bytes."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


class WorldImages:
    """World scene id -> PNG of its first render (what the ingest's images.parquet names)."""

    def __init__(self, ingest_dir: Path, world_dir: Path):
        t = pq.read_table(Path(ingest_dir) / "images.parquet", columns=["image_id", "render_row"]).to_pydict()
        self.row = dict(zip(t["image_id"], t["render_row"], strict=True))
        self.renders = np.load(Path(world_dir) / "renders.npy", mmap_mode="r")  # (scenes, renders, H, W, 3) uint8

    def __call__(self, image_id: str) -> tuple[bytes, str]:
        return png_bytes(self.renders[self.row[image_id], 0]), "image/png"


class WdsImages:
    """Image id -> the bytes of its member in the shard's tar, located at ingest."""

    def __init__(self, ingest_dir: Path, shard: str):
        from ..data.readers import read_image_member

        self._read = read_image_member
        part = Path(ingest_dir) / "images" / f"shard={shard}" / "data.parquet"
        shards = pq.read_table(Path(ingest_dir) / "shards.parquet", columns=["shard", "uri"]).to_pydict()
        self.uri = dict(zip(shards["shard"], shards["uri"], strict=True))[shard]
        t = pq.read_table(part).to_pylist() if part.is_file() else []
        self.where = {r["image_id"]: r for r in t}

    def __call__(self, image_id: str) -> tuple[bytes, str]:
        r = self.where[image_id]  # KeyError: the sample had no image member
        return self._read(self.uri, r["offset"], r["size"], r["member"]), MIME.get(
            (r["ext"] or "").lower(), "image/jpeg"
        )


def input_shards(ingest_dir: Path) -> list[tuple[str, Path]]:
    """(shard id, texts Parquet) of an ingest artifact: the world's one corpus file, or a
    real corpus's Hive partitions in shard order."""
    ingest_dir = Path(ingest_dir)
    if (ingest_dir / "corpus.parquet").is_file():
        return [("corpus", ingest_dir / "corpus.parquet")]
    parts = sorted((ingest_dir / "texts").glob("shard=*/data.parquet"))
    return [(p.parent.name.removeprefix("shard="), p) for p in parts]


def image_source(ingest_dir: Path, world_dir: Path | None, shard: str) -> Callable[[str], tuple[bytes, str]] | None:
    """The image source of one input shard, or None when the ingest located no images."""
    ingest_dir = Path(ingest_dir)
    if (ingest_dir / "corpus.parquet").is_file():
        return WorldImages(ingest_dir, world_dir) if world_dir is not None else None
    if (ingest_dir / "images").is_dir() and (ingest_dir / "images" / f"shard={shard}").is_dir():
        return WdsImages(ingest_dir, shard)
    return None
