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
    REASON,
    REASON_FIELD,
    Batch,
    Reader,
    Shard,
    ShardError,
    TextField,
    as_text,
    bounded_lines,
    id_array,
    mapped_fields,
    str_or_none,
)
from .jsonstream import JsonStream
from .sources import open_binary

if TYPE_CHECKING:
    from ...config import IngestConfig

BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark: editors on Windows write one


class JsonlReader(Reader):
    """One input row per line (JSONL), item (a file holding one JSON array) or record
    (CSV/TSV, header row first). Columns by
    name: `id_column` (default image_id), `text_columns` (default {text: alt}),
    `index_column` for several rows per image (e.g. a caption id). A line that is not a
    JSON object is quarantined (schema_mismatch) with its raw bytes; so is a CSV row of the
    wrong width; a CSV row whose quote does not close is quarantined malformed_csv and the
    rows it would swallow are read as rows (`_csv_records`).

    Hostile files: a line (or array item) over `max_record_bytes` is never read whole: its
    texts are quarantined over_long_text (raw: its first 4 x max_text_chars bytes); a
    leading UTF-8 byte-order mark is skipped (it used to cost the first row, a CSV's id
    column or a whole JSON array); a UTF-16/32 file is refused with one line; a record that
    gives a column this reader reads twice ({"text": "a", "text": "b"}) is quarantined
    schema_mismatch instead of the first value being dropped uncounted."""

    format = "jsonl"

    def __init__(self, cfg: IngestConfig):
        super().__init__(cfg)
        self.id_column = cfg.id_column or "image_id"
        self.text_columns = cfg.text_columns or {"text": "alt"}
        # the columns read from a record: one given twice is ambiguous (json keeps the last)
        self.read_columns = [self.id_column, *self.text_columns, *([cfg.index_column] if cfg.index_column else [])]

    def _duplicated(self, line: str) -> bool:
        """Does this JSON object give a read column twice? A cheap count finds candidates,
        the pairs of a second parse decide."""
        if not any(line.count(f'"{c}"') > 1 for c in self.read_columns):
            return False
        objects: list[list[str]] = []  # the keys of each object, inner ones first, the record's last
        json.loads(line, object_pairs_hook=lambda pairs: objects.append([k for k, _ in pairs]) or {})
        return any(objects[-1].count(c) > 1 for c in self.read_columns)

    @property
    def fields(self) -> list[TextField]:
        return mapped_fields(self.text_columns, self.cfg.index_column)

    def _records(self, shard: Shard) -> Iterator[tuple[dict | None, str | None, str | None]]:
        """(record, raw line if the record could not be parsed, a row-level reason)."""
        low = shard.uri.lower()
        limit, raw_limit = self.cfg.max_record_bytes, 4 * self.cfg.max_text_chars
        with open_binary(shard.uri) as fh:
            head = fh.read(64)
            if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 / UTF-32 byte-order marks
                raise ShardError(f"{shard.uri}: UTF-16/32 text (byte-order mark {head[:2].hex()}); re-encode as UTF-8")
            bom = head.startswith(BOM)
            fh.seek(len(BOM) if bom else 0)
            if low.endswith((".csv", ".tsv")):
                text = io.TextIOWrapper(fh, encoding="utf-8", errors="surrogateescape", newline="")
                yield from _csv_records(text, "\t" if low.endswith(".tsv") else ",", shard.uri, self.read_columns)
                return
            if head.removeprefix(BOM).lstrip()[:1] == b"[":  # a JSON array of records, streamed item by item
                for rec in JsonStream(fh, shard.uri, max_value=limit)._items():
                    yield (
                        (rec, None, None)
                        if isinstance(rec, dict)
                        else (None, json.dumps(rec, ensure_ascii=False), None)
                    )
                return
            for line, over in bounded_lines(fh, limit):
                if over:  # never parsed: its texts are over-long whatever it holds
                    yield None, line[:raw_limit].decode("utf-8", "surrogateescape"), "over_long_text"
                    continue
                s = line.decode("utf-8", "surrogateescape").strip()
                if not s:
                    continue
                try:
                    rec = json.loads(s)
                except ValueError:
                    yield None, s, None
                    continue
                if isinstance(rec, dict) and self._duplicated(s):
                    yield None, s, "schema_mismatch"
                    continue
                yield (rec, None, None) if isinstance(rec, dict) else (None, s, None)

    def batches(self, shard: Shard) -> Iterator[Batch]:
        recs: list[tuple[dict | None, str | None, str | None]] = []
        row = 0
        for rec in self._records(shard):
            recs.append(rec)
            if len(recs) >= self.batch_rows:
                yield self._emit(recs, row)
                row += len(recs)
                recs = []
        if recs:
            yield self._emit(recs, row)

    def _emit(self, recs: list[tuple[dict | None, str | None, str | None]], row0: int) -> Batch:
        n = len(recs)
        ids, bad_ids = [], []
        for rec, _raw, _reason in recs:
            v = rec.get(self.id_column) if rec else None
            ids.append(None if v is None or isinstance(v, (dict, list)) else str(v))
            bad_ids.append(rec is None or isinstance(v, (dict, list)))
        id_col, id_not_utf8 = id_array(ids)
        if any(id_not_utf8):  # an id with a lone surrogate ("\\ud800"): its row, not the shard
            recs = [
                (rec, raw, reason or ("invalid_utf8" if bad else None))
                for (rec, raw, reason), bad in zip(recs, id_not_utf8, strict=True)
            ]
        cols: dict[str, pa.Array] = {
            "image_id": id_col,
            MISMATCH + "image_id": pa.array(bad_ids, pa.bool_()),
            "source_row": pa.array(range(row0, row0 + n), pa.int64()),
        }
        for c in self.text_columns:
            vals = [rec.get(c) if rec else raw for rec, raw, _ in recs]
            texts, bad = as_text(vals)
            cols[c] = texts
            cols[MISMATCH + c] = pc.or_(bad, pa.array([rec is None for rec, _, _ in recs]))
        if self.cfg.index_column:
            cols[self.cfg.index_column] = pa.array(
                [str_or_none(rec.get(self.cfg.index_column)) if rec else None for rec, _, _ in recs], pa.string()
            )
        if any(reason for _, _, reason in recs):
            cols[REASON] = pa.array([reason for _, _, reason in recs], pa.string())
            if any(id_not_utf8):
                cols[REASON_FIELD] = pa.array([self.id_column if b else None for b in id_not_utf8], pa.string())
        return Batch(pa.table(cols))


