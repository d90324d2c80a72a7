"""The `none` positives backend: no extra texts; the corpus's own texts are the positives
(WordNet: a synset's lemma list, definition and examples are its views)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .images import input_shards


def copy_corpus(ingest_dir: Path, out: Path) -> dict[str, int]:
    """The ingested texts, every shard in order, as out/texts.parquet (what dedup reads)."""
    tables = [pq.read_table(path) for _, path in input_shards(ingest_dir)]
    if not tables:
        raise ValueError(f"{ingest_dir}: the ingest artifact holds no texts")
    t = pa.concat_tables(tables, promote_options="default")
    pq.write_table(t, out / "texts.parquet")
    return {"texts": t.num_rows, "generated": 0, "requested": 0}
