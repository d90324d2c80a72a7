"""Corpora in and checked: `ingest`, `corpus stats`, `audit`."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Literal

import typer

from platonic.core.config import ConfigError, load_config

from .. import runlog, services, store
from .common import _reported_errors, fail


def ingest(
    sources: list[str] = typer.Argument(
        ..., help="shard files, folders, globs, fsspec URIs or hf://datasets/<org>/<name>[@rev]", metavar="SOURCE"
    ),
    fmt: Literal["recap", "wds", "coco", "jsonl"] = typer.Option(
        ..., "--format", help="the shards' layout (jsonl also reads .csv/.tsv)"
    ),
    out: Path | None = typer.Option(
        None, "--out", help="output folder (default: the store, .platonic/artifacts/ingest/<key>)"
    ),
    config: Path | None = typer.Option(None, "--config", help="take the ingest section from this recipe"),
    sets: list[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="override a field, e.g. ingest.text_columns={caption: alt}"
    ),
    id_column: str | None = typer.Option(
        None, "--id-column", help="the image id column (jsonl/wds; default per format)"
    ),
    text_column: list[str] = typer.Option(
        [], "--text-column", metavar="COLUMN=KIND", help="COLUMN=KIND, e.g. caption=alt (repeatable)"
    ),
    index_column: str | None = typer.Option(
        None, "--index-column", help="a per-row text index (several rows per image)"
    ),
    revision: str | None = typer.Option(None, "--revision", help="hub sources: the revision to pin"),
    include: list[str] = typer.Option(
        [], "--include", metavar="PATTERN", help="only shards matching this pattern (repeatable)"
    ),
    force: bool = typer.Option(False, "--force", help="re-run the stage even on a cache hit (shards stay cached)"),
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="where the shard cache and MLflow live (default .platonic)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the counts as JSON"),
) -> None:
    """Ingest a real corpus into Parquet and a DuckDB catalog.

    Shards -> normalised Parquet partitions + DuckDB catalog.
    Prints texts in / kept / quarantined by reason, per shard. A shard that cannot be read
    is reported (exit code 1) and the others still complete; rerun after fixing it: the
    shards already ingested are not redone."""
    with _reported_errors():
        overrides = [
            f"ingest.source={fmt}",
            f"ingest.paths={json.dumps(sources)}",
            *([f"ingest.revision={json.dumps(revision)}"] if revision else []),
            *([f"ingest.allow_patterns={json.dumps(include)}"] if include else []),
            *([f"ingest.id_column={json.dumps(id_column)}"] if id_column else []),
            *([f"ingest.index_column={json.dumps(index_column)}"] if index_column else []),
            *([f"ingest.text_columns={json.dumps(_column_map(text_column))}"] if text_column else []),
            *sets,
        ]
        cfg = load_config(config, store.out_dir_sets(overrides, out_dir))
        where = store.check_for_writing(cfg.out_dir, "platonic ingest SOURCE... --out-dir COPY")
        store.say(where)
        from platonic.core.data.shard_paths import check_sources

        # a local path that names nothing (or no shard): one line now, not after Prefect and MLflow start
        check_sources(cfg.ingest.paths, cfg.ingest.source, cfg.ingest.allow_patterns or None)
        services.embedded_defaults()
        from platonic.core.contract import IncompleteArtifact

        from ..standalone import run_ingest

        runlog.start(where)  # the full log in the store; the terminal without tracebacks

        try:
            m, failed = run_ingest(cfg, out, force), None
        except IncompleteArtifact as e:
            m, failed = e.manifest, e
        report = {
            "out": m.uri,
            "digest": m.digest,
            "cache_key": m.cache_key,
            "run_id": m.producer_run_id,
            "counts": m.counts,
            "failed_shards": m.stats.get("failed_shards", []),
            "catalog": str(Path(m.uri) / "catalog.duckdb"),
        }
        if as_json:
            typer.echo(json.dumps(report, indent=1))
        else:
            _print_ingest(report, Path(m.uri))
        if failed is not None:
            fail(str(failed), 1)
        if (empty := _nothing_kept(m.counts, Path(m.uri), fmt)) is not None:
            fail(empty, 1)


def _nothing_kept(counts: dict, out: Path, fmt: str) -> str | None:
    """The line for shards that were read but kept no text (a file of another format, random
    bytes): every row quarantined, counted, and the command still looked successful."""
    import pyarrow.parquet as pq

    shards = pq.read_table(out / "shards.parquet").to_pylist() if (out / "shards.parquet").is_file() else []
    empty = [s["shard"] for s in shards if s["status"] != "failed" and s["texts_in"] > 0 and s["kept"] == 0]
    if not empty:
        return None
    reasons = {k.removeprefix("quarantined_"): v for k, v in counts.items() if k.startswith("quarantined_") and v}
    why = ", ".join(f"{r} {n:,}" for r, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
    named = ", ".join(empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
    return (
        f"{len(empty)} of {len(shards)} shards kept no text, every row quarantined ({named}; {why}): "
        f"is the input {fmt}? `platonic corpus stats --dir {out}` shows the quarantine"
    )


def _column_map(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        col, sep, kind = item.partition("=")
        if not sep or not col or not kind:
            raise ConfigError(f"--text-column {item!r}: expected COLUMN=KIND, e.g. caption=alt")
        out[col] = kind
    return out


def _print_ingest(report: dict, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=max(120, Console().width), highlight=False)
    c = report["counts"]
    con.print(
        f"texts in {c['in']:,} = kept {c['kept']:,} + quarantined {c['quarantined']:,}"
        f"   ({c['rows_in']:,} input rows; shards: {c['shards']} = {c['shards_ingested']} ingested + "
        f"{c['shards_cached']} cached + {c['shards_failed']} failed)"
    )
    reasons = {k.removeprefix("quarantined_"): v for k, v in c.items() if k.startswith("quarantined_")}
    if reasons:
        t = Table(title="quarantined by reason")
        t.add_column("reason")
        t.add_column("texts", justify="right")
        for r, n in sorted(reasons.items()):
            t.add_row(r, f"{n:,}")
        con.print(t)
    import pyarrow.parquet as pq

    shards = pq.read_table(out / "shards.parquet").to_pylist() if (out / "shards.parquet").is_file() else []
    if shards:
        t = Table(title="shards")
        for col in ("shard", "status", "texts in", "kept", "quarantined", "error"):
            t.add_column(col, overflow="fold")
        for s in shards[:50]:
            t.add_row(
                s["shard"], s["status"], f"{s['texts_in']:,}", f"{s['kept']:,}", f"{s['quarantined']:,}", s["error"]
            )
        if len(shards) > 50:
            t.add_row(f"... {len(shards) - 50} more (shards.parquet)", "", "", "", "", "")
        con.print(t)
    con.print(f"output:   {report['out']}")
    con.print(f"catalog:  {report['catalog']}   (platonic corpus stats --dir {report['out']})")
    con.print(f"MLflow:   run {report['run_id']}")


corpus_app = typer.Typer(no_args_is_help=True, help="Inspect an ingested corpus.")


@corpus_app.command("stats")
def corpus_stats_cmd(
    folder: Path | None = typer.Option(
        None, "--dir", help="an ingest output folder (default: the latest ingest artifact)"
    ),
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="the store searched when --dir is not given (default $PLATONIC_OUT_DIR, else .platonic)"
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Texts per source kind, texts per image, length distributions, quarantine reasons."""
    from platonic.core.data.catalog import corpus_report

    from ..standalone import latest_ingest

    if folder is None:
        out_dir = store.chosen(out_dir)
        store.say(Path(out_dir).resolve())
    try:
        folder = folder or latest_ingest(out_dir)
        report = corpus_report(folder / "catalog.duckdb")
    except (FileNotFoundError, OSError) as e:
        fail(str(e), 1)
    except Exception as e:  # duckdb: a catalog whose partitions are gone
        fail(f"{folder}: cannot read the catalog ({type(e).__name__}: {e})", 1)
    if as_json:
        typer.echo(json.dumps({"dir": str(folder), **report}, indent=1, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    con = Console(width=max(120, Console().width), highlight=False)
    con.print(f"corpus: {folder}")
    titles = {
        "sources": "texts per source kind",
        "texts_per_image": "texts per image",
        "lengths": "length distribution (characters; words)",
        "quarantine": "quarantined texts",
    }
    for name, rows in report.items():
        t = Table(title=titles[name])
        if not rows:
            con.print(f"{titles[name]}: none")
            continue
        for col in rows[0]:
            t.add_column(col, justify="left" if col in ("source_kind", "reason", "field") else "right")
        for r in rows[:40]:
            t.add_row(*(f"{v:,}" if isinstance(v, int) else str(v) for v in r.values()))
        if len(rows) > 40:
            t.add_row(f"... {len(rows) - 40} more", *[""] * (len(rows[0]) - 1))
        con.print(t)


def audit(
    corpus: list[str] = typer.Option(
        ...,
        "--corpus",
        metavar="PATH",
        help="Parquet in the text schema: file, glob, folder or artifact folder (repeatable)",
    ),
    evals: list[str] = typer.Option(
        ...,
        "--eval",
        metavar="SPEC",
        help="wit_1024 | prh:SOURCE | coco_karpathy:JSON | flickr_karpathy:JSON (test split; JSON@val for "
        "another) | coco_captions:JSON | world:DIR | captions:FILE (repeatable)",
    ),
    levels: str = typer.Option("exact,near", "--levels", help="comma-separated: exact, near, embed"),
    sets: list[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="override a field: near.threshold=0.6, embed.threshold=0.85, ..."
    ),
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="where artifacts and MLflow live (default $PLATONIC_OUT_DIR, else .platonic)"
    ),
    force: bool = typer.Option(False, "--force", help="re-run even if this audit is cached"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Contamination audit of eval sets against a corpus.

    Which eval captions (and images) have a match in a training corpus, per level."""
    from pydantic import ValidationError

    from platonic.core.config import AuditConfig, _format_validation_error, apply_overrides

    with _reported_errors():
        raw = apply_overrides(
            {
                "corpus": corpus,
                "eval": evals,
                "out_dir": store.chosen(out_dir),
                "levels": [lv.strip() for lv in levels.split(",") if lv.strip()],
            },
            sets,
        )
        try:
            cfg = AuditConfig.model_validate(raw)
        except ValidationError as e:
            raise ConfigError(_format_validation_error(e, "audit")) from None
        where = store.check_for_writing(cfg.out_dir, "platonic audit --corpus ... --eval ... --out-dir COPY")
        store.say(where)
        services.embedded_defaults()
        where.mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            from ..standalone import run_audit

            runlog.start(where)

            results = run_audit(cfg.model_dump(mode="json"), force=force)
    if as_json:
        typer.echo(json.dumps(results, indent=1))
    else:
        typer.echo((Path(results["output_dir"]) / "summary.md").read_text())
        typer.echo(
            f"matches: {results['output_dir']}/matches.parquet   artifact: {results['artifact']}"
            + ("   (cached)" if results["cache_hit"] else "")
        )
        typer.echo(f"MLflow run id: {results['run_id']}")
