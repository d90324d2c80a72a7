"""Ingest: a source -> normalised text Parquet + image index + DuckDB catalog.

Every input row is kept or quarantined with a reason; `in == kept + quarantined`.
This module holds the text rules (`check_texts`, vectorised; `check_text`, one value) and
the synthetic world's ingest; real corpora go through `readers/` and `corpus.py`, which
apply the same rules shard by shard.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .catalog import build_catalog, corpus_stats
from .schema import QUARANTINE_SCHEMA, text_table

if TYPE_CHECKING:
    from ..config import IngestConfig

# Whitespace as Python's str.split() sees it (Unicode separators, C0 separators, NEL),
# written for RE2 so the rule runs vectorised over Arrow arrays.
_WS = r"[\s\p{Z}\x{85}\x{0b}\x{1c}-\x{1f}]"
_NEEDS_NORMALISING = rf"{_WS}{_WS}|^{_WS}|{_WS}$|[^ \PZ]|[\t\n\r\f\x{{85}}\x{{0b}}\x{{1c}}-\x{{1f}}]"
# Control characters (Unicode Cc) but those whitespace is made of (tab, newlines, \x1c-\x1f,
# NEL: they normalise to a space): NUL, ESC, DEL, C1 controls, ... mean a broken or hostile
# writer, and would reach tokenizers, terminals and downstream tools as they are.
_CONTROL = r"[\x{00}-\x{08}\x{0e}-\x{1b}\x{7f}-\x{84}\x{86}-\x{9f}]"
_SUSPECT = f"{_NEEDS_NORMALISING}|{_CONTROL}"


def utf8_valid(values: pa.Array) -> pa.Array:
    """Per value: is it valid UTF-8 (nulls stay null)? Arrow has no per-value kernel, so the
    whole array is validated at once (the common case) and only an invalid one is checked
    value by value."""
    as_str = values.view(pa.string()) if pa.types.is_binary(values.type) else values
    try:
        as_str.validate(full=True)
        return pc.is_valid(values)  # true where non-null
    except pa.ArrowInvalid:
        raw = values.view(pa.binary()) if pa.types.is_string(values.type) else values

        def ok(b: bytes | None) -> bool | None:
            if b is None:
                return None
            try:
                b.decode("utf-8")
                return True
            except UnicodeDecodeError:
                return False

        return pa.array([ok(b) for b in raw.to_pylist()], pa.bool_())


def normalize_whitespace(texts: pa.Array) -> pa.Array:
    """Runs of whitespace -> one space, trimmed: `" ".join(t.split())`, vectorised. Only
    the values that need it go through the (slow) regex replace. Input must be valid UTF-8."""
    texts = texts.cast(pa.string()) if not pa.types.is_string(texts.type) else texts
    needs = pc.fill_null(pc.match_substring_regex(texts, _NEEDS_NORMALISING), False)
    if not pc.any(needs).as_py():
        return texts
    fixed = pc.utf8_trim(pc.replace_substring_regex(texts.filter(needs), _WS + "+", " "), " ")
    return pc.replace_with_mask(texts, needs, fixed)


def check_texts(texts: pa.Array, max_chars: int) -> tuple[pa.Array, pa.Array]:
    """(reason each text is rejected or null, the text with whitespace normalised), both
    vectorised; `texts` is string or binary (undecoded bytes). The rules, in order:
    missing_field (null), invalid_utf8, control_characters (a control character that is
    not whitespace: NUL, ESC, DEL, ...), empty_text (whitespace only), over_long_text
    (> max_chars characters). Normalised texts are null where the bytes are not UTF-8."""
    valid = utf8_valid(texts)
    as_str = texts.view(pa.string()) if pa.types.is_binary(texts.type) else texts
    invalid = pc.invert(pc.fill_null(valid, True))  # bytes that are not UTF-8 (nulls are not)
    # a copy of every text only when some are not UTF-8: the common batch is used as it is
    clean = pc.if_else(invalid, pa.scalar(None, pa.string()), as_str) if pc.any(invalid).as_py() else as_str
    # a cheap pass over every text finds the few that need a closer look (whitespace to
    # normalise, a control character); both rules then run on those alone
    suspect = _suspects(clean)
    control = pa.array(np.zeros(len(clean), bool))
    normalised = clean
    if pc.any(suspect).as_py():
        few = clean.filter(suspect)
        control = pc.replace_with_mask(control, suspect, pc.match_substring_regex(few, _CONTROL))
        normalised = pc.replace_with_mask(clean, suspect, normalize_whitespace(few))
    reason = pc.case_when(
        pc.make_struct(
            pc.is_null(texts),
            invalid,
            control,
            pc.equal(pc.binary_length(normalised), 0),
            _over_long(clean, max_chars),
        ),
        "missing_field",
        "invalid_utf8",
        "control_characters",
        "empty_text",
        "over_long_text",
    )
    return reason, normalised


def _suspects(texts: pa.Array) -> pa.Array:
    """Texts that may match `_SUSPECT` (a superset: those with a byte outside printable
    ASCII, a leading or trailing space, or two spaces in a row). For printable ASCII the
    regex can only match a space at either end or two in a row, so everything else it
    matches has a byte outside 0x20-0x7e. Arrow's byte kernels and one numpy scan cost a
    third of one RE2 pass of `_SUSPECT` over every text, which was the largest cost of an
    ingest (benchmarks/bench_ingest.py)."""
    odd = pc.invert(pc.ascii_is_printable(texts))
    edge = pc.or_(pc.starts_with(texts, " "), pc.ends_with(texts, " "))
    return pc.fill_null(pc.or_(pc.or_(odd, edge), pa.array(_double_spaces(texts))), False)


def _double_spaces(texts: pa.Array) -> np.ndarray:
    """Per text of a string array: does it hold two spaces in a row? Vectorised over the
    values buffer: byte pairs read as uint16 at even and at odd positions."""
    n = len(texts)
    if n == 0:  # an empty array may have no offsets buffer at all
        return np.zeros(0, bool)
    width = np.int64 if pa.types.is_large_string(texts.type) else np.int32  # string's offsets are int32
    offsets = np.frombuffer(texts.buffers()[1], width, n + 1, texts.offset * np.dtype(width).itemsize)
    data = texts.buffers()[2]
    if data is None or offsets[-1] <= offsets[0]:
        return np.zeros(n, bool)
    values = np.frombuffer(data, np.uint8)[offsets[0] : offsets[-1]]
    size = len(values)  # byte pairs (p, p + 1), p even then p odd
    even = np.flatnonzero(values[: size // 2 * 2].view(np.uint16) == 0x2020) * 2
    odd = np.flatnonzero(values[1 : 1 + (size - 1) // 2 * 2].view(np.uint16) == 0x2020) * 2 + 1
    pairs = np.concatenate([even, odd])  # first byte of each "  ", relative to offsets[0]
    found = np.zeros(n, bool)
    if len(pairs):
        row = np.searchsorted(offsets[1:] - offsets[0], pairs, side="right")  # the text holding byte p
        inside = pairs + 1 < offsets[row + 1] - offsets[0]  # and p + 1 in the same text
        found[row[inside]] = True
    return found


def _over_long(texts: pa.Array, max_chars: int) -> pa.Array:
    """More than `max_chars` characters? Counted only where the bytes exceed it (a
    character is at least one byte)."""
    over = pc.greater(pc.binary_length(texts), max_chars)
    if not pc.any(over).as_py():
        return over
    return pc.and_(over, pc.greater(pc.utf8_length(texts), max_chars))


def text_reasons(texts: pa.Array, max_chars: int) -> pa.Array:
    """The reason each text is rejected (null: fine): see `check_texts`."""
    return check_texts(texts, max_chars)[0]


def check_text(text, max_chars: int) -> str | None:
    """The reason one text is rejected, or None if it is fine: the scalar form of
    `text_reasons` (plus `schema_mismatch` for a value that is not a string)."""
    if text is None:
        return "missing_field"
    if not isinstance(text, str):
        return "schema_mismatch"
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: undecodable bytes read with surrogateescape
        return "invalid_utf8"
    return text_reasons(pa.array([data], pa.binary()), max_chars)[0].as_py()


def ingest_world(world_dir: Path, cfg: IngestConfig, out: Path, source: str = "world") -> dict[str, int]:
    """World alt-texts (train) and eval captions -> corpus/eval Parquet, image index.

    `source` names the input in provenance columns (e.g. "world:<digest>"): a logical name,
    not a filesystem path, so the output bytes do not depend on where the store lives."""
    rows, eval_rows, quarantine = [], [], []
    seen: set[str] = set()
    for fname, kind, sink in (("alt_texts.parquet", "alt", rows), ("eval_captions.parquet", "eval", eval_rows)):
        uri = f"{source}/{fname}"
        table = pq.read_table(world_dir / fname)
        reasons, normalised = check_texts(table["text"].combine_chunks(), cfg.max_text_chars)
        t = table.to_pydict()
        for r, (sid, text, text_reason, norm) in enumerate(
            zip(t["scene_id"], t["text"], reasons.to_pylist(), normalised.to_pylist(), strict=True)
        ):
            reason = "missing_field" if not sid else text_reason
            text_id = f"{sid}:{kind}:0"
            if reason is None and text_id in seen:
                reason = "duplicate_key"
            if reason is not None:
                quarantine.append(
                    {
                        "source_uri": uri,
                        "source_row": r,
                        "field": "text",
                        "reason": reason,
                        "raw": None if text is None else str(text),
                    }
                )
                continue
            seen.add(text_id)
            sink.append(
                {
                    "image_id": sid,
                    "text_id": text_id,
                    "source_kind": kind,
                    "text": norm,
                    "source_uri": uri,
                    "source_row": r,
                }
            )
    if not eval_rows:
        raise ValueError(
            f"ingest: every eval caption in {world_dir / 'eval_captions.parquet'} was quarantined "
            f"(see quarantine.parquet; ingest.max_text_chars={cfg.max_text_chars})"
        )
    scenes = pq.read_table(world_dir / "scenes.parquet", columns=["scene_id", "split", "render_row"])
    renders_uri = f"{source}/renders.npy"
    images = pa.table(
        {
            "image_id": scenes["scene_id"],
            "split": scenes["split"],
            "render_row": scenes["render_row"],
            "uri": pa.array([f"{renders_uri}#{r}" for r in scenes["render_row"].to_pylist()]),
        }
    )
    pq.write_table(text_table(rows), out / "corpus.parquet")
    pq.write_table(text_table(eval_rows), out / "eval.parquet")
    pq.write_table(images, out / "images.parquet")
    pq.write_table(pa.Table.from_pylist(quarantine, schema=QUARANTINE_SCHEMA), out / "quarantine.parquet")
    build_catalog(
        out / "catalog.duckdb",
        corpus=out / "corpus.parquet",
        eval=out / "eval.parquet",
        images=out / "images.parquet",
        quarantine=out / "quarantine.parquet",
    )
    n_in = sum(pq.read_metadata(world_dir / f).num_rows for f in ("alt_texts.parquet", "eval_captions.parquet"))
    counts = {
        "in": n_in,
        "kept": len(rows) + len(eval_rows),
        "quarantined": len(quarantine),
        "train_texts": len(rows),
        "eval_texts": len(eval_rows),
        "images": images.num_rows,
    }
    assert counts["in"] == counts["kept"] + counts["quarantined"], counts
    return counts


def ingest_stats(out: Path) -> list[dict]:
    return corpus_stats(out / "catalog.duckdb")
