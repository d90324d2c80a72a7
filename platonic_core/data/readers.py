"""Readers for real corpora: each turns one shard (a file) into a stream of Arrow batches.

A reader knows one source format; the normaliser (`corpus.py`) knows the rules. Every batch
holds, per input row: `image_id`, `source_row` (the row's ordinal in the shard), the text
columns named by the reader's `fields`, per-row index columns where a text's index comes from
the data (caption ids), `__mismatch__<col>` flags where a value had the wrong type, and
provenance columns (everything else). Texts may be `binary` (undecoded bytes): the
normaliser checks UTF-8 itself, so an invalid byte quarantines a text, never a shard.

    recap  Recap-DataComp-1B parquet: org_caption -> alt, re_caption (+ the diverse top-k
           recaption when present) -> recap; key = image id; url, sha256, scores provenance
    wds    webdataset tars: per sample key, .txt and/or .json fields; image members are
           recorded as (tar, member, offset, size), never decoded
    coco   Karpathy dataset_{coco,flickr30k}.json, or COCO captions_*.json: several
           captions per image, read with a streaming JSON parser (bounded memory)
    jsonl  JSON lines or CSV/TSV with a configurable column mapping

Sources are local files, folders or globs, fsspec URIs (`s3://`, `memory://`, ...), or a
Hugging Face dataset `hf://datasets/<org>/<name>[@<revision>]` fetched with
`huggingface_hub.snapshot_download` (revision pinned, `allow_patterns` for a subset).
"""

from __future__ import annotations

import codecs
import csv
import fnmatch
import glob
import hashlib
import io
import json
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

MISMATCH = "__mismatch__"
REASON = "__reason__"  # a row-level reason found by the reader (e.g. unknown_image), else null
REASON_FIELD = "__reason_field__"


class SourceError(ValueError):
    """A source that cannot be read at all (no such file, no shards, bad URI). One line."""


class ShardError(RuntimeError):
    """One shard could not be read (truncated, corrupt): the message names the file."""


@dataclass(frozen=True)
class TextField:
    """One text per input row: `column` holds it, `kind` is its source kind. Its text id is
    `<image_id>:<kind>:<index>`, the index a constant or, for captions, a per-row column."""

    column: str
    kind: str
    index: int = 0
    index_column: str | None = None
    optional: bool = False  # a shard without this column has no such texts (older Recap files)


@dataclass(frozen=True)
class Shard:
    """One input file: its partition name in the output, where it is, its content digest."""

    id: str
    uri: str
    digest: str


@dataclass
class Batch:
    rows: pa.Table
    images: pa.Table | None = None  # webdataset: image members addressable by offset


# ---- sources -> shards ----------------------------------------------------------------------

EXTENSIONS = {
    "recap": (".parquet",),
    "wds": (".tar", ".tar.gz", ".tgz"),
    "coco": (".json",),
    "jsonl": (".jsonl", ".ndjson", ".json", ".csv", ".tsv"),
}
HUB_PATTERNS = {"recap": ["data/train_data/*.parquet"], "wds": ["*.tar"], "coco": ["*.json"], "jsonl": ["*.jsonl"]}


def _fs(uri: str):
    import fsspec

    return fsspec.core.url_to_fs(uri)


def open_binary(uri: str):
    """A binary file object for a local path or an fsspec URI."""
    if "://" not in uri:
        return open(uri, "rb")
    fs, path = _fs(uri)
    return fs.open(path, "rb")


def _stem(name: str, fmt: str) -> str:
    base = name.rsplit("/", 1)[-1]
    for ext in sorted(EXTENSIONS[fmt], key=len, reverse=True):
        if base.lower().endswith(ext):
            base = base[: -len(ext)]
            break
    return re.sub(r"[^A-Za-z0-9._-]", "_", base) or "shard"


def _digest(uri: str) -> str:
    """Content digest of a shard: sha256 of its bytes. A Hugging Face cache blob is named by
    its sha256 already, so hub shards are not re-read."""
    if "://" not in uri:
        real = Path(uri).resolve()
        if real.parent.name == "blobs" and re.fullmatch(r"[0-9a-f]{64}", real.name):
            return real.name
    h = hashlib.sha256()
    with open_binary(uri) as f:
        while b := f.read(1 << 22):
            h.update(b)
    return h.hexdigest()


