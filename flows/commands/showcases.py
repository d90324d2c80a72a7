"""The flows beyond the pipeline: `caption`, `match`, `compare`, and `stand-ins` (the tiny local
models `compare_tiny.yaml` and the positives backends run on)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import typer

from platonic.core.config import ConfigError, load_config, require_trusted

from .. import runlog, services, store
from .common import _reported_errors, fail


def compare(
    config: Path = typer.Argument(..., help="comparison recipe, e.g. configs/paper_table.yaml", metavar="RECIPE"),
    sets: list[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="override a recipe field: key=value (repeatable)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print results.json to stdout"),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="allow a recipe whose trust_remote_code is true (runs a model repo's code)"
    ),
) -> None:
    """The paper's table over models and eval sets.

    Every text model x vision encoder x eval set (mutual kNN, cached)."""
    from platonic.core.config import CompareConfig

    with _reported_errors():
        cfg = load_config(config, store.out_dir_sets(sets), model=CompareConfig)
        require_trusted(cfg, trust_remote_code)
        where = store.check_for_writing(cfg.out_dir, f"platonic compare {config} --set out_dir=COPY")
        store.say(where)
        services.embedded_defaults()
        services.choose_prefect_server(where)
        where.mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            from ..compare import compare_flow

            runlog.start(where)  # the full log in the store; the terminal without tracebacks

            results = compare_flow(cfg.model_dump(mode="json"))
    if as_json:
        typer.echo(json.dumps(results, indent=1))
    else:
        typer.echo((Path(results["output_dir"]) / "table.md").read_text())
        typer.echo(f"results: {results['output_dir']}/results.json   MLflow run id: {results['run_id']}")


def match(
    config: str = typer.Argument(
        ...,
        help="match recipe: a YAML file (configs/match_world.yaml) or a packaged name (match_world)",
        metavar="RECIPE",
    ),
    sets: list[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="override a recipe field: key=value (repeatable)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print results.json to stdout"),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="allow a recipe whose trust_remote_code is true (runs a model repo's code)"
    ),
) -> None:
    """Pair-free classification: image clusters to class names.

    K-means image clusters matched to class-name embeddings by their kernels alone (no
    image-text pair); top-1/top-5 vs chance and the labelled oracle."""
    from platonic.core.config import ClassMatchConfig
    from platonic.core.config.packages import match_needed_packages
    from platonic.core.stages import match_base

    from ..api import require_packages

    with _reported_errors():
        cfg = load_config(config, store.out_dir_sets(sets), model=ClassMatchConfig)
        # a bad base recipe or model name, or a package a model needs, fails here, before Prefect starts
        base = match_base(cfg)
        require_trusted([cfg, base], trust_remote_code)
        require_packages(match_needed_packages(cfg, base))
        where = store.check_for_writing(cfg.out_dir, f"platonic match {config} --set out_dir=COPY")
        store.say(where)
        services.embedded_defaults()
        services.choose_prefect_server(where)
        where.mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            from ..match import match_flow

            runlog.start(where)  # the full log in the store; the terminal without tracebacks

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


def caption(
    recipe: str = typer.Argument(
        ...,
        help="caption recipe: a YAML file (configs/caption_world.yaml) or a packaged name (caption_world)",
        metavar="RECIPE",
    ),
    sets: list[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="override a caption field: key=value, e.g. seeds=[0]"
    ),
    base_sets: list[str] = typer.Option(
        [], "--base-set", metavar="KEY=VALUE", help="override the base pipeline recipe"
    ),
    force: list[str] = typer.Option(
        [], "--force", metavar="STAGE", help="re-execute this caption stage even on a cache hit"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the results (run ids, summary) as JSON to stdout"),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="allow a recipe whose trust_remote_code is true (runs a model repo's code)"
    ),
) -> None:
    """Captions through one map, scored with pycocoevalcap.

    Image encoder -> linear map (paired at N pairs, or pair-free) -> a decoder trained on text
    only; scored with pycocoevalcap (needs Java)."""
    from platonic.core.caption.recipe import load_caption
    from platonic.core.caption.score import MissingJava, MissingScorer, require_java, require_scorer
    from platonic.core.config.packages import needed_packages

    from ..api import require_packages

    try:  # before anything runs: scoring needs both
        require_scorer()
        require_java()
    except (MissingJava, MissingScorer) as e:
        fail(str(e), 1)
    with _reported_errors():
        cfg, base = load_caption(recipe, store.out_dir_sets(sets), base_sets)
        require_trusted([cfg, base], trust_remote_code)
        if base is not None:  # what the base pipeline turns on, before Prefect starts
            require_packages(needed_packages(base))
        where = store.check_for_writing(cfg.out_dir, f"platonic caption {recipe} --set out_dir=COPY")
        from platonic.core.stages import caption_instances

        known = {i.stage for i in caption_instances(cfg)} | {i.id for i in caption_instances(cfg)}
        for f in force:
            if f not in known:
                raise ConfigError(f"--force {f!r}: not a caption stage ({', '.join(sorted(known))})")
        store.say(where)
        where.mkdir(parents=True, exist_ok=True)
        if base is not None:
            services.apply(base.services)
        else:
            services.embedded_defaults()
        services.choose_prefect_server(where)
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            from ..caption import caption_flow

            runlog.start(where)  # the full log in the store; the terminal without tracebacks

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


def stand_ins(
    out: Path = typer.Argument(Path(".platonic/stand-ins"), help="where to write them", metavar="DIR"),
    n: int = typer.Option(64, "--n", help="eval scenes in the PRH-format set"),
) -> None:
    """Build tiny local models and a PRH-format eval set.

    For `platonic compare configs/compare_tiny.yaml` and the positives backends."""
    from platonic.flows.standins import build_standins

    for k, v in build_standins(out, n=n).items():
        typer.echo(f"{k:10s} {v}")
    # tiny generators for the positives backends (serve-chat, transformers, the vLLM stand-in)
    import pyarrow.parquet as pq

    from platonic.flows.standins import build_generation_standins

    texts = pq.read_table(out / "world" / "alt_texts.parquet", columns=["text"])["text"].to_pylist()
    for k, v in build_generation_standins(out, texts).items():
        typer.echo(f"gen-{k:6s} {v}")
