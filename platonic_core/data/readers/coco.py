"""COCO / Flickr caption JSON: Karpathy dataset_{coco,flickr30k}.json, or COCO
captions_*.json; several captions per image, read with the streaming JSON parser."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from .base import (
    MISMATCH,
    REASON,
    REASON_FIELD,
    Batch,
    Reader,
    Shard,
    ShardError,
    TextField,
    as_text,
    id_array,
    safe_str,
    str_or_none,
)
from .jsonstream import json_items, top_level_keys


def karpathy_image_id(im: dict) -> str:
    """The image id of a Karpathy entry: COCO id, else Flickr's imgid, else the file name."""
    return str(im.get("cocoid", im.get("imgid", im.get("filename"))))


class CocoReader(Reader):
    """One input row per caption. Karpathy layout: `images[].sentences[].raw` (text id from
    `sentid`, else its position), provenance filepath/filename/split. COCO captions layout:
    `annotations[].{image_id, id, caption}`, provenance the image's file_name (an annotation
    naming an unknown image is quarantined)."""

    format = "coco"

    @property
    def fields(self) -> list[TextField]:
        return [TextField("caption", "caption", 0, "caption_id")]

    def batches(self, shard: Shard) -> Iterator[Batch]:
        keys = top_level_keys(shard.uri, self.cfg.max_record_bytes)
        if "annotations" in keys:
            yield from self._coco(shard)
        elif "images" in keys:
            yield from self._karpathy(shard)
        else:
            raise ShardError(
                f"{shard.uri}: neither Karpathy ('images[].sentences') nor COCO captions "
                f"('annotations') layout; top-level keys {sorted(keys)}"
            )

    def _emit(self, buf: dict[str, list], row0: int) -> Batch:
        texts, bad = as_text(buf.pop("caption"))
        n = len(texts)
        cols = {
            "image_id": None,  # below: checked for lone surrogates
            "source_row": pa.array(range(row0, row0 + n), pa.int64()),
            "caption": texts,
            MISMATCH + "caption": bad,
        }
        unknown = buf.pop("__unknown_image")
        image_id, not_utf8 = id_array(buf.pop("image_id"))  # a "\\ud800" id costs its row, not the shard
        cols["image_id"] = image_id
        reason = [
            "invalid_utf8" if b else "unknown_image" if u else None for u, b in zip(unknown, not_utf8, strict=True)
        ]
        cols[REASON] = pa.array(reason, pa.string())
        cols[REASON_FIELD] = pa.array(["image_id" if r else None for r in reason], pa.string())
        for k, v in buf.items():
            cols[k] = pa.array(v, pa.string())
        return Batch(pa.table(cols))

    def _batches(self, rows: Iterator[dict], cols: tuple[str, ...]) -> Iterator[Batch]:
        """Input rows (one dict per caption) -> batches of `batch_rows`; row numbers run on."""
        buf: dict[str, list] = {c: [] for c in cols}
        row = 0
        for rec in rows:
            for c in cols:
                buf[c].append(rec[c])
            if len(buf["caption"]) >= self.batch_rows:
                n = len(buf["caption"])
                yield self._emit(buf, row)
                row += n
                buf = {c: [] for c in cols}
        if buf["caption"]:
            yield self._emit(buf, row)

    def _karpathy(self, shard: Shard) -> Iterator[Batch]:
        cols = ("image_id", "caption", "caption_id", "filepath", "filename", "split", "json_path", "__unknown_image")
        return self._batches(self._karpathy_rows(shard), cols)

    def _karpathy_rows(self, shard: Shard) -> Iterator[dict]:
        for r, (_k, im) in enumerate(json_items(shard.uri, {"images"}, self.cfg.max_record_bytes)):
            if not isinstance(im, dict):
                im = {}
            sents = im.get("sentences")
            iid = karpathy_image_id(im) if any(k in im for k in ("cocoid", "imgid", "filename")) else None
            entries = list(enumerate(sents)) if isinstance(sents, list) and sents else [(None, None)]
            for s, sent in entries:
                if s is None:  # no sentences: one input row, quarantined as a missing field
                    caption, caption_id = None, "none"
                elif isinstance(sent, dict):
                    caption, caption_id = sent.get("raw"), safe_str(str(sent.get("sentid", s)))
                else:
                    caption, caption_id = sent, str(s)
                yield {
                    "image_id": iid,
                    "caption": caption,
                    "caption_id": caption_id,
                    "filepath": str_or_none(im.get("filepath")),
                    "filename": str_or_none(im.get("filename")),
                    "split": str_or_none(im.get("split")),
                    "json_path": f"images[{r}].sentences[{s}]" if s is not None else f"images[{r}]",
                    "__unknown_image": False,
                }

    def _coco(self, shard: Shard) -> Iterator[Batch]:
        files: dict[str, str | None] = {}
        for _k, im in json_items(shard.uri, {"images"}, self.cfg.max_record_bytes):  # pass 1: the image table (small)
            if isinstance(im, dict) and "id" in im:
                files[str(im["id"])] = str_or_none(im.get("file_name"))

        def rows() -> Iterator[dict]:
            annotations = json_items(shard.uri, {"annotations"}, self.cfg.max_record_bytes)
            for r, (_k, a) in enumerate(annotations):  # pass 2: streamed
                a = a if isinstance(a, dict) else {}
                iid = None if a.get("image_id") in (None, "") else str(a["image_id"])  # id_array checks it
                yield {
                    "image_id": iid,
                    "caption": a.get("caption"),
                    "caption_id": str_or_none(a.get("id")) or str(r),
                    "file_name": files.get(iid) if iid else None,
                    "json_path": f"annotations[{r}]",
                    "__unknown_image": iid is not None and iid not in files,
                }

        return self._batches(rows(), ("image_id", "caption", "caption_id", "file_name", "json_path", "__unknown_image"))