def _hub_snapshot(spec: str, revision: str | None, patterns: list[str]) -> Path:
    """`hf://datasets/<org>/<name>[@rev]` -> a local snapshot with the files matching
    `patterns` (downloaded once into the Hugging Face cache, then read from there)."""
    from huggingface_hub import snapshot_download

    rest = spec.removeprefix("hf://").removeprefix("datasets/")
    repo, _, rev = rest.partition("@")
    if repo.count("/") != 1:
        raise SourceError(f"{spec}: expected hf://datasets/<org>/<name>[@<revision>]")
    try:
        return Path(snapshot_download(repo, repo_type="dataset", revision=rev or revision, allow_patterns=patterns))
    except Exception as e:  # offline, not found, gated: one line that names the repo
        raise SourceError(f"{spec}: cannot fetch from the Hugging Face hub "
                          f"(revision {rev or revision or 'main'}, allow_patterns {patterns}): "
                          f"{type(e).__name__}: {e}") from None


def resolve_sources(paths: list[str], fmt: str, revision: str | None = None,
                    allow_patterns: list[str] | None = None) -> list[Shard]:
    """Every shard the sources name, in a stable order, with ids and content digests.

    A folder contributes its files with the format's extensions (recursively), a glob its
    matches; `allow_patterns` (fnmatch on the path inside a folder or hub repo) keeps a subset."""
    if fmt not in EXTENSIONS:
        raise SourceError(f"unknown format {fmt!r} (formats: {', '.join(EXTENSIONS)})")
    if not paths:
        raise SourceError("no sources given")
    exts = EXTENSIONS[fmt]

    def want(rel: str) -> bool:
        return rel.lower().endswith(exts) and (not allow_patterns or any(fnmatch.fnmatch(rel, p) for p in allow_patterns))

    uris: list[str] = []
    for src in paths:
        if src.startswith("hf://"):
            root = _hub_snapshot(src, revision, allow_patterns or HUB_PATTERNS[fmt])
            found = sorted(str(p) for p in root.rglob("*") if p.is_file() and want(str(p.relative_to(root))))
        elif "://" in src:
            fs, path = _fs(src)
            if any(c in path for c in "*?["):
                found = sorted(fs.glob(path))
            elif fs.isdir(path):
                found = sorted(p for p in fs.find(path) if want(p[len(path.rstrip("/")) + 1:]))
            elif fs.exists(path):
                found = [path]
            else:
                raise SourceError(f"{src}: no such file")
            found = [fs.unstrip_protocol(p) for p in found]
        else:
            p = Path(src)
            if any(c in src for c in "*?["):
                found = sorted(glob.glob(src, recursive=True))
            elif p.is_dir():
                found = sorted(str(f) for f in p.rglob("*") if f.is_file() and want(str(f.relative_to(p))))
            elif p.is_file():
                found = [str(p)]
            else:
                raise SourceError(f"{src}: no such file or folder")
        if not found:
            raise SourceError(f"{src}: no {fmt} shards ({'/'.join(exts)} files"
                              f"{' matching ' + str(allow_patterns) if allow_patterns else ''})")
        uris.extend(u for u in found if u not in uris)
    shards, taken = [], set()
    for u in uris:
        sid = _stem(u, fmt)
        if sid in taken:  # same file name in two folders
            sid = f"{sid}-{hashlib.sha1(u.encode()).hexdigest()[:8]}"
        taken.add(sid)
        shards.append(Shard(sid, u, _digest(u)))
    return shards


# ---- helpers --------------------------------------------------------------------------------


