"""Ingest of real corpora: shards in, normalised Parquet partitions + a DuckDB catalog out.

The unit of work is one shard (`ingest_shard`): a pure function of the shard's bytes and
the reader's description, writing `texts.parquet` (kept texts, one row per text),
`quarantine.parquet` (rejected texts with the reason) and, for webdataset, `images.parquet`
(image members located by offset). Its output lives in a shard cache keyed by
hash(reader description, rules, shard content digest), so an unchanged shard is never
redone, and shards can be fanned out to any number of workers (Prefect map, work pool).

The driver (`ingest_corpus`) loops over the shards in order, collects failures (each
naming its file) without stopping the others, links every shard's files into a Hive
partitioned layout

    texts/shard=<id>/data.parquet    quarantine/shard=<id>/data.parquet    images/...
    shards.parquet                   (per shard: uri, digest, status, counts, error)
    catalog.duckdb                   (views over the partitions, sql/catalog_shards.sql)

quarantines text ids repeated across shards (the first shard keeps the text), and
registers the catalog. Every input text is kept or quarantined: in == kept + quarantined.

Reasons: missing_field, schema_mismatch, empty_text, invalid_utf8, control_characters,
over_long_text, duplicate_key, unknown_image (a COCO annotation naming no image),
malformed_csv (a CSV row whose quote does not close: readers/jsonl.py), malformed_wordnet (a
WordNet data line that does not follow wndb(5): readers/wordnet.py).
Memory is bounded by one batch (`ingest.batch_rows` input rows) per shard, whatever the
shard or corpus size; the cross-shard check runs in DuckDB under a memory limit.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..artifacts import ForeignFolderError, listing
from ..config import IngestConfig, stable_hash
from ..durable import scratch
from .catalog import build_corpus_catalog, duckdb_literal, sql
from .ingest import check_texts
from .readers import (
    IMAGE_SCHEMA,
    MISMATCH,
    OVER_LONG,
    REASON,
    REASON_FIELD,
    Reader,
    Shard,
    ShardError,
    reader_for,
)
from .schema import QUARANTINE_SCHEMA, TEXT_SCHEMA

# bump when the normalisation or the rules change: shard caches re-run (3: the BOM, lone
# surrogates, repeated columns and length-prefixed keys of issue 33; 4: a tar member repeated
# within a sample is a row of its own, issue 43)
RULES_VERSION = 4
REASONS = (
    "missing_field",
    "schema_mismatch",
    "empty_text",
    "invalid_utf8",
    "control_characters",
    "over_long_text",
    "duplicate_key",
    "unknown_image",
    "malformed_csv",
    "malformed_wordnet",
)
_INTERNAL = (MISMATCH, OVER_LONG, REASON, REASON_FIELD)


@dataclass
class ShardResult:
    shard: Shard
    status: str  # ingested | cached | failed
    counts: dict[str, int] = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0


def _one_array(col: pa.ChunkedArray) -> pa.Array:
    """A column as one array: a single chunk as it is (`combine_chunks` copies even one, and
    a fresh copy of a batch's texts costs more than the rules run on them)."""
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _column(rows: pa.Table, name: str) -> pa.Array:
    return _one_array(rows.column(name))


def _take_flat(per_field: list[pa.Array], flat: pa.Array) -> pa.Array:
    """Values of the field-major concatenation of `per_field` at `flat`, as one array."""
    return _one_array(pa.chunked_array(per_field).take(flat))


def _bool(col, n: int) -> pa.Array:
    return pa.array(np.zeros(n, bool)) if col is None else pc.fill_null(col, False)


def _flag(rows: pa.Table, name: str) -> pa.Array:
    """A reader's per-row flag column (`__mismatch__<col>`, ...); all false where it has none."""
    return _bool(_column(rows, name) if name in rows.column_names else None, rows.num_rows)


def _null_str(n: int) -> pa.Array:
    return pa.nulls(n, pa.string())


def _raw(texts: pa.Array, reasons: pa.Array) -> pa.Array:
    """The rejected value as text: bytes that are not UTF-8 as backslash escapes."""
    if pa.types.is_string(texts.type):
        return texts
    vals = texts.to_pylist()
    bad = reasons.to_pylist()
    return pa.array(
        [
            None
            if v is None
            else v.decode("utf-8", "backslashreplace")
            if r == "invalid_utf8"
            else v.decode("utf-8", "replace")
            for v, r in zip(vals, bad, strict=True)
        ],
        pa.string(),
    )


class _Normaliser:
    """Rows of one shard -> kept texts and quarantined texts, vectorised per batch."""

    def __init__(self, reader: Reader, shard: Shard, max_chars: int):
        self.fields = reader.fields
        self.id_column = getattr(reader, "id_column", None) or "image_id"
        # provenance names the file, not where it lives: the output bytes (and digests) do
        # not change when the corpus moves; shards.parquet maps each shard to its full URI
        self.uri, self.max_chars = source_name(shard), max_chars
        self.seen: set[str] = set()  # row keys of this shard (its images / captions)

    def __call__(self, rows: pa.Table) -> tuple[pa.Table, pa.Table]:
        n = rows.num_rows
        names = set(rows.column_names)
        fields = [f for f in self.fields if f.column in names]
        image_id = _column(rows, "image_id")
        # row-level reasons, in order: a reader's own, a mistyped id, a missing id, a duplicate row
        row_reason = _column(rows, REASON) if REASON in names else _null_str(n)
        row_field = _column(rows, REASON_FIELD) if REASON_FIELD in names else _null_str(n)
        id_bad = _bool(_column(rows, MISMATCH + "image_id") if MISMATCH + "image_id" in names else None, n)
        index_cols = sorted({f.index_column for f in fields if f.index_column})
        idx_missing = pa.array(np.zeros(n, bool))
        for c in index_cols:
            idx_missing = pc.or_(idx_missing, pc.is_null(_column(rows, c)))
        no_id = pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(image_id)), 0), True)  # null or blank
        conds = [pc.is_valid(row_reason), id_bad, no_id, idx_missing]
        row_reason = pc.case_when(
            pc.make_struct(*conds), row_reason, "schema_mismatch", "missing_field", "missing_field"
        )
        row_field = pc.case_when(
            pc.make_struct(*conds),
            row_field,
            self.id_column,
            self.id_column,
            index_cols[0] if index_cols else self.id_column,
        )
        # duplicate rows: a key seen before in this shard (the first row with a key keeps it).
        # Each part is prefixed with its length: joined bare, id "a\x1fb" + index "c" and id "a"
        # + index "b\x1fc" were one key, and a distinct row was quarantined as a duplicate
        parts = [image_id, *[_column(rows, c).cast(pa.string()) for c in index_cols]]
        keys = (
            image_id
            if not index_cols
            else pc.binary_join_element_wise(
                *[x for part in parts for x in (pc.binary_length(part).cast(pa.string()), part)], "\x1f"
            )
        )
        ok_rows = pc.is_null(row_reason)
        dup = np.zeros(n, bool)
        ok_keys = keys.filter(ok_rows).to_pylist()
        fresh = set(ok_keys)
        if len(fresh) == len(ok_keys) and self.seen.isdisjoint(fresh):  # the common case: set operations only
            self.seen |= fresh
        else:  # a key repeats: find which rows, in order
            for i, k in zip(np.flatnonzero(ok_rows.to_numpy(zero_copy_only=False)), ok_keys, strict=True):
                if k in self.seen:
                    dup[i] = True
                else:
                    self.seen.add(k)
        dup_a = pa.array(dup)
        row_reason = pc.if_else(dup_a, pa.scalar("duplicate_key"), row_reason)
        row_field = pc.if_else(dup_a, pa.scalar(self.id_column), row_field)
        source_row = _column(rows, "source_row")

        prov = [
            c
            for c in rows.column_names
            if c not in ("image_id", "source_row")
            and not c.startswith(_INTERNAL)
            and c not in {f.column for f in self.fields}
            and c not in index_cols
        ]
        if not fields:  # no text column in this shard at all (optional ones): no texts
            return pa.Table.from_pylist([], schema=TEXT_SCHEMA), pa.Table.from_pylist([], schema=QUARANTINE_SCHEMA)
        # per field: its texts, reasons, fields named in the quarantine, indices (all length n)
        texts, normalised, reasons, qfields, indices = [], [], [], [], []
        for f in fields:
            text = _column(rows, f.column)
            if pa.types.is_string(text.type):
                text = text.view(pa.binary())  # one type for all fields; UTF-8 is checked below
            mism, over = (_flag(rows, marker + f.column) for marker in (MISMATCH, OVER_LONG))
            text_reason, norm = check_texts(text, self.max_chars)
            text_reason = pc.if_else(over, pa.scalar("over_long_text"), text_reason)  # only a prefix was read
            reason = pc.coalesce(row_reason, pc.if_else(mism, pa.scalar("schema_mismatch"), text_reason))
            texts.append(text)
            normalised.append(norm)
            reasons.append(reason)
            # a row-level reason names its field, or (a reader's own, fieldless) each text's column
            qfields.append(pc.if_else(pc.is_valid(row_reason), pc.coalesce(row_field, f.column), pa.scalar(f.column)))
            indices.append(
                _column(rows, f.index_column).cast(pa.string())
                if f.index_column
                else pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), [str(f.index)]).cast(pa.string())
            )
        n_f = len(fields)
        # (row, field) pairs in row-major order, so the texts of one input row stay together;
        # `flat` indexes the field-major concatenation of the per-field arrays
        good = np.stack([pc.is_null(r).to_numpy(zero_copy_only=False) for r in reasons], axis=1)
        kinds = [f.kind for f in fields]

        def pick(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, pa.Array]:
            pairs = np.flatnonzero(mask.ravel())
            row, fld = pairs // n_f, pairs % n_f
            return row, fld, pa.array(fld * n + row, pa.int64())

        row, fld, flat = pick(good)
        row_a = pa.array(row, pa.int64())
        image = image_id.take(row_a)
        kind = pa.DictionaryArray.from_arrays(fld.astype(np.int32), kinds).cast(pa.string())
        k = len(row)
        cols = {
            "image_id": image,
            "text_id": pc.binary_join_element_wise(image, kind, _take_flat(indices, flat), ":"),
            "source_kind": kind,
            "text": _take_flat(normalised, flat),
            "source_uri": pa.DictionaryArray.from_arrays(np.zeros(k, np.int32), [self.uri]).cast(pa.string()),
            "source_row": source_row.take(row_a),
        }
        empty = pa.DictionaryArray.from_arrays(np.zeros(k, np.int32), [""]).cast(pa.string())
        for g in ("generator", "generator_model", "generator_params"):
            cols[g] = empty
        kept = pa.table(cols, schema=TEXT_SCHEMA)
        for c in prov:
            kept = kept.append_column(c, _column(rows, c).take(row_a))
        # quarantined (row, field) pairs, ordered the same way
        if good.all():
            return kept, pa.Table.from_pylist([], schema=QUARANTINE_SCHEMA)
        qrow, _qfld, qflat = pick(~good)
        reason = _take_flat(reasons, qflat)
        q = pa.table(
            {
                "source_uri": pa.array([self.uri] * len(qrow), pa.string()),
                "source_row": source_row.take(pa.array(qrow, pa.int64())),
                "field": _take_flat(qfields, qflat),
                "reason": reason,
                "raw": _raw(_take_flat(texts, qflat), reason),
            },
            schema=QUARANTINE_SCHEMA,
        )
        return kept, q


