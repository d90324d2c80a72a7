"""The `platonic` command.

    platonic demo [--json]                       the whole DAG on the synthetic world
    platonic run CONFIG [--set k=v ...] [--only S | --from S] [--force S ...] [--json]
    platonic stages [CONFIG]                     what each stage reads and writes
    platonic lineage RUN_ID [--json]             evaluation run -> ... -> ingested source
    platonic align A B [--metric M] [--k 10]     alignment between two feature files
    platonic compare CONFIG [--json]             text models x vision encoders x eval sets
    platonic stand-ins [DIR]                     tiny local models for configs/compare_tiny.yaml
    platonic audit --corpus PATH --eval SPEC ... contamination audit: exact, near-duplicate, embedding

Bad recipes, overrides or stage names print one `error:` line and exit with code 2.
Prefect and MLflow are imported lazily: `stages` and `align` start instantly.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import typer

from .config import ConfigError, PipelineConfig, load_config

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Proving and improving the Platonic Representation Hypothesis with JEPAs.")


def fail(msg: str, code: int = 2) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def _reported_errors():
    """Recipe errors -> exit 2; missing cache or a failed stage -> exit 1; one `error:` line
    each (Prefect has already logged a failed stage's traceback)."""
    from tasks.stage import UpstreamNotCached

    try:
        yield
    except typer.Exit:
        raise
    except ConfigError as e:
        fail(str(e))
    except UpstreamNotCached as e:
        fail(str(e), 1)
    except Exception as e:
        fail(f"the run failed: {type(e).__name__}: {e}", 1)


def _embedded_defaults() -> None:
    """Prefect's temporary local server and quiet telemetry, unless the user set otherwise."""
    for k, v in {
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_CLI_PROMPT": "false",
        "DO_NOT_TRACK": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "TOKENIZERS_PARALLELISM": "false",
    }.items():
        os.environ.setdefault(k, v)


def _run(cfg: PipelineConfig, only: str | None, from_stage: str | None, force: list[str], as_json: bool) -> dict:
    from .stages import plan

    plan(cfg, only, from_stage, force)  # validate stage names before anything starts
    _embedded_defaults()
    Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
    # with --json, stdout carries the JSON alone: everything else goes to stderr
    redirect = contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()
    with redirect:
        from flows.pipeline import pipeline

        results = pipeline(cfg.model_dump(mode="json"), only=only, from_stage=from_stage, force=force or None)
    if as_json:
        typer.echo(json.dumps(results, indent=1))
    else:
        print_summary(results)
    return results


def print_summary(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=max(120, Console().width), highlight=False)
    if "models" in results:
        t = Table(title=f"mutual {results['k']}-NN with the image encoder '{results['image_model']}' "
                        f"(N={results['n']}, chance {results['chance']:.4f})")
        for col in ("model", "objective", "mutual kNN", "95% CI", "layers", "rotation R@1 t→i / i→t", "residual",
                    "train run"):
            t.add_column(col)
        for name in results["ordering"]:
            s = results["models"][name]
            r = s.get("procrustes") or {}
            t.add_row(name, f"{s['kind']} ({s['views']})", f"{s['mutual_knn']:.4f}",
                      f"[{s['ci95'][0]:.4f}, {s['ci95'][1]:.4f}]", f"{s['layer_a']}, {s['layer_b']}",
                      f"{r.get('t2i_R@1', float('nan')):.3f} / {r.get('i2t_R@1', float('nan')):.3f}",
                      f"{r.get('heldout_residual', float('nan')):.3f}", s["train_run_id"][:12])
        con.print(t)
        con.print(f"ordering: {' > '.join(results['ordering'])}")
    con.print(f"results:        {results['output_dir']}/results.json")
    con.print(f"MLflow run id:  {results['run_id']}")
    uri = results["tracking_uri"]
    if uri.startswith("sqlite"):
        con.print(f"open the UI:    mlflow ui --backend-store-uri {uri} --port 5000")
        con.print(f"                then http://127.0.0.1:5000/#/experiments/{results['experiment_id']}/runs/{results['run_id']}")
    else:
        con.print(f"tracking:       {uri}")
    con.print(f"lineage:        platonic lineage {results['run_id']}" + (
        f" --out-dir {Path(results['output_dir']).parents[1]}" if uri.startswith("sqlite") else ""))


@app.command()
def demo(
    as_json: bool = typer.Option(False, "--json", help="print results.json to stdout"),
    sets: list[str] = typer.Option([], "--set", help="override a recipe field: key=value"),
    out_dir: str | None = typer.Option(None, "--out-dir", help="where artifacts and MLflow live (default .platonic)"),
) -> None:
    """Run the whole DAG on the synthetic world (CPU, offline, a few minutes)."""
    with _reported_errors():
        _run(load_config(None, [*sets, *([f"out_dir={out_dir}"] if out_dir else [])]), None, None, [], as_json)


@app.command()
def run(
    config: Path = typer.Argument(..., help="YAML recipe, e.g. configs/demo.yaml"),
    sets: list[str] = typer.Option([], "--set", help="override a recipe field: key=value (repeatable)"),
    only: str | None = typer.Option(None, "--only", help="execute only this stage (upstream from cache)"),
    from_stage: str | None = typer.Option(None, "--from", help="re-execute this stage and everything after it"),
    force: list[str] = typer.Option([], "--force", help="re-execute this stage even on a cache hit (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="print results.json to stdout"),
) -> None:
    """Run a recipe; stages whose cache key is unchanged are not executed."""
    with _reported_errors():
        _run(load_config(config, sets), only, from_stage, force, as_json)


@app.command()
def compare(
    config: Path = typer.Argument(..., help="comparison recipe, e.g. configs/paper_table.yaml"),
    sets: list[str] = typer.Option([], "--set", help="override a recipe field: key=value (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="print results.json to stdout"),
) -> None:
    """The paper's table: every text model x vision encoder x eval set (mutual kNN, cached)."""
    from .config import CompareConfig

    with _reported_errors():
        cfg = load_config(config, sets, model=CompareConfig)
        _embedded_defaults()
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            from flows.compare import compare_flow

            results = compare_flow(cfg.model_dump(mode="json"))
    if as_json:
        typer.echo(json.dumps(results, indent=1))
    else:
        typer.echo((Path(results["output_dir"]) / "table.md").read_text())
        typer.echo(f"results: {results['output_dir']}/results.json   MLflow run id: {results['run_id']}")


@app.command()
def audit(
    corpus: list[str] = typer.Option(..., "--corpus", help="Parquet in the text schema: file, glob, folder or artifact folder (repeatable)"),
    evals: list[str] = typer.Option(..., "--eval", help="wit_1024 | prh:SOURCE | coco_karpathy:JSON | flickr_karpathy:JSON (test split; JSON@val for "
                                    "another) | coco_captions:JSON | world:DIR | captions:FILE (repeatable)"),
    levels: str = typer.Option("exact,near", "--levels", help="comma-separated: exact, near, embed"),
    sets: list[str] = typer.Option([], "--set", help="override a field: near.threshold=0.6, embed.threshold=0.85, ..."),
    out_dir: str = typer.Option(".platonic", "--out-dir", help="where artifacts and MLflow live"),
    force: bool = typer.Option(False, "--force", help="re-run even if this audit is cached"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Contamination audit: which eval captions (and images) have a match in a training corpus, per level."""
    from pydantic import ValidationError

    from .config import AuditConfig, _format_validation_error, apply_overrides

    with _reported_errors():
        raw = apply_overrides({"corpus": corpus, "eval": evals, "out_dir": out_dir,
                               "levels": [lv.strip() for lv in levels.split(",") if lv.strip()]}, sets)
        try:
            cfg = AuditConfig.model_validate(raw)
        except ValidationError as e:
            raise ConfigError(_format_validation_error(e, "audit")) from None
        _embedded_defaults()
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            from flows.audit import audit_flow

            results = audit_flow(cfg.model_dump(mode="json"), force=force)
    if as_json:
        typer.echo(json.dumps(results, indent=1))
    else:
        typer.echo((Path(results["output_dir"]) / "summary.md").read_text())
        typer.echo(f"matches: {results['output_dir']}/matches.parquet   artifact: {results['artifact']}"
                   + ("   (cached)" if results["cache_hit"] else ""))
        typer.echo(f"MLflow run id: {results['run_id']}")


@app.command("stand-ins")
def stand_ins(out: Path = typer.Argument(Path(".platonic/stand-ins"), help="where to write them"),
              n: int = typer.Option(64, "--n", help="eval scenes in the PRH-format set")) -> None:
    """Build tiny local models + a PRH-format eval set for `platonic compare configs/compare_tiny.yaml`."""
    from .standins import build_standins

    for k, v in build_standins(out, n=n).items():
        typer.echo(f"{k:10s} {v}")


@app.command()
def stages(config: Path | None = typer.Argument(None, help="recipe (default: the demo's)")) -> None:
    """List the stages: what each reads (config), takes (inputs) and writes."""
    from rich.console import Console
    from rich.table import Table

    from .stages import SPECS, instances

    try:
        cfg = load_config(config)
    except ConfigError as e:
        fail(str(e))
    t = Table(title="stages (in order)")
    for col in ("stage", "version", "reads (config)", "inputs", "writes", "what"):
        t.add_column(col, overflow="fold")
    for name, spec in SPECS.items():
        insts = [i for i in instances(cfg) if i.stage == name]
        ids = ", ".join(i.id for i in insts)
        inputs = sorted({u for i in insts for u in i.inputs(cfg)})
        t.add_row(ids, str(spec.version), "\n".join(spec.reads), "\n".join(inputs) or "-", "\n".join(spec.writes), spec.doc)
    Console(width=200).print(t)


@app.command()
def lineage(
    run_id: str = typer.Argument(..., help="an MLflow run id: a pipeline (parent) run or any stage run"),
    out_dir: str = typer.Option(".platonic", "--out-dir", help="where the default MLflow store lives"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The chain from an evaluation run back to the ingested source."""
    _embedded_defaults()
    from tasks.lineage import LineageError, print_lineage, trace

    try:
        chain = trace(run_id, out_dir)
    except LineageError as e:
        fail(str(e), 1)
    if as_json:
        typer.echo(json.dumps(chain, indent=1))
    else:
        print_lineage(chain)


@app.command()
def align(
    a: Path = typer.Argument(..., help="features: .npz (layer_i), .npy, .pt or .parquet; (N, D) or (L, N, D)"),
    b: Path = typer.Argument(...),
    metric: str = typer.Option("mutual_knn", "--metric", help="mutual_knn, cycle_knn, cka, cka_rbf, unbiased_cka, cknna"),
    k: int = typer.Option(10, "--k"),
    no_clamp: bool = typer.Option(False, "--no-clamp", help="skip the 0.95-quantile outlier clamp"),
    layers: str = typer.Option("best", "--layers", help="best (all layer pairs) or last"),
    backend: str = typer.Option("dense", "--backend", help="kNN search: dense (torch) or faiss (exact, large N)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Score two feature files as platonic-rep does (best over layer pairs)."""
    from .features import load_features
    from .metrics import METRICS, alignment

    if metric not in METRICS:
        fail(f"unknown metric {metric!r} (available: {', '.join(METRICS)})")
    if layers not in ("best", "last"):
        fail(f"--layers must be best or last, not {layers!r}")
    if backend not in ("dense", "faiss"):
        fail(f"--backend must be dense or faiss, not {backend!r}")
    try:
        fa, fb = load_features(a), load_features(b)
        s = alignment(fa, fb, k=k, clamp_q=1.0 if no_clamp else 0.95, layers=layers, metric=metric, backend=backend)
    except (ValueError, FileNotFoundError, ImportError) as e:
        fail(str(e))
    if as_json:
        typer.echo(json.dumps({**s.as_dict(), "metric": metric, "k": k, "n": int(fa[0].shape[0])}))
    else:
        ci = f"  95% CI [{s.ci_low:.4f}, {s.ci_high:.4f}]" if s.ci_low is not None else ""
        typer.echo(f"{metric} = {s.score:.4f}{ci}  best layers ({s.layer_a}, {s.layer_b}) of ({len(fa)}, {len(fb)})")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
