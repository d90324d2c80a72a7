"""What every reader shares: the shard and batch types, the errors, the internal column
markers the normaliser reads, and the `Reader` base class.

Every batch holds, per input row: `image_id`, `source_row` (the row's ordinal in the shard),
the text columns named by the reader's `fields`, per-row index columns where a text's index
comes from the data (caption ids), `__mismatch__<col>` flags where a value had the wrong
type, `__over_long__<col>` flags where the reader read only a prefix of a value longer than
the text limit, and provenance columns (everything else)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..shard_paths import SourceError as SourceError  # defined there, without pyarrow (`platonic ingest`'s checks)

if TYPE_CHECKING:
    from ...config import IngestConfig

MISMATCH = "__mismatch__"
# a value known to be longer than ingest.max_text_chars, of which the reader kept only a
# prefix (bounded memory): over_long_text whatever the prefix holds
OVER_LONG = "__over_long__"
REASON = "__reason__"  # a row-level reason found by the reader (e.g. unknown_image), else null
REASON_FIELD = "__reason_field__"
# the default of ingest.max_record_bytes: the longest line or JSON value a reader holds
MAX_RECORD_BYTES = 16 << 20


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


def as_text(values: list[Any]) -> tuple[pa.Array, pa.Array]:
    """Python values -> (binary texts, mismatch flags). Strings are kept as their UTF-8 bytes
    (lone surrogates from `surrogateescape` become the original invalid bytes); a value of
    another type keeps its JSON form and is flagged as a schema mismatch."""
    out, bad = [], []
    for v in values:
        if v is None or isinstance(v, str):
            out.append(None if v is None else utf8_bytes(v))
            bad.append(False)
        else:
            out.append(utf8_bytes(json.dumps(v, ensure_ascii=False)))
            bad.append(True)
    return pa.array(out, pa.binary()), pa.array(bad, pa.bool_())


def utf8_bytes(s: str) -> bytes:
    """A decoded value back to its bytes: lone surrogates from `surrogateescape` become the
    original invalid bytes; any other lone surrogate (a JSON escape such as "\\ud800" decodes
    to one) becomes its 3-byte form, which is not UTF-8 either: the text is then quarantined
    as invalid_utf8 instead of the whole shard failing to encode it."""
    try:
        return s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass")


def is_utf8(s: str) -> bool:
    """Can this str be written as UTF-8 (it holds no lone surrogate)?"""
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def safe_str(s: str | None) -> str | None:
    """A str an Arrow string column takes: a lone surrogate (an undecodable byte of a file or
    member name, a JSON "\\ud800" escape) is written as a backslash escape. Valid text is
    returned as it is."""
    if s is None or s.isascii() or is_utf8(s):
        return s
    return utf8_bytes(s).decode("utf-8", "backslashreplace")


def id_array(ids: list[str | None]) -> tuple[pa.Array, list[bool]]:
    """Image ids as a string column, and per id whether it held a lone surrogate (escaped in
    the column; the reader quarantines its row as invalid_utf8 on the id field)."""
    try:
        return pa.array(ids, pa.string()), [False] * len(ids)
    except UnicodeEncodeError:
        bad = [v is not None and not is_utf8(v) for v in ids]
        return pa.array([safe_str(v) for v in ids], pa.string()), bad


def bounded_lines(fh, limit: int, chunk: int = 1 << 20) -> Iterator[tuple[bytes, bool]]:
    """(line, over) per line of a binary file, its line end kept. A line ends at \n, \r\n or
    a bare \r (old-Mac files: read as lines at \n only, 100 such JSONL rows were one row). A
    line whose content is longer than `limit` bytes yields only its first `limit` bytes with
    over=True, and the rest of it is read in chunks and dropped, so memory is bounded by
    `limit` + `chunk` whatever the file."""
    buf, dropping = b"", False  # dropping: inside a line past `limit`, read to its end, not kept
    while True:
        data = fh.read(chunk)
        lines = (buf + data).splitlines(keepends=True)  # bytes: \n, \r\n and \r only
        # the last piece may go on in the next read (a \r last may be half of \r\n)
        buf = lines.pop() if data and lines and not lines[-1].endswith(b"\n") else b""
        for line in lines:
            if dropping:  # the end of a line already cut
                dropping = False
                continue
            end = 2 if line.endswith(b"\r\n") else 1 if line.endswith((b"\n", b"\r")) else 0
            yield (line[:limit], True) if len(line) - end > limit else (line, False)
        if not data:
            return
        held = buf.endswith(b"\r")  # a line end, or half of one: kept for the next read
        if dropping or len(buf) - held > limit:
            if not dropping:
                yield buf[:limit], True
            dropping = True
            buf = b"\r" if held else b""


def str_or_none(v: Any) -> str | None:
    return None if v is None or v == "" else safe_str(str(v))


class Reader:
    """One source format. Subclasses set `fields` and implement `batches(shard)`."""

    format = ""

    def __init__(self, cfg: IngestConfig):
        self.cfg = cfg
        self.batch_rows = cfg.batch_rows

    @property
    def fields(self) -> list[TextField]:
        raise NotImplementedError

    def batches(self, shard: Shard) -> Iterator[Batch]:
        raise NotImplementedError

    def describe(self) -> dict:
        """What the reader does, for the shard cache key: same description, same output."""
        return {
            "format": self.format,
            "fields": [f.__dict__ for f in self.fields],
            "id_column": getattr(self, "id_column", None),
            "max_record_bytes": self.cfg.max_record_bytes,  # a longer record is quarantined, unread
        }


def mapped_fields(
    text_columns: dict[str, str], index_column: str | None, optional: set[str] = frozenset()
) -> list[TextField]:
    """column -> kind mapping as fields; the n-th column of a kind has index n."""
    seen: dict[str, int] = {}
    out = []
    for col, kind in text_columns.items():
        out.append(TextField(col, kind, seen.get(kind, 0), index_column, col in optional))
        seen[kind] = seen.get(kind, 0) + 1
    return out
