"""Standalone tools: `align`, `lineage`, `export`, `server`, `serve-chat`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import typer

from .. import services, store
from .common import _reported_errors, fail

# the parser's choices, spelled here so that `align --help` does not import torch;
# tests/test_cli_help.py checks them against platonic.core.metrics's METRICS and CLAMPS
Metric = Literal["mutual_knn", "cycle_knn", "cka", "cka_rbf", "unbiased_cka", "cknna"]
Clamp = Literal["mean", "exact", "none"]


def server(
    stop: bool = typer.Option(False, "--stop", help="stop this store's server"),
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="the store whose server this is (default $PLATONIC_OUT_DIR, else .platonic)"
    ),
) -> None:
    """Start this store's Prefect server for warm reruns.

    127.0.0.1, a port recorded in OUT_DIR/prefect/server.json, its database
    OUT_DIR/prefect/prefect.db; in the background. While it is up, run/demo/ablate/... on this
    store report to it instead of starting a temporary server (about 10-20 s each). Commands on
    other stores, and other checkouts, never attach to it. Stop it with `platonic server --stop`."""
    from ..project_server import ServerError
    from ..project_server import start as start_server
    from ..project_server import stop as stop_server

    with _reported_errors():
        where = store.check(store.chosen(out_dir))
        store.say(where)
    services.embedded_defaults()
    try:
        if stop:
            rec = stop_server(where)
            typer.echo(f"Prefect server at {rec.ui} stopped" if rec else "no Prefect server of this store is running")
            return
        rec, started = start_server(where, services.healthy)
    except (ServerError, OSError) as e:
        fail(str(e), 1)
    again = f" --out-dir {out_dir}" if out_dir else ""
    if started:
        typer.echo(f"Prefect server up at {rec.url} (UI: {rec.ui}); platonic server --stop{again}")
    else:
        typer.echo(f"this store's Prefect server is already up at {rec.url} (UI: {rec.ui})")


def export(
    run_id: str = typer.Argument(
        ..., help="the MLflow run of a train stage (train:good, train:ntp, ...)", metavar="RUN_ID"
    ),
    dest: Path = typer.Argument(..., help="a new or empty folder", metavar="DEST"),
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="where the run's store lives (default $PLATONIC_OUT_DIR, else .platonic)"
    ),
) -> None:
    """Export a trained text encoder as a Hugging Face folder.

    AutoModel/AutoTokenizer.from_pretrained(DEST) read it; with a model card (README.md) and
    platonic.json (train run, commit, recipe digest, scores, best layer)."""
    from platonic.core.export import check_dest
    from platonic.tasks.run_ids import LineageError, check_run_id

    with _reported_errors():
        out_dir = store.for_reading(out_dir)
    try:  # before MLflow and torch are imported: a malformed run id, a DEST that cannot be one
        check_run_id(run_id, out_dir)
        check_dest(dest)
    except (LineageError, ValueError) as e:
        fail(str(e))
    services.embedded_defaults()
    from platonic.core.export import export_pretrained
    from platonic.tasks.lineage import export_provenance, train_artifact

    try:
        folder, mcfg = train_artifact(run_id, out_dir)
        info = export_pretrained(folder, mcfg, dest, export_provenance(run_id, out_dir))
    except (LineageError, ValueError) as e:
        fail(str(e))
    layer = f", best layer {info['best_layer']}" if "best_layer" in info else ""
    typer.echo(
        f"{dest}: {info['architecture']} ({info['kind']}, {info['views']} views{layer}) + tokenizer; "
        "see README.md and platonic.json"
    )


def lineage(
    run_id: str = typer.Argument(
        ..., help="an MLflow run id: a flow (parent) run, any stage run, or a model's evaluation run", metavar="RUN_ID"
    ),
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="where the default MLflow store lives (default $PLATONIC_OUT_DIR, else .platonic)"
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Trace an evaluation run back to the ingested source."""
    from platonic.tasks.run_ids import LineageError, check_run_id

    with _reported_errors():
        out_dir = store.for_reading(out_dir)
    try:
        check_run_id(run_id, out_dir)  # a malformed run id: before MLflow is imported
    except LineageError as e:
        fail(str(e), 1)
    services.embedded_defaults()
    from platonic.tasks.lineage import print_lineage, trace

    try:
        chain = trace(run_id, out_dir)
    except LineageError as e:
        fail(str(e), 1)
    if as_json:
        typer.echo(json.dumps(chain, indent=1))
    else:
        print_lineage(chain)