def _as_text(values: list[Any]) -> tuple[pa.Array, pa.Array]:
    """Python values -> (binary texts, mismatch flags). Strings are kept as their UTF-8 bytes
    (lone surrogates from `surrogateescape` become the original invalid bytes); a value of
    another type keeps its JSON form and is flagged as a schema mismatch."""
    out, bad = [], []
    for v in values:
        if v is None or isinstance(v, str):
            out.append(None if v is None else v.encode("utf-8", "surrogateescape"))
            bad.append(False)
        else:
            out.append(json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogateescape"))
            bad.append(True)
    return pa.array(out, pa.binary()), pa.array(bad, pa.bool_())


def _str_or_none(v: Any) -> str | None:
    return None if v is None or v == "" else str(v)


class Reader:
    """One source format. Subclasses set `fields` and implement `batches(shard)`."""

    format = ""

    def __init__(self, cfg):
        self.cfg = cfg
        self.batch_rows = cfg.batch_rows

    @property
    def fields(self) -> list[TextField]:
        raise NotImplementedError

    def batches(self, shard: Shard) -> Iterator[Batch]:
        raise NotImplementedError

    def describe(self) -> dict:
        """What the reader does, for the shard cache key: same description, same output."""
        return {"format": self.format, "fields": [f.__dict__ for f in self.fields],
                "id_column": getattr(self, "id_column", None)}


def _mapped_fields(text_columns: dict[str, str], index_column: str | None, optional: set[str] = frozenset()) -> list[TextField]:
    """column -> kind mapping as fields; the n-th column of a kind has index n."""
    seen: dict[str, int] = {}
    out = []
    for col, kind in text_columns.items():
        out.append(TextField(col, kind, seen.get(kind, 0), index_column, col in optional))
        seen[kind] = seen.get(kind, 0) + 1
    return out


# ---- Recap-DataComp parquet ------------------------------------------------------------------

RECAP_TEXTS = {"org_caption": "alt", "re_caption": "recap", "re_caption_condition_diverse_topk": "recap"}
RECAP_OPTIONAL = {"re_caption_condition_diverse_topk"}


class RecapReader(Reader):
    format = "recap"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.id_column = cfg.id_column or "key"
        self.text_columns = cfg.text_columns or RECAP_TEXTS

    @property
    def fields(self) -> list[TextField]:
        optional = RECAP_OPTIONAL if not self.cfg.text_columns else set()
        return _mapped_fields(self.text_columns, self.cfg.index_column, optional)

    def batches(self, shard: Shard) -> Iterator[Batch]:
        with open_binary(shard.uri) as fh:
            # no pre-buffering: with it Arrow keeps every column chunk it read until the file
            # is closed (RSS grows with the shard); plain buffered reads stay bounded
            pf = pq.ParquetFile(fh, pre_buffer=False, buffer_size=1 << 20)
            schema = pf.schema_arrow
            names = set(schema.names)
            row = 0
            for rb in pf.iter_batches(batch_size=self.batch_rows):
                n = rb.num_rows
                cols: dict[str, pa.Array] = {}
                if self.id_column in names:
                    ids = rb.column(self.id_column)
                    if pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type) or pa.types.is_integer(ids.type):
                        cols["image_id"] = ids.cast(pa.string())
                    else:
                        cols["image_id"] = pa.nulls(n, pa.string())
                        cols[MISMATCH + "image_id"] = pa.array(np.ones(n, bool))
                else:  # the file has no id column at all
                    cols["image_id"] = pa.nulls(n, pa.string())
                    cols[MISMATCH + "image_id"] = pa.array(np.ones(n, bool))
                cols["source_row"] = pa.array(np.arange(row, row + n, dtype=np.int64))
                for f in self.fields:
                    if f.column not in names:
                        if not f.optional:
                            cols[f.column] = pa.nulls(n, pa.string())
                            cols[MISMATCH + f.column] = pa.array(np.ones(n, bool))
                        continue
                    v = rb.column(f.column)
                    if pa.types.is_large_string(v.type) or pa.types.is_large_binary(v.type):
                        v = v.cast(pa.string() if pa.types.is_large_string(v.type) else pa.binary())
                    if not (pa.types.is_string(v.type) or pa.types.is_binary(v.type)):
                        try:
                            v = v.cast(pa.string())
                        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                            v = pa.array([None if x is None else json.dumps(x, default=str) for x in v.to_pylist()], pa.string())
                        cols[MISMATCH + f.column] = pc.is_valid(v)
                    cols[f.column] = v
                text_cols = {f.column for f in self.fields}
                for name in schema.names:
                    if name not in text_cols and name not in cols:
                        cols[name] = rb.column(name)
                row += n
                yield Batch(pa.table(cols))


