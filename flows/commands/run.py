"""Running the pipeline and reading what it left: `run`, `demo`, `ablate`, `table`, `forecast`,
`stages`, and the shared `_run` / `print_summary` of a pipeline run."""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from pathlib import Path

import typer

from platonic.core.config import ConfigError, PipelineConfig, load_config

from .. import services, store
from .common import _reported_errors, fail

TABLE_WIDTH = 100  # the demo's table fits a 100-column terminal; longer cells wrap inside it


def _run(
    cfg: PipelineConfig,
    only: str | None,
    from_stage: str | None,
    force: list[str],
    as_json: bool,
    command: str = "platonic demo",
    trust_remote_code: bool = False,
) -> dict:
    """`command`: the user's command without --only (the error of an --only on an empty
    cache says to run it)."""
    from ..api import run_config

    # with --json, stdout carries the JSON alone: everything else goes to stderr
    redirect = contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()
    with redirect:
        results = run_config(cfg, only, from_stage, force, command, trust_remote_code)
    if as_json:
        typer.echo(json.dumps(results, indent=1))
    else:
        print_summary(results)
    return results


def print_summary(results: dict) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    con = Console(width=max(120, Console().width), highlight=False)
    if "models" in results:
        # at most 100 columns (tests/test_cli_help.py): no side borders, two spaces between
        # columns, the CI beside its score, the train runs on a line of their own
        t = Table(
            title=f"mutual {results['k']}-NN with the image encoder '{results['image_model']}' "
            f"(N={results['n']}, chance {results['chance']:.4f})",
            caption="rotation R@1 (t→i / i→t), residual: one rotation fitted on half the pairs, scored on the rest",
            box=box.SIMPLE_HEAD,
            padding=(0, 1, 0, 0),
            show_edge=False,
        )
        for col in (
            "model",
            "objective (views)",
            "mutual kNN [95% CI]",
            "layers",
            "of ceiling",
            "rotation R@1",
            "residual",
        ):
            t.add_column(col)
        for name in results["ordering"]:
            s = results["models"][name]
            r = s.get("procrustes") or {}
            t.add_row(
                name,
                f"{s['kind']} ({s['views']})",
                f"{s['mutual_knn']:.4f} [{s['ci95'][0]:.4f}, {s['ci95'][1]:.4f}]",
                f"{s['layer_a']}, {s['layer_b']}",
                f"{s['fraction_of_ceiling']:.3f}" if "fraction_of_ceiling" in s else "–",
                f"{r.get('t2i_R@1', float('nan')):.3f} / {r.get('i2t_R@1', float('nan')):.3f}",
                f"{r.get('heldout_residual', float('nan')):.3f}",
            )
        con.print(t, width=TABLE_WIDTH)
        con.print(
            "train runs: " + ", ".join(f"{m} {results['models'][m]['train_run_id'][:12]}" for m in results["ordering"])
        )
        con.print(f"ordering: {' > '.join(results['ordering'])}")
        for name in results["ordering"]:
            c = results["models"][name].get("curve")
            if c and c[0]["steps"] == 0:
                pts = " → ".join(f"{p['mutual_knn']:.4f}" for p in c)
                con.print(f"{name} along its run (steps {c[0]['steps']} … {c[-1]['steps']}): {pts}")
        if results.get("ceilings"):
            oracles = ", ".join(f"{k} {v:.4f}" for k, v in results["ceilings"].items())
            con.print(f"oracles:  {oracles}   (ceiling: learned; docs/method.md)")
        subsets = sorted({n for s in results["models"].values() for n in s.get("subsets", {})})
        for n in subsets:
            on = ", ".join(f"{m} {results['models'][m]['subsets'][n]:.4f}" for m in results["ordering"])
            con.print(f"on the {n} subset alone: {on}")
        if results.get("references"):
            refs = sorted(results["references"].items(), key=lambda kv: -kv[1]["mutual_knn"])
            con.print("beside:   " + ", ".join(f"{k} {r['mutual_knn']:.4f}" for k, r in refs) + "   (docs/realdata.md)")
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


def demo(
    as_json: bool = typer.Option(False, "--json", help="print results.json to stdout"),
    sets: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="override a recipe field: key=value"),
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="where artifacts and MLflow live (default $PLATONIC_OUT_DIR, else .platonic)"
    ),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="allow a recipe whose trust_remote_code is true (runs a model repo's code)"
    ),
) -> None:
    """Run the whole DAG on the synthetic world. CPU, offline, a few minutes."""
    with _reported_errors():
        cfg = load_config(None, store.out_dir_sets(sets, out_dir))
        _run(cfg, None, None, [], as_json, trust_remote_code=trust_remote_code)


# the pipeline's stage names, spelled here so that `--help` imports no stage module (test_cli_help
# checks them against platonic.core.stages.pipeline.SPECS, so they do not drift)
STAGES = (
    "world", "concepts", "ingest", "positives", "dedup", "views", "train", "embed", "ceiling", "references",
    "evaluate", "curve",
)  # fmt: skip
STAGE_HELP = f"STAGE: {', '.join(STAGES)}, or one model's stage (train:good)"


