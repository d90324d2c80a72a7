"""DuckDB catalog: the SQL in `sql/` applied to an artifact's Parquet files."""

from __future__ import annotations

from pathlib import Path

import duckdb

from ..resources import read_resource


def sql(name: str, **params: str) -> str:
    """The text of `sql/<name>.sql` with `{param}` placeholders filled."""
    text = read_resource("sql", f"{name}.sql")
    for k, v in params.items():
        text = text.replace("{" + k + "}", v.replace("'", "''"))
    return text


def build_catalog(db_path: Path, **parquet_paths: Path) -> None:
    con = duckdb.connect(str(db_path))
    try:
        con.execute(sql("catalog", **{k: str(Path(v).resolve()) for k, v in parquet_paths.items()}))
    finally:
        con.close()


def corpus_stats(db_path: Path) -> list[dict]:
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        cur = con.execute(sql("corpus_stats"))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
    finally:
        con.close()