# ---- webdataset tars -------------------------------------------------------------------------

IMAGE_EXTS = {"jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff"}
IMAGE_SCHEMA = pa.schema([("image_id", pa.string()), ("tar", pa.string()), ("member", pa.string()),
                          ("offset", pa.int64()), ("size", pa.int64()), ("ext", pa.string())])


class WdsReader(Reader):
    """Samples are runs of tar members sharing a key (the path up to the first dot of the
    file name). Text columns: `txt` (the .txt member) and `json.<field>` (a field of the
    .json member). Image members are located, not read: (tar, member, offset, size)."""

    format = "wds"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.text_columns = cfg.text_columns or {"txt": "alt"}
        self.id_column = cfg.id_column  # None: the sample key; else a json field

    @property
    def fields(self) -> list[TextField]:
        return _mapped_fields(self.text_columns, self.cfg.index_column)

    def _rows(self, samples: list[tuple[str, dict]], shard: Shard, row0: int) -> Batch:
        ids, img_rows = [], []
        tar_name = shard.uri.rstrip("/").rsplit("/", 1)[-1]  # the file, not where it lives (shards maps it)
        json_cols = {c for c in self.text_columns if c.startswith("json.")} | (
            {self.cfg.index_column} if self.cfg.index_column else set())
        texts: dict[str, list] = {c: [] for c in self.text_columns}
        bad: dict[str, list] = {c: [] for c in self.text_columns}
        extra: dict[str, list] = {c: [] for c in json_cols if c not in texts}
        prov: dict[str, list] = {"member_key": [], "url": [], "sha256": [], "members": []}
        for key, parts in samples:
            meta, meta_ok = None, True
            if "json" in parts:
                try:
                    meta = json.loads(parts["json"].decode("utf-8", "surrogateescape"))
                except (ValueError, UnicodeDecodeError):
                    meta_ok = False
            meta = meta if isinstance(meta, dict) else None
            image_id = key
            if self.id_column:
                image_id = _str_or_none(meta.get(self.id_column.removeprefix("json."))) if meta else None
            ids.append(image_id)
            for c in self.text_columns:
                if c == "txt" or not c.startswith("json."):
                    raw = parts.get(c)
                    texts[c].append(raw if isinstance(raw, bytes) else None)
                    bad[c].append(False)
                elif not meta_ok:  # unparsable .json: its raw bytes, quarantined as a mismatch
                    texts[c].append(parts["json"])
                    bad[c].append(True)
                else:
                    v = meta.get(c[5:]) if meta else None
                    t, m = _as_text([v])
                    texts[c].append(t[0].as_py())
                    bad[c].append(m[0].as_py())
            for c in extra:
                extra[c].append(_str_or_none(meta.get(c[5:])) if meta else None)
            prov["member_key"].append(key)
            prov["url"].append(_str_or_none(meta.get("url")) if meta else None)
            prov["sha256"].append(_str_or_none(meta.get("sha256")) if meta else None)
            prov["members"].append(",".join(sorted(e for e in parts if not e.startswith("@"))))
            for ext, loc in parts.items():
                if ext.startswith("@"):
                    img_rows.append((image_id, tar_name, loc[0], loc[1], loc[2], ext[1:]))
        cols: dict[str, pa.Array] = {"image_id": pa.array(ids, pa.string()),
                                     "source_row": pa.array(range(row0, row0 + len(samples)), pa.int64())}
        for c in self.text_columns:
            cols[c] = pa.array(texts[c], pa.binary())
            cols[MISMATCH + c] = pa.array(bad[c], pa.bool_())
        for c, v in extra.items():
            cols[c] = pa.array(v, pa.string())
        for c, v in prov.items():
            cols[c] = pa.array(v, pa.string())
        images = pa.Table.from_pylist(
            [dict(zip(IMAGE_SCHEMA.names, r, strict=True)) for r in img_rows], schema=IMAGE_SCHEMA)
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
                        if key != cur_key:
                            if cur_key is not None:
                                samples.append((cur_key, cur))
                            cur_key, cur = key, {}
                        ext = ext.lower()
                        if ext in IMAGE_EXTS:  # located, not read: the recaptioner opens it later
                            cur["@" + ext] = (m.name, m.offset_data, m.size)
                        else:
                            f = tf.extractfile(m)
                            cur[ext] = f.read() if f else b""
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


