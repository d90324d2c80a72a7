"""The whole DAG as one Prefect flow; one MLflow parent run per flow run.

    world -> ingest -> positives -> dedup -> views -> train:{text models}
    world -> train:{image model};  train:* -> embed:* -> evaluate
    train:{model with snapshots} + embed:{image model} -> curve:{model}

Stages pass manifests (references to artifacts), never data.
"""

from __future__ import annotations

import json

from prefect import flow

from platonic.core.artifacts import Manifest
from platonic.core.config import PipelineConfig, load_config, stable_hash
from platonic.core.stages import SKIP, curve_models, evaluated_models, plan
from platonic.tasks import tracking
from platonic.tasks.curve import curve
from platonic.tasks.dedup import dedup
from platonic.tasks.embed import embed
from platonic.tasks.evaluate import evaluate
from platonic.tasks.fanout import mapper_for
from platonic.tasks.ingest import ingest
from platonic.tasks.positives import positives
from platonic.tasks.stage import RunContext
from platonic.tasks.train import train
from platonic.tasks.views import views
from platonic.tasks.world import world

from .common import parent_run


class StageUnavailable(RuntimeError):
    """The recipe asks for a stage this source cannot feed (real corpora stop after ingest)."""


def resolve_config(config: dict | None, recipe: str | None, sets: list[str] | None) -> PipelineConfig:
    """The flow's recipe: a validated config (what the CLI sends), or a recipe name/path plus
    `--set` overrides (what a deployment sends: plain parameters the Prefect UI can edit).
    The recipe's `services` endpoints are exported where the environment sets none."""
    if config is not None:
        if recipe is not None or sets:
            raise ValueError("give either config or recipe (+ sets), not both")
        cfg = PipelineConfig.model_validate(config)
    else:
        cfg = load_config(recipe or "demo", list(sets or []))
    cfg.services.apply()
    return cfg


@flow(name="pipeline", log_prints=True)
def pipeline(config: dict | None = None, only: str | None = None, from_stage: str | None = None,
             force: list[str] | None = None, recipe: str | None = None, sets: list[str] | None = None) -> dict:
    """Every stage of a recipe. From a deployment:
    prefect deployment run 'pipeline/demo' --param recipe=tiny --param 'sets=["seed=1"]'"""
    cfg = resolve_config(config, recipe, sets)
    modes = plan(cfg, only, from_stage, force)
    with parent_run(cfg.out_dir, cfg.experiment, cfg.name, cfg.model_dump(mode="json"),
                    {"platonic.flow": "pipeline", "platonic.plan": json.dumps(modes)}) as ctx:
        tracking.log_params(ctx.client, ctx.parent_run_id, tracking.flatten(cfg.model_dump(mode="json")))
        m = run_stages(cfg, modes, ctx)
        return collect_results(cfg, m, ctx.parent_run_id, ctx)


@flow(name="stage", log_prints=True)
def stage(stage: str, recipe: str = "demo", sets: list[str] | None = None, force: bool = False) -> dict:
    """One stage instance (`train:good`, `embed`, ...) on cached upstream artifacts, under
    its own parent run: what `platonic run --only STAGE` does. From a deployment:
    prefect deployment run 'stage/train' --param recipe=tiny --param stage=train:good"""
    return pipeline.fn(only=stage, force=[stage] if force else None, recipe=recipe, sets=sets)


