"""The normalised text table every text stage reads and writes (one row per text)."""

from __future__ import annotations

import pyarrow as pa

TEXT_SCHEMA = pa.schema(
    [
        ("image_id", pa.string()),
        ("text_id", pa.string()),
        ("source_kind", pa.string()),  # alt | recap | paraphrase | caption | eval
        ("text", pa.string()),
        ("source_uri", pa.string()),  # where the row came from
        ("source_row", pa.int64()),
        ("generator", pa.string()),  # positives backend ("" for ingested rows)
        ("generator_model", pa.string()),
        ("generator_params", pa.string()),  # JSON: prompt digest, sampling, seed
    ]
)

QUARANTINE_SCHEMA = pa.schema(
    [
        ("source_uri", pa.string()),
        ("source_row", pa.int64()),
        ("field", pa.string()),
        ("reason", pa.string()),
        ("raw", pa.string()),
    ]
)


def text_table(rows: list[dict]) -> pa.Table:
    cols = {f.name: [r.get(f.name, "" if f.type == pa.string() else 0) for r in rows] for f in TEXT_SCHEMA}
    return pa.table(cols, schema=TEXT_SCHEMA)