# ---- streaming JSON --------------------------------------------------------------------------


class _JsonStream:
    """Items of top-level arrays of one JSON object, without loading the document: the
    object's keys are scanned in order; the array under a wanted key is decoded one item at
    a time (`json.JSONDecoder.raw_decode` on a sliding buffer); other values are skipped."""

    def __init__(self, fh, uri: str, chunk: int = 1 << 20):
        self.fh, self.uri, self.chunk = fh, uri, chunk
        self.dec = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self.buf, self.pos, self.eof = "", 0, False
        self.json = json.JSONDecoder()

    def _fill(self) -> bool:
        if self.eof:
            return False
        b = self.fh.read(self.chunk)
        if not b:
            self.eof = True
            self.buf = self.buf[self.pos:] + self.dec.decode(b"", final=True)
            self.pos = 0
            return False
        self.buf = self.buf[self.pos:] + self.dec.decode(b)
        self.pos = 0
        return True

    def _skip_ws(self) -> str:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                raise ShardError(f"{self.uri}: truncated JSON (unexpected end of file)")

    def _expect(self, ch: str) -> None:
        got = self._skip_ws()
        if got != ch:
            raise ShardError(f"{self.uri}: invalid JSON: expected {ch!r} at character {self.pos}, got {got!r}")
        self.pos += 1

    def _value(self) -> Any:
        self._skip_ws()
        while True:
            try:
                v, end = self.json.raw_decode(self.buf, self.pos)
                if end < len(self.buf) or self.eof:  # a number might continue in the next chunk
                    self.pos = end
                    return v
            except json.JSONDecodeError as e:
                if self.eof:
                    raise ShardError(f"{self.uri}: truncated or invalid JSON ({e.msg})") from None
                if len(self.buf) - self.pos > (256 << 20):
                    raise ShardError(f"{self.uri}: one JSON value over 256 MB ({e.msg})") from None
            if not self._fill():
                continue

    def _items(self) -> Iterator[Any]:
        """The items of the array starting here, one at a time."""
        self._expect("[")
        if self._skip_ws() == "]":
            self.pos += 1
            return
        while True:
            yield self._value()
            c = self._skip_ws()
            self.pos += 1
            if c == "]":
                return
            if c != ",":
                raise ShardError(f"{self.uri}: invalid JSON: expected ',' or ']', got {c!r}")

    def _skip(self) -> None:
        """Skip the value starting here; an array is walked item by item, never held whole."""
        if self._skip_ws() == "[":
            for _ in self._items():
                pass
        else:
            self._value()

    def arrays(self, wanted: set[str]) -> Iterator[tuple[str, Any]]:
        """(key, item) for every item of the arrays under the wanted top-level keys, in
        file order; other values are skipped. `self.keys` lists the top-level keys seen."""
        self.keys: list[str] = []
        self._expect("{")
        if self._skip_ws() == "}":
            return
        while True:
            key = self._value()
            if not isinstance(key, str):
                raise ShardError(f"{self.uri}: invalid JSON: object key expected")
            self.keys.append(key)
            self._expect(":")
            if key in wanted and self._skip_ws() == "[":
                for item in self._items():
                    yield key, item
            else:
                self._skip()
            c = self._skip_ws()
            self.pos += 1
            if c == "}":
                return
            if c != ",":
                raise ShardError(f"{self.uri}: invalid JSON: expected ',' or '}}', got {c!r}")


