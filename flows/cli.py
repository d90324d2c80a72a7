"""The `platonic` command.

    platonic demo [--json]                       the whole DAG on the synthetic world
    platonic run CONFIG [--set k=v ...] [--only S | --from S] [--force S ...] [--json]
    platonic stages [CONFIG]                     what each stage reads and writes
    platonic lineage RUN_ID [--json]             evaluation run -> ... -> ingested source
    platonic align A B [--metric M] [--k 10]     alignment between two feature files
    platonic compare CONFIG [--json]             text models x vision encoders x eval sets
    platonic match CONFIG [--json]               pair-free classification: class names <-> image clusters
    platonic ablate RECIPE [--quick] [--json]    the Table-7 grid over seeds (configs/table7.yaml)
    platonic caption RECIPE [--set k=v] [--json] captions through one map (configs/caption_world.yaml)
    platonic table EXPERIMENT                    the grid of the latest ablation, read from MLflow
    platonic forecast EXPERIMENT --model M       scaling law: predict a run the fit never saw
    platonic stand-ins [DIR]                     tiny local models for configs/compare_tiny.yaml
    platonic ingest SOURCE... --format F [--out DIR] [--json]   a real corpus -> Parquet + DuckDB
    platonic corpus stats [--dir DIR] [--json]   texts per image, lengths, sources, quarantine
    platonic audit --corpus PATH --eval SPEC ... contamination audit: exact, near-duplicate, embedding
    platonic serve-chat --model DIR --port P     a loopback OpenAI-compatible chat server (tiny local models)

Bad recipes, overrides or stage names print one `error:` line and exit with code 2.
Prefect and MLflow are imported lazily: `stages` and `align` start instantly.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import typer

from platonic.core.config import ConfigError, PipelineConfig, load_config

from . import services

EXAMPLES = """Examples:

\b
  platonic demo                                     the whole study on the synthetic world
  platonic run configs/demo.yaml --set world.seed=1 another world; the rest from the cache
  platonic run configs/demo.yaml --only evaluate    one stage on cached artifacts
  platonic server                                   a Prefect server that reruns report to
  platonic ablate configs/table7.yaml --quick       Table 7 over seeds, small
  platonic lineage RUN_ID                           where a score came from
  platonic stages                                   what each stage reads and writes

