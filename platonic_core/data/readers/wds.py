"""Webdataset tars: per sample key, .txt and/or .json fields; image members are recorded as
(tar, member, offset, size), never decoded (`read_image_member` reads one later).

Memory is bounded whatever a member's size: a member no text column needs (images, .npy,
.wav, ...) is never read; a text member is read up to 4 bytes per allowed character (UTF-8's
widest), so a longer one is over_long_text however it decodes, and only that prefix is kept
(its quarantine `raw`); a .json member is parsed up to `JSON_META_BYTES` plus that much per
text read from it, and a bigger one is not parsed (its texts over_long_text, its id and index
fields missing)."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from .base import (
    MISMATCH,
    OVER_LONG,
    REASON,
    REASON_FIELD,
    Batch,
    Reader,
    Shard,
    ShardError,
    TextField,
    as_text,
    id_array,
    mapped_fields,
    safe_str,
    str_or_none,
)
from .sources import open_binary

if TYPE_CHECKING:
    from ...config import IngestConfig

IMAGE_EXTS = {"jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff"}
JSON_META_BYTES = 1 << 16  # a sample's .json beyond its texts: url, sha256, sizes, exif (a few KB)
IMAGE_SCHEMA = pa.schema(
    [
        ("image_id", pa.string()),
        ("tar", pa.string()),
        ("member", pa.string()),
        ("offset", pa.int64()),
        ("size", pa.int64()),
        ("ext", pa.string()),
    ]
)


class _Prefix(bytes):
    """The first bytes of a member longer than the reader's limit for it (the rest unread)."""


# in a sample's parts: the name of the member that repeated one of the sample before it
# (`dup.txt` twice in a row). It starts a sample of its own, quarantined as a duplicate
# naming the member: folded into the first, it replaced a text that was then counted nowhere
REPEATED = "!repeated"