def json_items(uri: str, wanted: set[str]) -> Iterator[tuple[str, Any]]:
    with open_binary(uri) as fh:
        yield from _JsonStream(fh, uri).arrays(wanted)


# ---- COCO / Flickr caption JSON --------------------------------------------------------------


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
        keys = _top_level_keys(shard.uri)
        if "annotations" in keys:
            yield from self._coco(shard)
        elif "images" in keys:
            yield from self._karpathy(shard)
        else:
            raise ShardError(f"{shard.uri}: neither Karpathy ('images[].sentences') nor COCO captions "
                             f"('annotations') layout; top-level keys {sorted(keys)}")

    def _emit(self, buf: dict[str, list], row0: int) -> Batch:
        texts, bad = _as_text(buf.pop("caption"))
        n = len(texts)
        cols = {"image_id": pa.array(buf.pop("image_id"), pa.string()),
                "source_row": pa.array(range(row0, row0 + n), pa.int64()),
                "caption": texts, MISMATCH + "caption": bad}
        unknown = buf.pop("__unknown_image")
        cols[REASON] = pa.array(["unknown_image" if u else None for u in unknown], pa.string())
        cols[REASON_FIELD] = pa.array(["image_id" if u else None for u in unknown], pa.string())
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
        for r, (_k, im) in enumerate(json_items(shard.uri, {"images"})):
            if not isinstance(im, dict):
                im = {}
            sents = im.get("sentences")
            iid = karpathy_image_id(im) if any(k in im for k in ("cocoid", "imgid", "filename")) else None
            entries = list(enumerate(sents)) if isinstance(sents, list) and sents else [(None, None)]
            for s, sent in entries:
                if s is None:  # no sentences: one input row, quarantined as a missing field
                    caption, caption_id = None, "none"
                elif isinstance(sent, dict):
                    caption, caption_id = sent.get("raw"), str(sent.get("sentid", s))
                else:
                    caption, caption_id = sent, str(s)
                yield {"image_id": iid, "caption": caption, "caption_id": caption_id,
                       "filepath": _str_or_none(im.get("filepath")), "filename": _str_or_none(im.get("filename")),
                       "split": _str_or_none(im.get("split")),
                       "json_path": f"images[{r}].sentences[{s}]" if s is not None else f"images[{r}]",
                       "__unknown_image": False}

    def _coco(self, shard: Shard) -> Iterator[Batch]:
        files: dict[str, str | None] = {}
        for _k, im in json_items(shard.uri, {"images"}):  # pass 1: the image table (small)
            if isinstance(im, dict) and "id" in im:
                files[str(im["id"])] = _str_or_none(im.get("file_name"))

        def rows() -> Iterator[dict]:
            for r, (_k, a) in enumerate(json_items(shard.uri, {"annotations"})):  # pass 2: streamed
                a = a if isinstance(a, dict) else {}
                iid = _str_or_none(a.get("image_id"))
                yield {"image_id": iid, "caption": a.get("caption"), "caption_id": _str_or_none(a.get("id")) or str(r),
                       "file_name": files.get(iid) if iid else None, "json_path": f"annotations[{r}]",
                       "__unknown_image": iid is not None and iid not in files}

        return self._batches(rows(), ("image_id", "caption", "caption_id", "file_name", "json_path", "__unknown_image"))


def _top_level_keys(uri: str) -> set[str]:
    """The keys of a JSON document's top-level object (one streaming pass, nothing kept)."""
    with open_binary(uri) as fh:
        s = _JsonStream(fh, uri)
        for _ in s.arrays(set()):
            pass
        return set(s.keys)


# ---- JSONL / CSV -----------------------------------------------------------------------------


