"""Ingest: a source -> normalised text Parquet + image index + DuckDB catalog.

Every input row is kept or quarantined with a reason; `in == kept + quarantined`.
The demo's source is the synthetic world; readers for real corpora plug in here.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .catalog import build_catalog, corpus_stats
from .schema import QUARANTINE_SCHEMA, text_table


def check_text(text, max_chars: int) -> str | None:
    """The reason a text is rejected, or None if it is fine."""
    if text is None:
        return "missing_field"
    if not isinstance(text, str):
        return "schema_mismatch"
    if not text.strip():
        return "empty_text"
    if len(text) > max_chars:
        return "over_long_text"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "invalid_utf8"
    return None


def ingest_world(world_dir: Path, cfg, out: Path, source: str = "world") -> dict[str, int]:
    """World alt-texts (train) and eval captions -> corpus/eval Parquet, image index.

    `source` names the input in provenance columns (e.g. "world:<digest>"): a logical name,
    not a filesystem path, so the output bytes do not depend on where the store lives."""
    rows, eval_rows, quarantine = [], [], []
    seen: set[str] = set()
    for fname, kind, sink in (("alt_texts.parquet", "alt", rows), ("eval_captions.parquet", "eval", eval_rows)):
        uri = f"{source}/{fname}"
        t = pq.read_table(world_dir / fname).to_pydict()
        for r, (sid, text) in enumerate(zip(t["scene_id"], t["text"], strict=True)):
            reason = "missing_field" if not sid else check_text(text, cfg.max_text_chars)
            text_id = f"{sid}:{kind}:0"
            if reason is None and text_id in seen:
                reason = "duplicate_key"
            if reason is not None:
                quarantine.append({"source_uri": uri, "source_row": r, "field": "text", "reason": reason, "raw": None if text is None else str(text)})
                continue
            seen.add(text_id)
            sink.append({"image_id": sid, "text_id": text_id, "source_kind": kind, "text": " ".join(text.split()),
                         "source_uri": uri, "source_row": r})
    if not eval_rows:
        raise ValueError(f"ingest: every eval caption in {world_dir / 'eval_captions.parquet'} was quarantined "
                         f"(see quarantine.parquet; ingest.max_text_chars={cfg.max_text_chars})")
    scenes = pq.read_table(world_dir / "scenes.parquet", columns=["scene_id", "split", "render_row"])
    renders_uri = f"{source}/renders.npy"
    images = pa.table({
        "image_id": scenes["scene_id"], "split": scenes["split"], "render_row": scenes["render_row"],
        "uri": pa.array([f"{renders_uri}#{r}" for r in scenes["render_row"].to_pylist()]),
    })
    pq.write_table(text_table(rows), out / "corpus.parquet")
    pq.write_table(text_table(eval_rows), out / "eval.parquet")
    pq.write_table(images, out / "images.parquet")
    pq.write_table(pa.Table.from_pylist(quarantine, schema=QUARANTINE_SCHEMA), out / "quarantine.parquet")
    build_catalog(out / "catalog.duckdb", corpus=out / "corpus.parquet", eval=out / "eval.parquet",
                  images=out / "images.parquet", quarantine=out / "quarantine.parquet")
    n_in = sum(pq.read_metadata(world_dir / f).num_rows for f in ("alt_texts.parquet", "eval_captions.parquet"))
    counts = {"in": n_in, "kept": len(rows) + len(eval_rows), "quarantined": len(quarantine),
              "train_texts": len(rows), "eval_texts": len(eval_rows), "images": images.num_rows}
    assert counts["in"] == counts["kept"] + counts["quarantined"], counts
    return counts


def ingest_stats(out: Path) -> list[dict]:
    return corpus_stats(out / "catalog.duckdb")

