"""Standalone tools: `align`, `lineage`, `export`, `server`, `serve-chat`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import typer

from .. import services
from .common import fail


def server(
    stop: bool = typer.Option(False, "--stop", help="stop the server this command started"),
) -> None:
    """Start a Prefect server on this machine (127.0.0.1:4200, in the background) for warm reruns:
    while it is up, run/demo/ablate/... report to it instead of starting a temporary server
    (about 10-20 s each). Its UI: http://127.0.0.1:4200. Stop it with `platonic server --stop`."""
    services.embedded_defaults()
    if stop:
        args = ["server", "stop"]
    elif services.local_server_up():
        typer.echo(f"a Prefect server is already up at {services.LOCAL_SERVER}")
        return
    else:
        args = ["server", "start", "--host", "127.0.0.1", "--port", "4200", "--background", "--analytics-off"]
    quiet = None if stop else subprocess.DEVNULL  # start: our one line below, not Prefect's banner
    rc = subprocess.run([sys.executable, "-m", "prefect", *args], stdout=quiet).returncode
    if rc or stop:
        sys.exit(rc)
    deadline = time.monotonic() + 180  # it answers after its database migrations (seconds to a minute)
    while not services.local_server_up():
        if time.monotonic() > deadline:
            fail(f"the Prefect server did not answer at {services.LOCAL_SERVER} within 180 s", 1)
        time.sleep(0.5)
    typer.echo(f"Prefect server up at {services.LOCAL_SERVER} (UI: http://127.0.0.1:4200); platonic server --stop")


def export(
    run_id: str = typer.Argument(..., help="the MLflow run of a train stage (train:good, train:ntp, ...)"),
    dest: Path = typer.Argument(..., help="a new or empty folder"),
    out_dir: str = typer.Option(".platonic", "--out-dir", help="where the run's store lives"),
) -> None:
    """A trained text encoder as a Hugging Face folder: AutoModel/AutoTokenizer.from_pretrained(DEST),
    with a model card (README.md) and platonic.json (train run, commit, recipe digest, scores, best layer)."""
    services.embedded_defaults()
    from platonic.core.export import export_pretrained
    from platonic.tasks.lineage import LineageError, export_provenance, train_artifact

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
    run_id: str = typer.Argument(..., help="an MLflow run id: a pipeline (parent) run or any stage run"),
    out_dir: str = typer.Option(".platonic", "--out-dir", help="where the default MLflow store lives"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The chain from an evaluation run back to the ingested source."""
    services.embedded_defaults()
    from platonic.tasks.lineage import LineageError, print_lineage, trace

    try:
        chain = trace(run_id, out_dir)
    except LineageError as e:
        fail(str(e), 1)
    if as_json:
        typer.echo(json.dumps(chain, indent=1))
    else:
        print_lineage(chain)


def align(
    a: Path = typer.Argument(..., help="features: .npz (layer_i), .npy, .pt or .parquet; (N, D) or (L, N, D)"),
    b: Path = typer.Argument(...),
    metric: str = typer.Option(
        "mutual_knn", "--metric", help="mutual_knn, cycle_knn, cka, cka_rbf, unbiased_cka, cknna"
    ),
    k: int = typer.Option(10, "--k"),
    clamp: str = typer.Option(
        "mean",
        "--clamp",
        help="outlier clamp at the 0.95 quantile of |x|: mean (per-sample quantiles averaged, as the "
        "published PRH numbers), exact (the global sorted quantile) or none",
    ),
    layers: str = typer.Option("best", "--layers", help="best (all layer pairs) or last"),
    backend: str = typer.Option("dense", "--backend", help="kNN search: dense (torch) or faiss (exact, large N)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Score two feature files as platonic-rep does (best over layer pairs)."""
    from platonic.core.features import load_features
    from platonic.core.metrics import CLAMPS, METRICS, alignment

    if metric not in METRICS:
        fail(f"unknown metric {metric!r} (available: {', '.join(METRICS)})")
    if layers not in ("best", "last"):
        fail(f"--layers must be best or last, not {layers!r}")
    if clamp not in CLAMPS:
        fail(f"--clamp must be mean, exact or none, not {clamp!r}")
    if backend not in ("dense", "faiss"):
        fail(f"--backend must be dense or faiss, not {backend!r}")
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
        ..., "--model", help="a local transformers model folder (repeatable); served under this name"
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
    """POST /v1/chat/completions + GET /v1/models over local transformers models, with
    failure injection: what the openai positives backend talks to, without a GPU."""
    from platonic.flows.serve_chat import Faults, serve

    for m in model:
        if not Path(m).is_dir():
            fail(f"--model {m}: not a folder (build tiny ones with `platonic stand-ins`)")
    serve(model, host, port, Faults(fail_every, fail_status, delay_every, delay_s, refuse_every), trust_remote_code)