class _Lines:
    """The physical lines of a text stream, for `csv.reader`: lines pushed back are read
    again first, and `taken` holds the lines the current record has read so far."""

    def __init__(self, text: Iterator[str]):
        self.text, self.back, self.taken = text, [], []

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = self.back.pop() if self.back else next(self.text)
        self.taken.append(line)
        return line

    def take(self) -> list[str]:
        taken, self.taken = self.taken, []
        return taken


def _is_row(line: str, delimiter: str, width: int) -> bool:
    """Is this one physical line, alone, a well-formed record of `width` fields with its
    quotes balanced? (The last line of a quoted field over several lines closes a quote: an
    odd count, so it is never taken for a row.)"""
    if line.count('"') % 2:
        return False
    try:
        recs = list(csv.reader([line], delimiter=delimiter, strict=True))
    except csv.Error:
        return False
    return len(recs) == 1 and len(recs[0]) == width


def _csv_records(
    text: Iterator[str], delimiter: str, uri: str, read_columns: list[str] = ()
) -> Iterator[tuple[dict | None, str | None, str | None]]:
    """(record, raw, reason) per CSV/TSV row, header first. A quote that is not closed where
    a field may end swallows the next rows into one field, so a record is taken as broken
    when the strict parser rejects it (text after a closing quote; the file ends inside
    quotes), or when it spans several physical lines one of which is, on its own, a
    well-formed row of the header's width with balanced quotes. A broken record's first line
    is quarantined (malformed_csv, raw = that line) and its other lines are parsed again as
    rows: nothing is swallowed, and rows in = kept + quarantined. (A quoted field over three
    or more lines whose middle line looks like a whole row cannot be told from a swallowed
    row, and is treated as one.)"""
    lines = _Lines(text)
    try:
        header = next(csv.reader(lines, delimiter=delimiter, strict=True))
    except StopIteration:
        return
    except csv.Error as e:
        raise ShardError(f"{uri}: bad CSV header ({e})") from None
    lines.take()
    width = len(header)
    twice = sorted({c for c in read_columns if header.count(c) > 1})
    if twice:  # a record would keep one of the two values and drop the other uncounted
        raise ShardError(f"{uri}: bad CSV header (column {', '.join(map(repr, twice))} appears twice)")

    def broken(taken: list[str]) -> tuple[None, str, str]:
        lines.back.extend(reversed(taken[1:]))  # parsed again: the rows the quote swallowed
        return None, taken[0].rstrip("\r\n"), "malformed_csv"

    while True:
        reader = csv.reader(lines, delimiter=delimiter, strict=True)
        try:
            for rec in reader:
                taken = lines.take()
                if len(taken) > 1 and any(_is_row(line, delimiter, width) for line in taken[1:]):
                    yield broken(taken)
                elif not rec:
                    continue
                elif len(rec) != width:
                    yield None, delimiter.join(rec), None
                else:
                    yield {h: (v if v != "" else None) for h, v in zip(header, rec, strict=True)}, None, None
            return
        except csv.Error:
            taken = lines.take()
            if not taken:
                raise
            yield broken(taken)  # a fresh reader goes on after the broken record
