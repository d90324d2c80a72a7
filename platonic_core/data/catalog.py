"""DuckDB catalog: the SQL in `sql/` applied to an artifact's Parquet files.

Two layouts share the statistics views of `sql/corpus_stats.sql`:
- the synthetic world's ingest (`sql/catalog.sql`): small, copied into tables;
- a real corpus (`sql/catalog_shards.sql`): views over the Hive-partitioned shards, with
  paths relative to the catalog's folder, so nothing is copied and the folder can move.
Open a catalog with `open_catalog`, which points DuckDB's file search path at that folder.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import duckdb
import pyarrow as pa

from ..resources import read_resource

STATS_VIEWS = ("stats_sources", "stats_texts_per_image", "stats_lengths", "stats_quarantine")


def sql(name: str, **params: str) -> str:
    """The text of `sql/<name>.sql` with `{param}` placeholders filled."""
    text = read_resource("sql", f"{name}.sql")
    for k, v in params.items():
        text = text.replace("{" + k + "}", v.replace("'", "''"))
    return text


def duckdb_literal(path: str | Path) -> str:
    """A path DuckDB reads as that one file or folder: DuckDB takes any path with a glob
    character as a pattern, even when a file of that very name exists (`x[1].parquet` reads
    `x1.parquet`); escaped as `glob.escape` does it (`[[]`, `[*]`, `[?]`), it is literal. A
    pattern may follow: `duckdb_literal(folder) + "/*/*.parquet"`."""
    return glob.escape(str(path))


def open_catalog(db_path: Path, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """A connection to a catalog whose relative Parquet paths resolve beside it."""
    db_path = Path(db_path)
    if read_only and not db_path.is_file():
        raise FileNotFoundError(f"{db_path}: no DuckDB catalog here")
    con = duckdb.connect(str(db_path), read_only=read_only)
    con.execute(f"SET file_search_path = '{str(db_path.resolve().parent).replace(chr(39), chr(39) * 2)}'")
    return con


def build_catalog(db_path: Path, **parquet_paths: Path) -> None:
    """The world's catalog: tables copied from the given Parquet files, plus stats views."""
    con = duckdb.connect(str(db_path))
    try:
        con.execute(sql("catalog", **{k: duckdb_literal(Path(v).resolve()) for k, v in parquet_paths.items()}))
        con.execute(sql("corpus_stats"))
    finally:
        con.close()


def build_corpus_catalog(out: Path, images: bool = False) -> Path:
    """A real corpus's catalog: views over `out`'s partitions, plus stats views."""
    from .schema import QUARANTINE_SCHEMA, TEXT_SCHEMA

    db = Path(out) / "catalog.duckdb"
    db.unlink(missing_ok=True)
    empty = {"texts": TEXT_SCHEMA, "quarantine": QUARANTINE_SCHEMA}
    con = open_catalog(db, read_only=False)
    try:
        for stmt in (s for s in sql("catalog_shards").split(";") if s.strip()):
            view = re.search(r"CREATE OR REPLACE VIEW (\w+)", stmt)
            name = view.group(1) if view else ""
            if name in empty and not any((Path(out) / name).glob("*/*.parquet")):
                # no shard could be read: an empty table of the right columns, not a failing view
                con.register(
                    "empty_partition", empty[name].empty_table().append_column("shard", pa.array([], pa.string()))
                )
                con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM empty_partition")
                con.unregister("empty_partition")
            else:
                con.execute(stmt)
        if images:
            con.execute(sql("catalog_images"))
        con.execute(sql("corpus_stats"))
    finally:
        con.close()
    return db


def _rows(con: duckdb.DuckDBPyConnection, query: str) -> list[dict]:
    cur = con.execute(query)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def corpus_stats(db_path: Path) -> list[dict]:
    """Texts per source kind (count, images, lengths): one row per kind."""
    con = open_catalog(db_path)
    try:
        return _rows(con, "SELECT * FROM stats_sources")
    finally:
        con.close()


def corpus_report(db_path: Path) -> dict[str, list[dict]]:
    """Every statistics view of a catalog: sources, texts per image, lengths, quarantine."""
    con = open_catalog(db_path)
    try:
        return {v.removeprefix("stats_"): _rows(con, f"SELECT * FROM {v}") for v in STATS_VIEWS}
    finally:
        con.close()