def align(
    a: Path = typer.Argument(
        ..., help="features: .npz (layer_i), .npy, .pt or .parquet; (N, D) or (L, N, D)", metavar="A"
    ),
    b: Path = typer.Argument(..., metavar="B"),
    metric: Metric = typer.Option("mutual_knn", "--metric", help="the alignment metric (docs/method.md)"),
    k: int = typer.Option(10, "--k"),
    clamp: Clamp = typer.Option(
        "mean",
        "--clamp",
        help="outlier clamp at the 0.95 quantile of |x|: mean (per-sample quantiles averaged, as the "
        "published PRH numbers), exact (the global sorted quantile) or none",
    ),
    layers: Literal["best", "last"] = typer.Option("best", "--layers", help="best (all layer pairs) or last"),
    backend: Literal["dense", "faiss"] = typer.Option(
        "dense", "--backend", help="kNN search: dense (torch) or faiss (exact, large N)"
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Score the alignment of two feature files.

    As platonic-rep does: the best over layer pairs."""
    from platonic.core.feature_files import check_feature_file

    try:  # both paths before torch is imported: a mistyped one answers at once
        for path in (a, b):
            check_feature_file(path)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    from platonic.core.features import load_features
    from platonic.core.metrics import alignment

    try:
        fa, fb = load_features(a), load_features(b)
        s = alignment(fa, fb, k=k, clamp=clamp, layers=layers, metric=metric, backend=backend)
    except (ValueError, FileNotFoundError, ImportError) as e:
        fail(str(e))
    if as_json:
        typer.echo(json.dumps({**s.as_dict(), "metric": metric, "k": k, "clamp": clamp, "n": int(fa[0].shape[0])}))
    else:
        ci = f"  95% CI [{s.ci_low:.4f}, {s.ci_high:.4f}]" if s.ci_low is not None else ""
        typer.echo(f"{metric} = {s.score:.4f}{ci}  best layers ({s.layer_a}, {s.layer_b}) of ({len(fa)}, {len(fb)})")


def serve_chat(
    model: list[str] = typer.Option(
        ..., "--model", metavar="DIR", help="a local transformers model folder (repeatable); served under this name"
    ),
    port: int = typer.Option(8000, "--port"),
    host: str = typer.Option("127.0.0.1", "--host"),
    fail_every: int = typer.Option(0, "--fail-every", help="every N-th request answers HTTP --fail-status"),
    fail_status: int = typer.Option(500, "--fail-status"),
    delay_every: int = typer.Option(0, "--delay-every", help="every N-th request sleeps --delay-s first (timeouts)"),
    delay_s: float = typer.Option(5.0, "--delay-s"),
    refuse_every: int = typer.Option(0, "--refuse-every", help="every N-th request answers a refusal"),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code"),
) -> None:
    """Serve local models over an OpenAI-compatible chat API.

    POST /v1/chat/completions + GET /v1/models over local transformers models, with failure
    injection: what the openai positives backend talks to, without a GPU."""
    from platonic.flows.serve_chat import Faults, serve

    for m in model:
        if not Path(m).is_dir():
            fail(f"--model {m}: not a folder (build tiny ones with `platonic stand-ins`)")
    serve(model, host, port, Faults(fail_every, fail_status, delay_every, delay_s, refuse_every), trust_remote_code)


def verify(
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="the store whose artifacts to check (default $PLATONIC_OUT_DIR, else .platonic)"
    ),
) -> None:
    """Rehash every committed artifact in the store.

    The sha256 of every file in OUT_DIR/artifacts, not the size+mtime fast path a cache hit
    takes (which trusts a file whose size and mtime did not move). One line per artifact that
    changed, and per symbolic link to a folder (not followed); exit 1 if there is any."""
    from platonic.core.artifacts import Manifest, ManifestError, committed, link_problem
    from platonic.core.artifacts import verify as check

    with _reported_errors():
        out_dir = str(store.check(store.chosen(out_dir)))
    store.say(Path(out_dir))
    root = Path(out_dir) / "artifacts"
    if not root.is_dir():
        fail(f"{root}: no artifact store there (is --out-dir the recipe's out_dir?)")
    folders, links = committed(root)
    changed = 0
    for link in links:  # not followed: what it points to is not the store's
        typer.echo(
            f"not verified: {link_problem(link)} (a run takes no linked artifact folder as a hit, and replaces it)"
        )
    for folder in folders:
        try:
            m = Manifest.read(folder)
        except ManifestError as e:  # unreadable: a cache miss already, the next run rebuilds it
            changed += 1
            typer.echo(f"changed: {folder}: {e}; the next run that needs it rebuilds it")
            continue
        if problem := check(m, full=True):
            # its size and mtime may still match: a cache hit would trust it, so say how to rebuild
            changed += 1
            typer.echo(f"changed: {folder}: {problem}; rebuild it: platonic run RECIPE --force {m.stage}")
    skipped = f", {len(links)} symbolic links not followed" if links else ""
    typer.echo(f"{len(folders)} artifacts verified (every file rehashed): {changed} changed{skipped}")
    if changed or links:
        raise typer.Exit(1)