class JsonlReader(Reader):
    """One input row per line (JSONL), item (a file holding one JSON array) or record
    (CSV/TSV, header row first). Columns by
    name: `id_column` (default image_id), `text_columns` (default {text: alt}),
    `index_column` for several rows per image (e.g. a caption id). A line that is not a
    JSON object is quarantined (schema_mismatch) with its raw bytes."""

    format = "jsonl"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.id_column = cfg.id_column or "image_id"
        self.text_columns = cfg.text_columns or {"text": "alt"}

    @property
    def fields(self) -> list[TextField]:
        return _mapped_fields(self.text_columns, self.cfg.index_column)

    def _records(self, shard: Shard) -> Iterator[tuple[dict | None, str | None]]:
        """(record, raw line if the record could not be parsed)."""
        low = shard.uri.lower()
        with open_binary(shard.uri) as fh:
            if low.endswith((".csv", ".tsv")):
                text = io.TextIOWrapper(fh, encoding="utf-8", errors="surrogateescape", newline="")
                reader = csv.reader(text, delimiter="\t" if low.endswith(".tsv") else ",")
                try:
                    header = next(reader)
                except StopIteration:
                    return
                except csv.Error as e:
                    raise ShardError(f"{shard.uri}: bad CSV header ({e})") from None
                try:
                    for rec in reader:
                        if not rec:
                            continue
                        if len(rec) != len(header):
                            yield None, ",".join(rec)
                        else:
                            yield {h: (v if v != "" else None) for h, v in zip(header, rec, strict=True)}, None
                except csv.Error as e:
                    raise ShardError(f"{shard.uri}: line {reader.line_num}: corrupt CSV ({e})") from None
                return
            head = fh.read(64)
            fh.seek(0)
            if head.lstrip()[:1] == b"[":  # a JSON array of records, streamed item by item
                for rec in _JsonStream(fh, shard.uri)._items():
                    yield (rec, None) if isinstance(rec, dict) else (None, json.dumps(rec, ensure_ascii=False))
                return
            for line in fh:
                s = line.decode("utf-8", "surrogateescape").strip()
                if not s:
                    continue
                try:
                    rec = json.loads(s)
                except ValueError:
                    yield None, s
                    continue
                yield (rec, None) if isinstance(rec, dict) else (None, s)

    def batches(self, shard: Shard) -> Iterator[Batch]:
        recs: list[tuple[dict | None, str | None]] = []
        row = 0
        for rec in self._records(shard):
            recs.append(rec)
            if len(recs) >= self.batch_rows:
                yield self._emit(recs, row)
                row += len(recs)
                recs = []
        if recs:
            yield self._emit(recs, row)

    def _emit(self, recs: list[tuple[dict | None, str | None]], row0: int) -> Batch:
        n = len(recs)
        ids, bad_ids = [], []
        for rec, _raw in recs:
            v = rec.get(self.id_column) if rec else None
            ids.append(None if v is None or isinstance(v, (dict, list)) else str(v))
            bad_ids.append(rec is None or isinstance(v, (dict, list)))
        cols: dict[str, pa.Array] = {"image_id": pa.array(ids, pa.string()),
                                     MISMATCH + "image_id": pa.array(bad_ids, pa.bool_()),
                                     "source_row": pa.array(range(row0, row0 + n), pa.int64())}
        for c in self.text_columns:
            vals = [rec.get(c) if rec else raw for rec, raw in recs]
            texts, bad = _as_text(vals)
            cols[c] = texts
            cols[MISMATCH + c] = pc.or_(bad, pa.array([rec is None for rec, _ in recs]))
        if self.cfg.index_column:
            cols[self.cfg.index_column] = pa.array(
                [_str_or_none(rec.get(self.cfg.index_column)) if rec else None for rec, _ in recs], pa.string())
        return Batch(pa.table(cols))


READERS: dict[str, type[Reader]] = {"recap": RecapReader, "wds": WdsReader, "coco": CocoReader, "jsonl": JsonlReader}


def reader_for(cfg) -> Reader:
    if cfg.source not in READERS:
        raise SourceError(f"ingest.source {cfg.source!r} has no corpus reader (readers: {', '.join(READERS)})")
    return READERS[cfg.source](cfg)


__all__ = ["Batch", "Reader", "READERS", "Shard", "ShardError", "SourceError", "TextField", "json_items",
           "karpathy_image_id", "reader_for", "read_image_member", "resolve_sources"]