def run(
    config: Path = typer.Argument(..., help="YAML recipe, e.g. configs/demo.yaml", metavar="RECIPE"),
    sets: list[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="override a recipe field: key=value (repeatable)"
    ),
    only: str | None = typer.Option(
        None, "--only", metavar="STAGE", help=f"execute only this stage (upstream from cache); {STAGE_HELP}"
    ),
    from_stage: str | None = typer.Option(
        None, "--from", metavar="STAGE", help=f"re-execute this stage and everything after it; {STAGE_HELP}"
    ),
    force: list[str] = typer.Option(
        [], "--force", metavar="STAGE", help=f"re-execute this stage even on a cache hit (repeatable); {STAGE_HELP}"
    ),
    as_json: bool = typer.Option(False, "--json", help="print results.json to stdout"),
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="where artifacts and MLflow live (default $PLATONIC_OUT_DIR, else the recipe's)"
    ),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="allow a recipe whose trust_remote_code is true (runs a model repo's code)"
    ),
) -> None:
    """Run a recipe, executing only the stages not in the cache.

    A stage whose cache key is unchanged is not executed again."""
    with _reported_errors():
        args = [str(config), *(a for s in sets for a in ("--set", s)), *(["--out-dir", out_dir] if out_dir else [])]
        command = shlex.join(["platonic", "run", *args])
        cfg = load_config(config, store.out_dir_sets(sets, out_dir))
        _run(cfg, only, from_stage, force, as_json, command, trust_remote_code)


def ablate(
    recipe: str = typer.Argument(
        ..., help="ablation recipe: a YAML file (configs/table7.yaml) or a packaged name (table7)", metavar="RECIPE"
    ),
    quick: bool = typer.Option(False, "--quick", help="apply the recipe's `quick` overrides (small world, short runs)"),
    sets: list[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="override an ablation field: key=value, e.g. seeds=[0,1,2,3]"
    ),
    base_sets: list[str] = typer.Option(
        [], "--base-set", metavar="KEY=VALUE", help="override the base pipeline recipe in every cell"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the result (run ids, summary) as JSON to stdout"),
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="where artifacts and MLflow live (default $PLATONIC_OUT_DIR, else the base recipe's)"
    ),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="allow a recipe whose trust_remote_code is true (runs a model repo's code)"
    ),
) -> None:
    """Run an ablation grid over seeds as one flow. Rows: positives; columns: objectives."""
    from ..api import ablate as run_ablation

    with _reported_errors():
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            results = run_ablation(recipe, sets, base_sets, quick, trust_remote_code, out_dir)
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


def table(
    experiment: str = typer.Argument(
        ..., help="MLflow experiment of the ablation (the recipe's `experiment`, e.g. table7)", metavar="EXPERIMENT"
    ),
    run_id: str | None = typer.Option(None, "--run", help="this ablation run instead of the latest finished one"),
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="where the default MLflow store lives (default $PLATONIC_OUT_DIR, else .platonic)"
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Print the grid of an ablation run (mean ± CI over seeds).

    The Table-7-like grid, rebuilt from the per-cell scores stored in MLflow and logged to that
    run as table.md."""
    with _reported_errors():
        out_dir = store.for_reading(out_dir)
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


def forecast(
    experiment: str = typer.Argument(..., help="MLflow experiment of the ablation (e.g. table7)", metavar="EXPERIMENT"),
    model: str = typer.Option(..., "--model", help="a column of the grid, e.g. good"),
    row: str | None = typer.Option(None, "--row", help="a row of the grid (default: the scaling row)"),
    samples: float | None = typer.Option(None, "--samples", help="budget to predict (default: the largest, held out)"),
    run_id: str | None = typer.Option(None, "--run", help="this ablation run instead of the latest finished one"),
    out_dir: str | None = typer.Option(
        None, "--out-dir", help="where the default MLflow store lives (default $PLATONIC_OUT_DIR, else .platonic)"
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Predict a run at another budget from a fitted scaling law.

    Fits the saturating law a(n) = a_inf − b·n^−alpha on finished runs and predicts one run at
    another budget, with an interval (runs at that budget are left out of the fit)."""
    with _reported_errors():
        out_dir = store.for_reading(out_dir)
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


def stages(config: Path | None = typer.Argument(None, help="recipe (default: the demo's)", metavar="RECIPE")) -> None:
    """List the stages: what each reads, takes and writes.

    Reads: recipe fields; takes: upstream artifacts; writes: its own files."""
    from rich.console import Console
    from rich.table import Table

    from platonic.core.stages import SPECS, instances, upstream

    try:
        cfg = load_config(config)
    except ConfigError as e:
        fail(str(e))
    t = Table(title="stages (in order)")
    for col in ("stage", "version", "reads (config)", "inputs", "writes", "what"):
        t.add_column(col, overflow="fold")
    for name, spec in SPECS.items():
        insts = [i for i in instances(cfg) if i.stage == name]
        if not insts:  # not a stage of this recipe (the world for real data, the concepts for the world)
            continue
        ids = ", ".join(i.id for i in insts)
        inputs = sorted({u for i in insts for u in upstream(cfg, i).values()})
        t.add_row(
            ids, str(spec.version), "\n".join(spec.reads), "\n".join(inputs) or "-", "\n".join(spec.writes), spec.doc
        )
    Console(width=200).print(t)