_LOW_CARDINALITY = {
    "source_kind",
    "source_uri",
    "generator",
    "generator_model",
    "generator_params",
    "field",
    "reason",
    "split",
    "ext",
    "tar",
}


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """Dictionary-encode numbers and the few repetitive strings; trying it on texts, ids and
    urls only costs time (the encoder gives up on them after the first page)."""
    return [
        f.name
        for f in schema
        if f.name in _LOW_CARDINALITY or not (pa.types.is_string(f.type) or pa.types.is_binary(f.type))
    ]


def source_name(shard: Shard) -> str:
    """The shard's file name: its `source_uri` in the output rows."""
    return shard.uri.rstrip("/").rsplit("/", 1)[-1]


def shard_key(reader: Reader, shard: Shard, max_chars: int) -> str:
    """The shard cache key: same bytes under the same name, same reader, same rules -> same
    output (a moved corpus is not redone; its files' names are part of the output)."""
    return stable_hash(
        {
            "rules": RULES_VERSION,
            "reader": reader.describe(),
            "max_chars": max_chars,
            "digest": shard.digest,
            "name": source_name(shard),
            "id": shard.id,
        },
        n=24,
    )


def _prefetched(items: Iterator, depth: int = 2) -> Iterator:
    """Iterate `items` in a background thread, `depth` ahead: reading and decompressing the
    next batch overlaps the normalisation of this one (Arrow releases the GIL)."""
    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    end = object()

    def pump() -> None:
        try:
            for x in items:
                while not stop.is_set():
                    try:
                        q.put((x, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((end, None))
        except BaseException as e:  # handed to the consumer, raised there
            q.put((end, e))

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    try:
        while True:
            x, err = q.get()
            if x is end:
                if err is not None:
                    raise err
                return
            yield x
    finally:
        stop.set()
        t.join()


class _Writers:
    """Parquet writers for one shard's outputs, fed from a background thread, so encoding
    and compression overlap the next batch's normalisation."""

    def __init__(self, out: Path):
        self.out, self.writers = out, {}
        self.q: queue.Queue = queue.Queue(2)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (item := self.q.get()) is not None:
            if self.error is not None:
                continue
            name, table = item
            try:
                if name not in self.writers:
                    self.writers[name] = pq.ParquetWriter(
                        self.out / f"{name}.parquet", table.schema, use_dictionary=_dictionary_columns(table.schema)
                    )
                elif table.schema != self.writers[name].schema:  # provenance types differ between batches
                    table = table.cast(self.writers[name].schema)
                self.writers[name].write_table(table)
            except BaseException as e:
                self.error = e

    def write(self, name: str, table: pa.Table) -> None:
        if self.error is not None:
            raise self.error
        self.q.put((name, table))

    def close(self) -> set[str]:
        """Flush and close; the names of the files written."""
        self.q.put(None)
        self.thread.join()
        for w in self.writers.values():
            w.close()
        if self.error is not None:
            raise self.error
        return set(self.writers)


@contextmanager
def _pages_kept_between_batches() -> Iterator[None]:
    """Arrow allocations through jemalloc, freed pages kept for a few seconds, so each batch's
    arrays reuse the pages the previous batch freed. Under pyarrow's default (mimalloc, pages
    returned within milliseconds) every batch faulted its memory in afresh, which on a small
    VM cost more than the text rules (normalising a 500k-row Recap shard: 1.4 s with this,
    2.0-2.7 s without; benchmarks/bench_ingest.py). Memory stays bounded by a few batches."""
    if "jemalloc" not in pa.supported_memory_backends():
        yield
        return
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.jemalloc_memory_pool())
    pa.jemalloc_set_decay_ms(5000)
    try:
        yield
    finally:
        pa.set_memory_pool(previous)


def ingest_shard(reader: Reader, shard: Shard, max_chars: int, out: Path) -> dict[str, int]:
    """One shard -> `out/{texts,quarantine}.parquet` (+ `images.parquet` for webdataset) and
    its counts. Streams batch by batch; raises ShardError naming the file if it is unreadable."""
    with _pages_kept_between_batches():
        return _ingest_shard(reader, shard, max_chars, out)


def _ingest_shard(reader: Reader, shard: Shard, max_chars: int, out: Path) -> dict[str, int]:
    norm = _Normaliser(reader, shard, max_chars)
    writers = _Writers(out)
    counts = {"rows_in": 0, "in": 0, "kept": 0, "quarantined": 0, "images": 0}
    reasons: dict[str, int] = {}
    started: set[str] = set()
    try:
        for batch in _prefetched(reader.batches(shard)):
            texts, q = norm(batch.rows)
            counts["rows_in"] += batch.rows.num_rows
            counts["kept"] += texts.num_rows
            counts["quarantined"] += q.num_rows
            if q.num_rows:
                for r, c in zip(
                    *np.unique(q["reason"].to_numpy(zero_copy_only=False), return_counts=True), strict=True
                ):
                    reasons[r] = reasons.get(r, 0) + int(c)
            for name, table in (("texts", texts), ("quarantine", q), ("images", batch.images)):
                if table is not None and (table.num_rows or name not in started):
                    writers.write(name, table)
                    started.add(name)
                    counts["images"] += table.num_rows if name == "images" else 0
    except ShardError:
        raise
    except Exception as e:  # pyarrow / JSON / IO: the message names the file
        raise ShardError(f"{shard.uri}: {type(e).__name__}: {e}") from None
    finally:
        written = writers.close()
    if "texts" not in written:  # an empty shard still yields (empty) partitions
        pq.write_table(pa.Table.from_pylist([], schema=TEXT_SCHEMA), out / "texts.parquet")
    if "quarantine" not in written:
        pq.write_table(pa.Table.from_pylist([], schema=QUARANTINE_SCHEMA), out / "quarantine.parquet")
    if reader.format == "wds" and "images" not in written:
        pq.write_table(pa.Table.from_pylist([], schema=IMAGE_SCHEMA), out / "images.parquet")
    counts["in"] = counts["kept"] + counts["quarantined"]
    counts.update({f"quarantined_{r}": c for r, c in sorted(reasons.items())})
    return counts


def run_shard(reader: Reader, shard: Shard, max_chars: int, cache: Path) -> ShardResult:
    """`ingest_shard` through the shard cache: an unchanged shard is not redone."""
    t0 = time.perf_counter()
    key = shard_key(reader, shard, max_chars)
    done = cache / key / "done.json"
    if done.is_file():
        return ShardResult(shard, "cached", json.loads(done.read_text())["counts"], seconds=time.perf_counter() - t0)
    tmp = scratch(cache, key)  # a killed worker's scratch here is swept
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        counts = ingest_shard(reader, shard, max_chars, tmp)
    except ShardError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        return ShardResult(shard, "failed", error=str(e), seconds=time.perf_counter() - t0)
    (tmp / "done.json").write_text(json.dumps({"shard": shard.__dict__, "counts": counts}, sort_keys=True))
    final = cache / key
    if final.exists():  # written concurrently by another worker: same content
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(final)
    return ShardResult(shard, "ingested", counts, seconds=time.perf_counter() - t0)


def _place(src: Path, dst: Path) -> None:
    """dst becomes the same file as src: a hard link (no copy), a copy across devices."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _cross_shard_duplicates(out: Path, order: list[str]) -> dict[str, list[tuple[str, int]]]:
    """shard -> [(text_id, source_row)] of texts whose id a previous shard already has."""
    con = duckdb.connect()
    try:
        con.execute("SET memory_limit='512MB'")
        con.execute("SET temp_directory = ?", [(out / ".duckdb_tmp").as_posix()])
        con.execute("SET preserve_insertion_order=false")
        texts = duckdb_literal(out / "texts") + "/*/*.parquet"  # the output folder's own name is no glob
        rows = con.execute(sql("cross_shard_duplicates", texts=texts)).fetchall()
    finally:
        con.close()
        shutil.rmtree(out / ".duckdb_tmp", ignore_errors=True)
    rank = {s: i for i, s in enumerate(order)}
    groups: dict[str, list[tuple[int, int, str]]] = {}
    for text_id, shard, row in rows:
        groups.setdefault(text_id, []).append((rank[shard], row, shard))
    dups: dict[str, list[tuple[str, int]]] = {}
    for text_id, occ in groups.items():
        for _r, row, shard in sorted(occ)[1:]:
            dups.setdefault(shard, []).append((text_id, row))
    return dups


def _quarantine_cross(out: Path, shard: str, dups: list[tuple[str, int]], batch_rows: int) -> int:
    """Move the shard's cross-shard duplicates from its texts to its quarantine, streaming
    (bounded memory). New files replace the partition's links, so the shard cache they were
    linked from stays untouched."""
    tpath = out / "texts" / f"shard={shard}" / "data.parquet"
    qpath = out / "quarantine" / f"shard={shard}" / "data.parquet"
    ids = pa.array(sorted({t for t, _ in dups}), pa.string())
    src = pq.ParquetFile(tpath, pre_buffer=False)
    tmp_t, tmp_q = tpath.with_name("data.parquet.tmp"), qpath.with_name("data.parquet.tmp")
    moved = 0
    with (
        pq.ParquetWriter(tmp_t, src.schema_arrow, use_dictionary=_dictionary_columns(src.schema_arrow)) as wt,
        pq.ParquetWriter(tmp_q, QUARANTINE_SCHEMA) as wq,
    ):
        for b in pq.ParquetFile(qpath, pre_buffer=False).iter_batches(batch_size=batch_rows):
            wq.write_batch(b)
        for b in src.iter_batches(batch_size=batch_rows):
            hit = pc.is_in(b.column("text_id"), value_set=ids)
            wt.write_batch(b.filter(pc.invert(hit)))
            dup = b.filter(hit)
            if dup.num_rows:
                moved += dup.num_rows
                wq.write_table(
                    pa.table(
                        {
                            "source_uri": dup.column("source_uri"),
                            "source_row": dup.column("source_row"),
                            "field": pa.array(["text_id"] * dup.num_rows, pa.string()),
                            "reason": pa.array(["duplicate_key"] * dup.num_rows, pa.string()),
                            "raw": dup.column("text"),
                        },
                        schema=QUARANTINE_SCHEMA,
                    )
                )
    os.replace(tmp_t, tpath)  # replaces the link, never writes through it
    os.replace(tmp_q, qpath)
    return moved


PARTITIONS = ("texts", "quarantine", "images")
_PARTITION_FILES = {"data.parquet", "data.parquet.tmp"}  # what `_place` and `_quarantine_cross` write


def _own_partitions(out: Path) -> list[Path]:
    """The shard partitions an earlier ingest left under `out` (`<part>/shard=<id>/` holding
    only its data file). Anything else there is not ingest's: ForeignFolderError, before any
    work, so nothing of the user's is deleted (nor read by the catalog's globs)."""
    own, stray = [], []
    for part in PARTITIONS:
        root = out / part
        if not root.exists():
            continue
        if not root.is_dir():
            stray.append(root)
            continue
        for d in root.iterdir():
            ok = (
                d.is_dir()
                and not d.is_symlink()
                and d.name.startswith("shard=")
                and all(f.is_file() and f.name in _PARTITION_FILES for f in d.iterdir())
            )
            (own if ok else stray).append(d)
    if stray:
        raise ForeignFolderError(
            f"{out}: holds files ingest did not write ({listing(stray, out)}); move them out or give another folder"
        )
    return own


def ingest_corpus(
    shards: list[Shard],
    cfg: IngestConfig,
    out: Path,
    cache: Path,
    progress: Callable[[ShardResult], None] | None = None,
    mapper: Callable[[Callable, list[tuple]], list] | None = None,
) -> tuple[dict[str, int], list[ShardResult]]:
    """Ingest every shard (cached ones are not redone), lay the partitions out under `out`,
    quarantine cross-shard duplicate text ids, and register the DuckDB catalog.

    `mapper(fn, calls) -> results in call order` runs the shards elsewhere (the pipeline's
    Dask fan-out, tasks/fanout.py); without one, `cfg.workers` > 1 uses a local process pool.

    Returns (counts, per-shard results). A failed shard is reported (status failed, the
    error naming its file), the others complete; counts cover the shards that were read."""
    reader = reader_for(cfg)
    earlier = _own_partitions(out)
    out.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    results = []
    if mapper is not None:
        for r in mapper(run_shard, [(reader, s, cfg.max_text_chars, cache) for s in shards]):
            results.append(r)
            if progress:
                progress(r)
    elif cfg.workers > 1 and len(shards) > 1:  # shards are independent: fan them out
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        # spawn, not fork: forking a process that runs Arrow threads can deadlock
        with ProcessPoolExecutor(min(cfg.workers, len(shards)), mp_context=mp.get_context("spawn")) as ex:
            futures = [ex.submit(run_shard, reader, s, cfg.max_text_chars, cache) for s in shards]
            for f in futures:  # in shard order: the output does not depend on scheduling
                results.append(f.result())
                if progress:
                    progress(results[-1])
    else:
        for shard in shards:
            results.append(run_shard(reader, shard, cfg.max_text_chars, cache))
            if progress:
                progress(results[-1])
    # the output holds exactly the shards given now: stale partitions of earlier runs go
    ok = [r for r in results if r.status != "failed"]
    wanted = {f"shard={r.shard.id}" for r in ok}
    for d in earlier:
        if d.name not in wanted:
            shutil.rmtree(d)
    for r in ok:
        src = cache / shard_key(reader, r.shard, cfg.max_text_chars)
        for part in PARTITIONS:
            if (src / f"{part}.parquet").is_file():
                _place(src / f"{part}.parquet", out / part / f"shard={r.shard.id}" / "data.parquet")
    cross = _cross_shard_duplicates(out, [r.shard.id for r in ok]) if len(ok) > 1 else {}
    for r in ok:
        r.counts = dict(r.counts)
        if r.shard.id in cross:
            moved = _quarantine_cross(out, r.shard.id, cross[r.shard.id], cfg.batch_rows)
            r.counts["kept"] -= moved
            r.counts["quarantined"] += moved
            r.counts["quarantined_duplicate_key"] = r.counts.get("quarantined_duplicate_key", 0) + moved
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "shard": r.shard.id,
                    "uri": r.shard.uri,
                    "digest": r.shard.digest,
                    "status": "failed" if r.status == "failed" else "ok",
                    "rows_in": r.counts.get("rows_in", 0),
                    "texts_in": r.counts.get("in", 0),
                    "kept": r.counts.get("kept", 0),
                    "quarantined": r.counts.get("quarantined", 0),
                    "error": r.error,
                }
                for r in results
            ],
            schema=pa.schema(
                [
                    ("shard", pa.string()),
                    ("uri", pa.string()),
                    ("digest", pa.string()),
                    ("status", pa.string()),
                    ("rows_in", pa.int64()),
                    ("texts_in", pa.int64()),
                    ("kept", pa.int64()),
                    ("quarantined", pa.int64()),
                    ("error", pa.string()),
                ]
            ),
        ),
        out / "shards.parquet",
    )
    build_corpus_catalog(out, images=(out / "images").is_dir() and any((out / "images").iterdir()))
    counts: dict[str, int] = {
        "shards": len(results),
        "shards_ingested": sum(r.status == "ingested" for r in results),
        "shards_cached": sum(r.status == "cached" for r in results),
        "shards_failed": sum(r.status == "failed" for r in results),
    }
    for key in ("rows_in", "in", "kept", "quarantined", "images"):
        counts[key] = sum(r.counts.get(key, 0) for r in ok)
    for reason in REASONS:
        n = sum(r.counts.get(f"quarantined_{reason}", 0) for r in ok)
        if n:
            counts[f"quarantined_{reason}"] = n
    assert counts["in"] == counts["kept"] + counts["quarantined"], counts
    assert counts["quarantined"] == sum(v for k, v in counts.items() if k.startswith("quarantined_")), counts
    return counts, results