From Python: `from platonic.flows.api import run; run("demo", sets=["world.seed=1"])`."""

# plain help (not rich): flags read as flags, not `--json <bool>`
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Proving and improving the Platonic Representation Hypothesis with JEPAs.",
    epilog=EXAMPLES,
)


def fail(msg: str, code: int = 2) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def _reported_errors():
    """Recipe errors, unreadable sources, an output folder holding the user's files -> exit 2;
    missing cache, a failed stage or a Prefect server gone mid-run -> exit 1; one `error:`
    line each (Prefect has already logged a failed stage's traceback)."""
    from platonic.core.artifacts import ForeignFolderError
    from platonic.core.contract import UpstreamNotCached
    from platonic.core.data.readers import SourceError

    try:
        yield
    except typer.Exit:
        raise
    except (ConfigError, SourceError, ForeignFolderError) as e:
        fail(str(e))
    except UpstreamNotCached as e:
        fail(str(e), 1)
    except Exception as e:
        if url := services.lost_prefect_server(e):
            typer.echo(
                f"error: the Prefect server at {url} stopped answering during the run ({type(e).__name__}: {e}). "
                "Every stage that finished is cached: rerun the command to finish (with no server up, it starts "
                "a temporary one).",
                err=True,
            )
            services.exit_now(1)
        fail(f"the run failed: {type(e).__name__}: {e}", 1)


def _run(
    cfg: PipelineConfig,
    only: str | None,
    from_stage: str | None,
    force: list[str],
    as_json: bool,
    command: str = "platonic demo",
) -> dict:
    """`command`: the user's command without --only (the error of an --only on an empty
    cache says to run it)."""
    from .api import run_config

    # with --json, stdout carries the JSON alone: everything else goes to stderr
    redirect = contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()
    with redirect:
        results = run_config(cfg, only, from_stage, force, command)
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
        t = Table(
            title=f"mutual {results['k']}-NN with the image encoder '{results['image_model']}' "
            f"(N={results['n']}, chance {results['chance']:.4f})"
        )
        for col in (
            "model",
            "objective",
            "mutual kNN",
            "95% CI",
            "layers",
            "of ceiling",
            "rotation R@1 t→i / i→t",
            "residual",
            "train run",
        ):
            t.add_column(col)
        for name in results["ordering"]:
            s = results["models"][name]
            r = s.get("procrustes") or {}
            t.add_row(
                name,
                f"{s['kind']} ({s['views']})",
                f"{s['mutual_knn']:.4f}",
                f"[{s['ci95'][0]:.4f}, {s['ci95'][1]:.4f}]",
                f"{s['layer_a']}, {s['layer_b']}",
                f"{s['fraction_of_ceiling']:.3f}" if "fraction_of_ceiling" in s else "–",
                f"{r.get('t2i_R@1', float('nan')):.3f} / {r.get('i2t_R@1', float('nan')):.3f}",
                f"{r.get('heldout_residual', float('nan')):.3f}",
                s["train_run_id"][:12],
            )
        con.print(t)
        con.print(f"ordering: {' > '.join(results['ordering'])}")
        for name in results["ordering"]:
            c = results["models"][name].get("curve")
            if c and c[0]["steps"] == 0:
                pts = " → ".join(f"{p['mutual_knn']:.4f}" for p in c)
                con.print(f"{name} along its run (steps {c[0]['steps']} … {c[-1]['steps']}): {pts}")
        if results.get("ceilings"):
            oracles = ", ".join(f"{k} {v:.4f}" for k, v in results["ceilings"].items())
            con.print(f"oracles:  {oracles}   (ceiling: learned; docs/method.md)")
    con.print(f"results:        {results['output_dir']}/results.json")
    con.print(f"MLflow run id:  {results['run_id']}")
    uri = results["tracking_uri"]
    if uri.startswith("sqlite"):
        con.print(f"open the UI:    mlflow ui --backend-store-uri {uri} --port 5000")
        con.print(
            f"                then http://127.0.0.1:5000/#/experiments/{results['experiment_id']}/runs/{results['run_id']}"
        )
    else:
        con.print(f"tracking:       {uri}")
    con.print(
        f"lineage:        platonic lineage {results['run_id']}"
        + (f" --out-dir {Path(results['output_dir']).parents[1]}" if uri.startswith("sqlite") else "")
    )


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
        command = shlex.join(["platonic", "run", str(config), *(a for s in sets for a in ("--set", s))])
        _run(load_config(config, sets), only, from_stage, force, as_json, command)


@app.command()
def compare(
    config: Path = typer.Argument(..., help="comparison recipe, e.g. configs/paper_table.yaml"),
    sets: list[str] = typer.Option([], "--set", help="override a recipe field: key=value (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="print results.json to stdout"),
) -> None:
    """The paper's table: every text model x vision encoder x eval set (mutual kNN, cached)."""
    from platonic.core.config import CompareConfig

    with _reported_errors():
        cfg = load_config(config, sets, model=CompareConfig)
        services.embedded_defaults()
        services.choose_prefect_server()
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            from .compare import compare_flow

            results = compare_flow(cfg.model_dump(mode="json"))
    if as_json:
        typer.echo(json.dumps(results, indent=1))
    else:
        typer.echo((Path(results["output_dir"]) / "table.md").read_text())
        typer.echo(f"results: {results['output_dir']}/results.json   MLflow run id: {results['run_id']}")


@app.command()
def match(
    config: str = typer.Argument(
        ..., help="match recipe: a YAML file (configs/match_world.yaml) or a packaged name (match_world)"
    ),
    sets: list[str] = typer.Option([], "--set", help="override a recipe field: key=value (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="print results.json to stdout"),
) -> None:
    """Pair-free classification: k-means image clusters matched to class-name embeddings by
    their kernels alone (no image-text pair); top-1/top-5 vs chance and the labelled oracle."""
    from platonic.core.config import ClassMatchConfig
    from platonic.core.stages.match import match_base

    with _reported_errors():
        cfg = load_config(config, sets, model=ClassMatchConfig)
        match_base(cfg)  # a bad base recipe or model name fails here, before Prefect starts
        services.embedded_defaults()
        services.choose_prefect_server()
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            from .match import match_flow

            results = match_flow(cfg.model_dump(mode="json"))
    if as_json:
        short = {k: v for k, v in results.items() if k != "scores"} | {"scores": _match_summary(results)}
        typer.echo(json.dumps(short, indent=1))
    else:
        typer.echo((Path(results["output_dir"]) / "table.md").read_text())
        typer.echo(f"results: {results['output_dir']}/results.json   MLflow run id: {results['run_id']}")


def _match_summary(results: dict) -> dict:
    """The scores without per-seed records (those stay in results.json)."""
    return {
        cs: {m: {k: v for k, v in r.items() if k != "runs"} for m, r in models.items()}
        for cs, models in results["scores"].items()
    }


@app.command()
def ablate(
    recipe: str = typer.Argument(
        ..., help="ablation recipe: a YAML file (configs/table7.yaml) or a packaged name (table7)"
    ),
    quick: bool = typer.Option(False, "--quick", help="apply the recipe's `quick` overrides (small world, short runs)"),
    sets: list[str] = typer.Option([], "--set", help="override an ablation field: key=value, e.g. seeds=[0,1,2,3]"),
    base_sets: list[str] = typer.Option([], "--base-set", help="override the base pipeline recipe in every cell"),
    as_json: bool = typer.Option(False, "--json", help="print the result (run ids, summary) as JSON to stdout"),
) -> None:
    """Run an ablation grid (rows: positives; columns: objectives; seeds) as one flow."""
    from .api import ablate as run_ablation

    with _reported_errors():
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            results = run_ablation(recipe, sets, base_sets, quick)
    if as_json:
        typer.echo(json.dumps(results, indent=1))
        return
    typer.echo((Path(results["output_dir"]) / "table.md").read_text())
    files = ", ".join(sorted(p.name for p in Path(results["output_dir"]).iterdir() if p.is_file()))
    typer.echo(f"outputs:       {results['output_dir']}  ({files})")
    typer.echo(
        f"MLflow run id: {results['run_id']}   "
        f"(experiment {results['experiment']!r}: platonic table {results['experiment']})"
    )


@app.command()
def caption(
    recipe: str = typer.Argument(
        ..., help="caption recipe: a YAML file (configs/caption_world.yaml) or a packaged name (caption_world)"
    ),
    sets: list[str] = typer.Option([], "--set", help="override a caption field: key=value, e.g. seeds=[0]"),
    base_sets: list[str] = typer.Option([], "--base-set", help="override the base pipeline recipe"),
    force: list[str] = typer.Option([], "--force", help="re-execute this caption stage even on a cache hit"),
    as_json: bool = typer.Option(False, "--json", help="print the results (run ids, summary) as JSON to stdout"),
) -> None:
    """Captions through one map: image encoder -> linear map (paired at N pairs, or pair-free) ->
    a decoder trained on text only; scored with pycocoevalcap (needs Java)."""
    from platonic.core.caption.recipe import load_caption
    from platonic.core.caption.score import MissingJava, MissingScorer, require_java, require_scorer

    try:  # before anything runs: scoring needs both
        require_scorer()
        require_java()
    except (MissingJava, MissingScorer) as e:
        fail(str(e), 1)
    with _reported_errors():
        cfg, base = load_caption(recipe, sets, base_sets)
        from platonic.core.stages.caption import caption_instances

        known = {i.stage for i in caption_instances(cfg)} | {i.id for i in caption_instances(cfg)}
        for f in force:
            if f not in known:
                raise ConfigError(f"--force {f!r}: not a caption stage ({', '.join(sorted(known))})")
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        if base is not None:
            services.apply(base.services)
        else:
            services.embedded_defaults()
        services.choose_prefect_server()
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            from .caption import caption_flow

            results = caption_flow(
                cfg.model_dump(mode="json"), base.model_dump(mode="json") if base else None, force=force or None
            )
    if as_json:
        typer.echo(json.dumps(results, indent=1))
        return
    out = Path(results["output_dir"])
    typer.echo((out / "table.md").read_text())
    typer.echo(f"outputs:       {out}  (table.md, curve.png, examples.md, examples.html)")
    typer.echo(f"MLflow run id: {results['run_id']}   (experiment {results['experiment']!r})")


@app.command()
def table(
    experiment: str = typer.Argument(
        ..., help="MLflow experiment of the ablation (the recipe's `experiment`, e.g. table7)"
    ),
    run_id: str | None = typer.Option(None, "--run", help="this ablation run instead of the latest finished one"),
    out_dir: str = typer.Option(".platonic", "--out-dir", help="where the default MLflow store lives"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Print the Table-7-like grid of an ablation run (mean ± CI over seeds), rebuilt from the
    per-cell scores stored in MLflow, and log it to that run as table.md."""
    services.embedded_defaults()
    from platonic.core.ablation import grid_table
    from platonic.core.report import ablation_table
    from platonic.tasks import tracking
    from platonic.tasks.runs import load_ablation_run

    try:
        run, cells, summary = load_ablation_run(experiment, out_dir, run_id)
    except LookupError as e:
        fail(str(e), 1)
    summary = {**summary, "table": grid_table(cells)}
    text = ablation_table(cells, summary)
    tracking.log_text(tracking.client(out_dir), run, text, "table.md")
    if as_json:
        typer.echo(json.dumps({"run_id": run, "table": summary["table"]}, indent=1))
    else:
        typer.echo(text)
        typer.echo(f"from MLflow run {run}")


@app.command()
def forecast(
    experiment: str = typer.Argument(..., help="MLflow experiment of the ablation (e.g. table7)"),
    model: str = typer.Option(..., "--model", help="a column of the grid, e.g. good"),
    row: str | None = typer.Option(None, "--row", help="a row of the grid (default: the scaling row)"),
    samples: float | None = typer.Option(None, "--samples", help="budget to predict (default: the largest, held out)"),
    run_id: str | None = typer.Option(None, "--run", help="this ablation run instead of the latest finished one"),
    out_dir: str = typer.Option(".platonic", "--out-dir", help="where the default MLflow store lives"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Fit the saturating law a(n) = a_inf − b·n^−alpha on finished runs and predict one run
    at another budget, with an interval (runs at that budget are left out of the fit)."""
    services.embedded_defaults()
    from platonic.core.ablation import forecast_from_cells
    from platonic.tasks.runs import load_ablation_run

    try:
        run, cells, summary = load_ablation_run(experiment, out_dir, run_id)
    except LookupError as e:
        fail(str(e), 1)
    row = row or summary.get("scaling", {}).get("row") or next(iter(cells["rows"]))
    try:
        f = forecast_from_cells(cells, model, row, samples)
    except ValueError as e:
        fail(str(e))
    if as_json:
        typer.echo(json.dumps({"run_id": run, **f}, indent=1))
        return
    law = f["law"]
    lo, hi = f["interval"]
    typer.echo(
        f"law: a(n) = {law['a_inf']:.4f} - {law['b']:.4f}*(n/1000)^-{law['alpha']:.3f}   "
        f"fitted on {f['fitted_runs']} runs at {', '.join(f'{int(b):,}' for b in f['fitted_budgets'])} samples"
    )
    typer.echo(
        f"{model} ({row}) at {int(f['samples']):,} samples: {f['prediction']:.4f}  "
        f"{int(f['confidence'] * 100)}% interval for one run [{lo:.4f}, {hi:.4f}]  (seed noise {f['seed_noise']:.4f})"
    )
    if f["actual"]:
        typer.echo(
            f"actual runs (not in the fit): {', '.join(f'{a:.4f}' for a in f['actual'])}  mean {f['actual_mean']:.4f}  "
            f"error {f['error']:+.4f}  inside the interval: {f['actual_in_interval']}/{len(f['actual'])}"
        )
    typer.echo(f"from MLflow run {run}")


@app.command()
def audit(
    corpus: list[str] = typer.Option(
        ..., "--corpus", help="Parquet in the text schema: file, glob, folder or artifact folder (repeatable)"
    ),
    evals: list[str] = typer.Option(
        ...,
        "--eval",
        help="wit_1024 | prh:SOURCE | coco_karpathy:JSON | flickr_karpathy:JSON (test split; JSON@val for "
        "another) | coco_captions:JSON | world:DIR | captions:FILE (repeatable)",
    ),
    levels: str = typer.Option("exact,near", "--levels", help="comma-separated: exact, near, embed"),
    sets: list[str] = typer.Option([], "--set", help="override a field: near.threshold=0.6, embed.threshold=0.85, ..."),
    out_dir: str = typer.Option(".platonic", "--out-dir", help="where artifacts and MLflow live"),
    force: bool = typer.Option(False, "--force", help="re-run even if this audit is cached"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Contamination audit: which eval captions (and images) have a match in a training corpus, per level."""
    from pydantic import ValidationError

    from platonic.core.config import AuditConfig, _format_validation_error, apply_overrides

    with _reported_errors():
        raw = apply_overrides(
            {
                "corpus": corpus,
                "eval": evals,
                "out_dir": out_dir,
                "levels": [lv.strip() for lv in levels.split(",") if lv.strip()],
            },
            sets,
        )
        try:
            cfg = AuditConfig.model_validate(raw)
        except ValidationError as e:
            raise ConfigError(_format_validation_error(e, "audit")) from None
        services.embedded_defaults()
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            from .standalone import run_audit

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


@app.command("stand-ins")
def stand_ins(
    out: Path = typer.Argument(Path(".platonic/stand-ins"), help="where to write them"),
    n: int = typer.Option(64, "--n", help="eval scenes in the PRH-format set"),
) -> None:
    """Build tiny local models + a PRH-format eval set for `platonic compare configs/compare_tiny.yaml`."""
    from platonic.flows.standins import build_standins

    for k, v in build_standins(out, n=n).items():
        typer.echo(f"{k:10s} {v}")
    # tiny generators for the positives backends (serve-chat, transformers, the vLLM stand-in)
    import pyarrow.parquet as pq

    from platonic.flows.standins import build_generation_standins

    texts = pq.read_table(out / "world" / "alt_texts.parquet", columns=["text"])["text"].to_pylist()
    for k, v in build_generation_standins(out, texts).items():
        typer.echo(f"gen-{k:6s} {v}")


@app.command()
def ingest(
    sources: list[str] = typer.Argument(
        ..., help="shard files, folders, globs, fsspec URIs or hf://datasets/<org>/<name>[@rev]"
    ),
    fmt: str = typer.Option(..., "--format", help="recap | wds | coco | jsonl (jsonl also reads .csv/.tsv)"),
    out: Path | None = typer.Option(
        None, "--out", help="output folder (default: the store, .platonic/artifacts/ingest/<key>)"
    ),
    config: Path | None = typer.Option(None, "--config", help="take the ingest section from this recipe"),
    sets: list[str] = typer.Option([], "--set", help="override a field, e.g. ingest.text_columns={caption: alt}"),
    id_column: str | None = typer.Option(
        None, "--id-column", help="the image id column (jsonl/wds; default per format)"
    ),
    text_column: list[str] = typer.Option([], "--text-column", help="COLUMN=KIND, e.g. caption=alt (repeatable)"),
    index_column: str | None = typer.Option(
        None, "--index-column", help="a per-row text index (several rows per image)"
    ),
    revision: str | None = typer.Option(None, "--revision", help="hub sources: the revision to pin"),
    include: list[str] = typer.Option([], "--include", help="only shards matching this pattern (repeatable)"),
    force: bool = typer.Option(False, "--force", help="re-run the stage even on a cache hit (shards stay cached)"),
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="where the shard cache and MLflow live (default .platonic)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the counts as JSON"),
) -> None:
    """Ingest a real corpus: shards -> normalised Parquet partitions + DuckDB catalog.

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
            *([f"out_dir={out_dir}"] if out_dir else []),
        ]
        if fmt not in ("recap", "wds", "coco", "jsonl"):
            raise ConfigError(f"--format must be recap, wds, coco or jsonl, not {fmt!r}")
        cfg = load_config(config, overrides)
        services.embedded_defaults()
        from platonic.core.contract import IncompleteArtifact

        from .standalone import run_ingest

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
app.add_typer(corpus_app, name="corpus")


@corpus_app.command("stats")
def corpus_stats_cmd(
    folder: Path | None = typer.Option(
        None, "--dir", help="an ingest output folder (default: the latest ingest artifact)"
    ),
    out_dir: str = typer.Option(".platonic", "--out-dir", help="the store searched when --dir is not given"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Texts per source kind, texts per image, length distributions, quarantine reasons."""
    from platonic.core.data.catalog import corpus_report

    from .standalone import latest_ingest

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


@app.command()
def stages(config: Path | None = typer.Argument(None, help="recipe (default: the demo's)")) -> None:
    """List the stages: what each reads (config), takes (inputs) and writes."""
    from rich.console import Console
    from rich.table import Table

    from platonic.core.stages.dag import upstream
    from platonic.core.stages.pipeline import SPECS, instances

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
        inputs = sorted({u for i in insts for u in upstream(cfg, i).values()})
        t.add_row(
            ids, str(spec.version), "\n".join(spec.reads), "\n".join(inputs) or "-", "\n".join(spec.writes), spec.doc
        )
    Console(width=200).print(t)


@app.command()
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


@app.command()
def export(
    run_id: str = typer.Argument(..., help="the MLflow run of a train stage (train:good, train:ntp, ...)"),
    dest: Path = typer.Argument(..., help="a new or empty folder"),
    out_dir: str = typer.Option(".platonic", "--out-dir", help="where the run's store lives"),
) -> None:
    """A trained text encoder as a Hugging Face folder: AutoModel/AutoTokenizer.from_pretrained(DEST)."""
    services.embedded_defaults()
    from platonic.core.export import export_pretrained
    from platonic.tasks.lineage import LineageError, train_artifact

    try:
        folder, mcfg = train_artifact(run_id, out_dir)
        info = export_pretrained(folder, mcfg, dest)
    except (LineageError, ValueError) as e:
        fail(str(e))
    typer.echo(f"{dest}: {info['architecture']} ({info['kind']}, {info['views']} views) + tokenizer; see platonic.json")


@app.command()
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


@app.command()
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


@app.command("serve-chat")
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
