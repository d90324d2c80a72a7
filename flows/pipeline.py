"""The pipeline as Prefect flows: every stage of a recipe (`pipeline`), or one (`stage`).

The DAG lives in `platonic.core.stages` (as data); the executor in `platonic.tasks` walks it.
This module opens the MLflow parent run, runs the plan, and publishes results.json.

    platonic run configs/demo.yaml                    (flows/cli.py)
    prefect deployment run 'pipeline/demo' --param recipe=tiny --param 'sets=["seed=1"]'
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from prefect import flow
from prefect.runtime import deployment

from platonic.core.artifacts import Manifest
from platonic.core.config import (
    DEPLOYMENT_OVERRIDES,
    ConfigError,
    PipelineConfig,
    check_overrides,
    load_config,
    stable_hash,
)
from platonic.core.stages.dag import SKIP, plan, require_cached
from platonic.core.stages.pipeline import instances
from platonic.tasks import tracking
from platonic.tasks.executor import RunContext, run_instances
from platonic.tasks.runs import name_by_what_ran, parent_run, publish, recipe_run_name, run_header

from . import ctrl_c, services, store


def resolve_config(
    config: dict | None, recipe: str | None, sets: list[str] | None, deployed: bool = False
) -> PipelineConfig:
    """The flow's recipe: a validated config (what the CLI sends), or a recipe name/path plus
    `--set` overrides (what a deployment sends: plain parameters the Prefect UI can edit).
    The recipe's `services` endpoints are exported where the environment sets none; a
    recipe's out_dir gives way to $PLATONIC_OUT_DIR, and both to an `out_dir=` in `sets`.

    `deployed`: the parameters came through the Prefect API, from whoever can reach it. Then
    only a packaged recipe or a recipe file under the working directory (the deployed
    checkout) is read, a whole `config` is refused, and every override must match
    DEPLOYMENT_OVERRIDES or a pattern of $PLATONIC_DEPLOYMENT_OVERRIDES (the worker's own
    environment, set by its operator)."""
    if config is not None:
        if recipe is not None or sets:
            raise ValueError("give either config or recipe (+ sets), not both")
        if deployed:
            raise ConfigError("a deployment run takes a recipe and allow-listed sets, not a whole config")
        cfg = PipelineConfig.model_validate(config)
    else:
        if deployed:
            check_deployed_recipe(recipe or "demo")
            extra = os.environ.get("PLATONIC_DEPLOYMENT_OVERRIDES", "")
            check_overrides(list(sets or []), (*DEPLOYMENT_OVERRIDES, *filter(None, extra.split(","))))
        cfg = load_config(recipe or "demo", store.out_dir_sets(sets or []))  # $PLATONIC_OUT_DIR: the worker's
    services.apply(cfg.services)
    return cfg


def check_deployed_recipe(recipe: str) -> None:
    """A deployment's recipe: a packaged name, or a file inside the working directory."""
    if "/" not in recipe and not recipe.endswith((".yaml", ".yml")):
        return
    where = Path.cwd().resolve()
    if not Path(recipe).resolve().is_relative_to(where):
        raise ConfigError(f"recipe {recipe!r}: a deployment run reads packaged recipes or files under {where}")


@flow(name="pipeline", flow_run_name=recipe_run_name, log_prints=True)
def pipeline(
    config: dict | None = None,
    only: str | None = None,
    from_stage: str | None = None,
    force: list[str] | None = None,
    recipe: str | None = None,
    sets: list[str] | None = None,
) -> dict:
    """Every stage of a recipe. From a deployment:
    prefect deployment run 'pipeline/demo' --param recipe=tiny --param 'sets=["seed=1"]'"""
    cfg = resolve_config(config, recipe, sets, deployed=deployment.id is not None)
    modes = plan(cfg, only, from_stage, force)
    require_cached(cfg, modes, "run the pipeline without --only first")
    plain = cfg.model_dump(mode="json")
    with (
        ctrl_c.over_prefect(),
        parent_run(
            cfg.out_dir,
            cfg.experiment,
            cfg.name,
            plain,
            {tracking.FLOW_TAG: "pipeline", "platonic.plan": json.dumps(modes)},
            params=plain,
        ) as ctx,
    ):
        results = collect_results(cfg, run_instances(cfg, instances(cfg), modes, ctx), ctx)
        with contextlib.suppress(Exception):  # a finished run's results stand even if renaming it fails
            name_by_what_ran(ctx, [i for i, mode in modes.items() if mode != SKIP], only)
        return results


@flow(name="stage", flow_run_name=recipe_run_name, log_prints=True)
def stage(stage: str, recipe: str = "demo", sets: list[str] | None = None, force: bool = False) -> dict:
    """One stage instance (`train:good`, `embed`, ...) on cached upstream artifacts, under
    its own parent run: what `platonic run --only STAGE` does. From a deployment:
    prefect deployment run 'stage/train' --param recipe=tiny --param stage=train:good"""
    return pipeline.fn(only=stage, force=[stage] if force else None, recipe=recipe, sets=sets)


def collect_results(cfg: PipelineConfig, m: dict[str, Manifest], ctx: RunContext) -> dict:
    """results.json: per model its scores and the MLflow runs behind them."""
    parent = ctx.parent_run_id
    results = {
        **run_header(ctx, cfg.experiment),
        "recipe": cfg.name,
        "config_digest": stable_hash(cfg),
        "stages": {
            k: {"cache_key": v.cache_key, "digest": v.digest, "run_id": v.producer_run_id, "uri": v.uri}
            for k, v in m.items()
        },
    }
    ev = m.get("evaluate")
    files = {}
    if ev is not None:
        scores = json.loads((ev.path / "scores.json").read_text())
        results.update(
            {
                "evaluate_run_id": ev.producer_run_id,
                "metric": scores["metric"],
                "k": scores["k"],
                "n": scores["n"],
                "chance": scores["chance"],
                "image_model": scores["image_model"],
                "ceilings": scores.get("ceilings", {}),
                "references": scores.get("references", {}),
            }
        )
        results["models"] = {
            name: {k: v for k, v in s.items() if k != "per_layer"}
            | {"per_layer_best": [max(row) for row in s["per_layer"]]}
            | {
                "kind": cfg.train.models[name].kind,
                "views": cfg.train.models[name].views,
                "train_run_id": m[f"train:{name}"].producer_run_id,
                "embed_run_id": m[f"embed:{name}"].producer_run_id,
            }
            for name, s in scores["models"].items()
        }
        for name, r in results["models"].items():
            if f"curve:{name}" in m:  # alignment along the run, from its initial weights (step 0)
                pts = json.loads((m[f"curve:{name}"].path / "curve.json").read_text())["points"]
                r["curve"] = [{k: p[k] for k in ("steps", "samples", "mutual_knn")} for p in pts]
                r["gain_over_init"] = pts[-1]["mutual_knn"] - pts[0]["mutual_knn"] if pts[0]["steps"] == 0 else None
        results["ordering"] = sorted(results["models"], key=lambda n: -results["models"][n]["mutual_knn"])
        files = {f: ev.path / f for f in ("table.md", "alignment.png")}
    publish(ctx, results, files)
    for name, s in results.get("models", {}).items():
        tracking.log_metrics(ctx.client, parent, {f"mutual_knn/{name}": s["mutual_knn"]})
    return results
