from __future__ import annotations

import json

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic.core.evaluate import run_curve
from platonic.core.stages import StageInstance

from . import tracking
from .stage import execute


@task(name="curve", cache_policy=NO_CACHE, task_run_name="curve:{model}")
def curve(cfg, model, train_m, ingest_m, image_embed_m, mode, ctx):
    """Alignment at every snapshot of one run; the curve also goes to MLflow as a metric
    stepped by samples seen."""
    inst = StageInstance("curve", model)

    def compute(out, run_id):
        counts = run_curve(cfg.train.models[model], train_m.path, ingest_m.path, image_embed_m.path, cfg.evaluate, out,
                           cfg.embed.batch_size)
        for p in json.loads((out / "curve.json").read_text())["points"]:
            tracking.log_metrics(ctx.client, run_id, {"curve/mutual_knn": p["mutual_knn"]}, step=p["samples"])
        return {"points": counts["points"]}, {"final_mutual_knn": counts["final_mutual_knn"]}

    return execute(inst, cfg, {train_m.stage: train_m, ingest_m.stage: ingest_m, image_embed_m.stage: image_embed_m},
                   mode, ctx, compute, log_files=("curve.json",))
