"""Dedup: remove training texts that match an eval caption (contamination).

Level implemented here: exact after normalisation (NFKC, case, punctuation, whitespace),
as a DuckDB join (`sql/dedup_exact.sql`). Policy: drop the matching texts, or the whole
image group they belong to. Counts add up: in == kept + removed.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .data.catalog import sql

_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)


def normalize_text(text: str) -> str:
    """NFKC, lower case, punctuation removed, whitespace collapsed."""
    t = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_PUNCT.sub(" ", t).split())


def dedup(texts: Path, eval_texts: Path, cfg, out: Path) -> dict[str, int]:
    train = pq.read_table(texts)
    ev = pq.read_table(eval_texts, columns=["text_id", "image_id", "text"])
    con = duckdb.connect()
    try:
        con.register("train", pa.table({
            "text_id": train["text_id"], "image_id": train["image_id"], "source_kind": train["source_kind"],
            "norm": [normalize_text(t) for t in train["text"].to_pylist()] if cfg.enabled else [None] * train.num_rows,
        }))
        con.register("eval", pa.table({
            "text_id": ev["text_id"], "image_id": ev["image_id"], "norm": [normalize_text(t) for t in ev["text"].to_pylist()],
        }))
        con.execute(sql("dedup_exact", policy=cfg.policy))
        removed = con.execute("SELECT text_id, eval_text_id, reason FROM removed ORDER BY text_id").fetchall()
        by_kind = dict(con.execute(
            "SELECT source_kind, count(*) FROM train WHERE text_id IN (SELECT text_id FROM removed) GROUP BY 1").fetchall())
        eval_hit = con.execute("SELECT count(DISTINCT eval_text_id) FROM matches").fetchone()[0]
    finally:
        con.close()
    lookup = {text_id: {"eval_text_id": e, "reason": r} for text_id, e, r in removed}
    removed_ids = set(lookup)
    keep_mask = pa.array([t not in removed_ids for t in train["text_id"].to_pylist()])
    kept = train.filter(keep_mask)
    removed_rows = train.filter(pc.invert(keep_mask))
    removed_rows = removed_rows.append_column("eval_text_id", pa.array([lookup[t]["eval_text_id"] for t in removed_rows["text_id"].to_pylist()]))
    removed_rows = removed_rows.append_column("reason", pa.array([lookup[t]["reason"] for t in removed_rows["text_id"].to_pylist()]))
    pq.write_table(kept, out / "texts.parquet")
    pq.write_table(removed_rows, out / "removed.parquet")
    counts = {"in": train.num_rows, "kept": kept.num_rows, "removed": removed_rows.num_rows,
              "eval_captions": ev.num_rows, "eval_captions_matched": int(eval_hit)}
    counts.update({f"removed_{k}": int(v) for k, v in sorted(by_kind.items())})
    assert counts["in"] == counts["kept"] + counts["removed"], counts
    (out / "report.json").write_text(json.dumps({"policy": cfg.policy, "level": "exact_normalised", **counts}, indent=1))
    return counts