class WdsReader(Reader):
    """Samples are runs of tar members sharing a key (the path up to the first dot of the
    file name). Text columns: `txt` (the .txt member) and `json.<field>` (a field of the
    .json member). Image members are located, not read: (tar, member, offset, size)."""

    format = "wds"

    def __init__(self, cfg: IngestConfig):
        super().__init__(cfg)
        self.text_columns = cfg.text_columns or {"txt": "alt"}
        self.id_column = cfg.id_column  # None: the sample key; else a json field
        # the members read, each up to a limit in bytes (the .json always: texts, ids and the
        # url / sha256 provenance); any other member is only listed
        text_limit = 4 * cfg.max_text_chars  # n characters take at most 4n bytes in UTF-8
        self.limits = {c: text_limit for c in self.text_columns if not c.startswith("json.")}
        self.limits["json"] = JSON_META_BYTES + text_limit * sum(c.startswith("json.") for c in self.text_columns)

    @property
    def fields(self) -> list[TextField]:
        return mapped_fields(self.text_columns, self.cfg.index_column)

    def _rows(self, samples: list[tuple[str, dict]], shard: Shard, row0: int) -> Batch:
        ids, img_rows = [], []
        tar_name = shard.uri.rstrip("/").rsplit("/", 1)[-1]  # the file, not where it lives (shards maps it)
        json_cols = {c for c in self.text_columns if c.startswith("json.")} | (
            {self.cfg.index_column} if self.cfg.index_column else set()
        )
        texts: dict[str, list] = {c: [] for c in self.text_columns}
        bad: dict[str, list] = {c: [] for c in self.text_columns}
        over: dict[str, list] = {c: [] for c in self.text_columns}
        extra: dict[str, list] = {c: [] for c in json_cols if c not in texts}
        prov: dict[str, list] = {"member_key": [], "url": [], "sha256": [], "members": []}
        for key, parts in samples:
            meta, meta_ok = None, True
            meta_cut = isinstance(parts.get("json"), _Prefix)  # too big to parse
            if parts.get("json") is not None and not meta_cut:
                try:
                    meta = json.loads(parts["json"].decode("utf-8", "surrogateescape"))
                except (ValueError, UnicodeDecodeError):
                    meta_ok = False
            meta = meta if isinstance(meta, dict) else None
            image_id = key
            if self.id_column:
                image_id = str_or_none(meta.get(self.id_column.removeprefix("json."))) if meta else None
            ids.append(image_id)
            for c in self.text_columns:
                if c == "txt" or not c.startswith("json."):
                    raw = parts.get(c)
                    texts[c].append(raw if isinstance(raw, bytes) else None)
                    bad[c].append(False)
                    over[c].append(isinstance(raw, _Prefix))
                elif meta_cut or not meta_ok:  # its raw bytes: over long, or a mismatch if unparsable
                    texts[c].append(bytes(parts["json"]))
                    bad[c].append(not meta_cut)
                    over[c].append(meta_cut)
                else:
                    v = meta.get(c[5:]) if meta else None
                    t, m = as_text([v])
                    texts[c].append(t[0].as_py())
                    bad[c].append(m[0].as_py())
                    over[c].append(False)
            for c in extra:
                extra[c].append(str_or_none(meta.get(c[5:])) if meta else None)
            prov["member_key"].append(safe_str(key))
            prov["url"].append(str_or_none(meta.get("url")) if meta else None)
            prov["sha256"].append(str_or_none(meta.get("sha256")) if meta else None)
            prov["members"].append(safe_str(",".join(sorted(e for e in parts if not e.startswith(("@", "!"))))))
            for ext, loc in parts.items():
                if ext.startswith("@") and REPEATED not in parts:  # a repeat's image is not located
                    img_rows.append((safe_str(image_id), tar_name, safe_str(loc[0]), loc[1], loc[2], safe_str(ext[1:])))
        # a member name that is not UTF-8 (a GNU tar written in Latin-1) costs its sample, not the shard
        image_ids, not_utf8 = id_array(ids)
        cols: dict[str, pa.Array] = {
            "image_id": image_ids,
            "source_row": pa.array(range(row0, row0 + len(samples)), pa.int64()),
        }
        repeated = [parts.get(REPEATED) for _, parts in samples]
        if any(not_utf8) or any(r is not None for r in repeated):
            id_field = self.id_column or "image_id"
            reasons = [
                "duplicate_key" if r is not None else "invalid_utf8" if b else None
                for r, b in zip(repeated, not_utf8, strict=True)
            ]
            where = [
                safe_str(r) if r is not None else id_field if b else None
                for r, b in zip(repeated, not_utf8, strict=True)
            ]
            cols[REASON] = pa.array(reasons, pa.string())
            cols[REASON_FIELD] = pa.array(where, pa.string())
        for c in self.text_columns:
            cols[c] = pa.array(texts[c], pa.binary())
            cols[MISMATCH + c] = pa.array(bad[c], pa.bool_())
            cols[OVER_LONG + c] = pa.array(over[c], pa.bool_())
        for c, v in extra.items():
            cols[c] = pa.array(v, pa.string())
        for c, v in prov.items():
            cols[c] = pa.array(v, pa.string())
        images = pa.Table.from_pylist(
            [dict(zip(IMAGE_SCHEMA.names, r, strict=True)) for r in img_rows], schema=IMAGE_SCHEMA
        )
        return Batch(pa.table(cols), images)

    def batches(self, shard: Shard) -> Iterator[Batch]:
        samples: list[tuple[str, dict]] = []
        row = 0
        cur_key, cur = None, {}
        with open_binary(shard.uri) as fh:
            try:
                tf = tarfile.open(fileobj=fh, mode="r|*")
            except tarfile.TarError as e:
                raise ShardError(f"{shard.uri}: not a readable tar ({e})") from None
            with tf:
                try:
                    for m in tf:
                        if not m.isfile():
                            continue
                        d, _, base = m.name.rpartition("/")
                        stem, dot, ext = base.partition(".")
                        if not dot:
                            continue  # a member without an extension is no part of a sample
                        key = f"{d}/{stem}" if d else stem
                        ext = ext.lower()
                        slot = "@" + ext if ext in IMAGE_EXTS else ext
                        if key != cur_key or slot in cur:
                            if cur_key is not None:
                                samples.append((cur_key, cur))
                            # a member the sample already has starts a sample of its own
                            cur_key, cur = key, ({REPEATED: m.name} if key == cur_key else {})
                        if ext in IMAGE_EXTS:  # located, not read: the recaptioner opens it later
                            cur[slot] = (m.name, m.offset_data, m.size)
                        elif ext in self.limits:  # read up to its limit, one byte more tells
                            limit = self.limits[ext]
                            f = tf.extractfile(m)
                            data = f.read(limit + 1) if f else b""
                            cur[ext] = _Prefix(data[:limit]) if len(data) > limit else data
                        else:  # no text column needs it: listed in `members`, never read
                            cur[ext] = None
                        if len(samples) >= self.batch_rows:
                            yield self._rows(samples, shard, row)
                            row += len(samples)
                            samples = []
                except (tarfile.TarError, EOFError, OSError, zlib_error()) as e:
                    raise ShardError(f"{shard.uri}: truncated or corrupt tar ({type(e).__name__}: {e})") from None
        if cur_key is not None:
            samples.append((cur_key, cur))
        if samples:
            yield self._rows(samples, shard, row)


def zlib_error() -> type[Exception]:
    import zlib

    return zlib.error


def read_image_member(tar_uri: str, offset: int, size: int, member: str | None = None) -> bytes:
    """The bytes of an image the wds reader located: a seek and a read in a plain tar; in a
    compressed tar (offsets are in the decompressed stream) the member is streamed to."""
    if tar_uri.lower().endswith((".gz", ".tgz")):
        with open_binary(tar_uri) as f, tarfile.open(fileobj=f, mode="r|*") as tf:
            for m in tf:
                if m.offset_data == offset and (member is None or m.name == member):
                    return tf.extractfile(m).read()
        raise ShardError(f"{tar_uri}: no member at offset {offset}")
    with open_binary(tar_uri) as f:
        f.seek(offset)
        return f.read(size)