def run_stages(cfg: PipelineConfig, modes: dict[str, str], ctx: RunContext) -> dict[str, Manifest]:
    """Every stage instance of one recipe, in order, under the flow run of `ctx`."""
    m: dict[str, Manifest] = {}

    def run(inst_id, fn, *args):
        if modes[inst_id] == SKIP:
            return None
        m[inst_id] = fn(cfg, *args, modes[inst_id], ctx)
        return m[inst_id]

    run("world", world)
    run("ingest", ingest, m.get("world"))
    downstream = [i for i, mode in modes.items() if mode != SKIP and i not in ("world", "ingest")]
    if cfg.positives.backend != "world":  # a model backend generates positives for a real corpus too
        downstream = [i for i in downstream if i != "positives"]
    if cfg.ingest.source != "world" and downstream:
        raise StageUnavailable(
            f"ingest of the {cfg.ingest.source} corpus is done ({m['ingest'].uri if 'ingest' in m else 'not run'}); "
            f"the stages after it ({', '.join(downstream[:3])}, ...) need a positives backend and images for a "
            "real corpus, which the 'world' backend cannot provide: run `--only ingest` or "
            "`platonic ingest` for real corpora (with a model backend, `--only positives` generates their positives)")
    run("positives", positives, m.get("ingest"), m.get("world"))
    run("dedup", dedup, m.get("positives"), m.get("ingest"))
    run("views", views, m.get("dedup"))
    models = evaluated_models(cfg)
    for name in models:
        src = "world" if cfg.train.models[name].kind == "image_jepa" else "views"
        run(f"train:{name}", lambda cfg_, mode, ctx_, n=name, s=src: train(cfg_, n, m.get(s), mode, ctx_))
    def eval_input(name: str) -> Manifest | None:
        return m.get("world" if cfg.train.models[name].kind == "image_jepa" else "ingest")

    to_embed = [n for n in models if modes[f"embed:{n}"] != SKIP]
    mapper = mapper_for(cfg.fanout)
    if mapper is not None and len(to_embed) > 1:  # one Dask task run per model
        done = mapper(embed.fn, [(cfg, n, m.get(f"train:{n}"), eval_input(n), modes[f"embed:{n}"], ctx) for n in to_embed])
        m.update({f"embed:{n}": manifest for n, manifest in zip(to_embed, done, strict=True)})
    else:
        for name in models:
            run(f"embed:{name}", lambda cfg_, mode, ctx_, n=name: embed(cfg_, n, m.get(f"train:{n}"), eval_input(n), mode, ctx_))
    run("evaluate", lambda cfg_, mode, ctx_: evaluate(cfg_, {f"embed:{n}": m[f"embed:{n}"] for n in models}, mode, ctx_))
    image = f"embed:{cfg.evaluate.image_model}"
    for name in curve_models(cfg):
        run(f"curve:{name}", lambda cfg_, mode, ctx_, n=name: curve(cfg_, n, m.get(f"train:{n}"), m.get("ingest"), m.get(image),
                                                                   mode, ctx_))
    return m


def collect_results(cfg: PipelineConfig, m: dict, parent: str, ctx: RunContext) -> dict:
    """results.json: per model its scores and the MLflow runs behind them."""
    out = ctx.out_dir / "runs" / parent
    out.mkdir(parents=True, exist_ok=True)
    results = {
        "run_id": parent, "experiment": cfg.experiment, "experiment_id": ctx.experiment_id, "recipe": cfg.name, "config_digest": stable_hash(cfg),
        "tracking_uri": ctx.tracking_uri, "output_dir": str(out),
        "stages": {k: {"cache_key": v.cache_key, "digest": v.digest, "run_id": v.producer_run_id, "uri": v.uri}
                   for k, v in m.items()},
    }
    ev = m.get("evaluate")
    if ev is not None:
        scores = json.loads((ev.path / "scores.json").read_text())
        results.update({"evaluate_run_id": ev.producer_run_id, "metric": scores["metric"], "k": scores["k"],
                        "n": scores["n"], "chance": scores["chance"], "image_model": scores["image_model"]})
        results["models"] = {
            name: {k: v for k, v in s.items() if k != "per_layer"} | {
                "kind": cfg.train.models[name].kind, "views": cfg.train.models[name].views,
                "train_run_id": m[f"train:{name}"].producer_run_id, "embed_run_id": m[f"embed:{name}"].producer_run_id,
            }
            for name, s in scores["models"].items()
        }
        results["ordering"] = sorted(results["models"], key=lambda n: -results["models"][n]["mutual_knn"])
        for f in ("table.md", "alignment.png"):
            (out / f).write_bytes((ev.path / f).read_bytes())
    (out / "results.json").write_text(json.dumps(results, indent=1))
    c = ctx.client
    c.log_artifact(parent, str(out / "results.json"))
    for f in ("table.md", "alignment.png"):
        if (out / f).exists():
            c.log_artifact(parent, str(out / f))
    for name, s in results.get("models", {}).items():
        tracking.log_metrics(c, parent, {f"mutual_knn/{name}": s["mutual_knn"]})
    return results
