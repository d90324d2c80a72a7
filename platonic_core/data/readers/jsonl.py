"""JSON lines, a JSON array of records, or CSV/TSV, with a configurable column mapping."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from .base import (
    MISMATCH,
    Batch,
    Reader,
    Shard,
    ShardError,
    TextField,
    as_text,
    mapped_fields,
    str_or_none,
)
from .jsonstream import JsonStream
from .sources import open_binary

if TYPE_CHECKING:
    from ...config import IngestConfig


class JsonlReader(Reader):
    """One input row per line (JSONL), item (a file holding one JSON array) or record
    (CSV/TSV, header row first). Columns by
    name: `id_column` (default image_id), `text_columns` (default {text: alt}),
    `index_column` for several rows per image (e.g. a caption id). A line that is not a
    JSON object is quarantined (schema_mismatch) with its raw bytes."""

    format = "jsonl"

    def __init__(self, cfg: IngestConfig):
        super().__init__(cfg)
        self.id_column = cfg.id_column or "image_id"
        self.text_columns = cfg.text_columns or {"text": "alt"}

    @property
    def fields(self) -> list[TextField]:
        return mapped_fields(self.text_columns, self.cfg.index_column)

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
                for rec in JsonStream(fh, shard.uri)._items():
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
        cols: dict[str, pa.Array] = {
            "image_id": pa.array(ids, pa.string()),
            MISMATCH + "image_id": pa.array(bad_ids, pa.bool_()),
            "source_row": pa.array(range(row0, row0 + n), pa.int64()),
        }
        for c in self.text_columns:
            vals = [rec.get(c) if rec else raw for rec, raw in recs]
            texts, bad = as_text(vals)
            cols[c] = texts
            cols[MISMATCH + c] = pc.or_(bad, pa.array([rec is None for rec, _ in recs]))
        if self.cfg.index_column:
            cols[self.cfg.index_column] = pa.array(
                [str_or_none(rec.get(self.cfg.index_column)) if rec else None for rec, _ in recs], pa.string()
            )
        return Batch(pa.table(cols))
