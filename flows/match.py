"""Pair-free classification as one Prefect flow (`platonic match CONFIG`).

World sources first resolve the base pipeline's instances they read (the world and the
trained models, with everything upstream), through the same executor: cache hits when the
base recipe already ran in this out_dir. Then match_data -> match_image, match_text:* -> match,
each a cached stage (platonic.core.stages.match.MATCH_SPECS) with its MLflow run; one parent run.
"""

from __future__ import annotations

import json

from prefect import flow

from platonic.core.config import ClassMatchConfig
from platonic.core.stages.dag import RUN
from platonic.core.stages.match import match_base, match_base_instances, match_instances
from platonic.tasks import tracking
from platonic.tasks.executor import run_instances
from platonic.tasks.runs import parent_run, publish, recipe_run_name, run_header

from . import ctrl_c


@flow(name="match", flow_run_name=recipe_run_name, log_prints=True)
def match_flow(config: dict) -> dict:
    cfg = ClassMatchConfig.model_validate(config)
    base = match_base(cfg)
    plain = cfg.model_dump(mode="json")
    with (
        ctrl_c.over_prefect(),
        parent_run(cfg.out_dir, cfg.experiment, cfg.name, plain, {tracking.FLOW_TAG: "match"}, params=plain) as ctx,
    ):
        given = {}
        if base is not None:
            pipe = match_base_instances(base, cfg)
            given = run_instances(base, pipe, {i.id: RUN for i in pipe}, ctx)
        insts = match_instances(cfg)
        done = run_instances(cfg, insts, {i.id: RUN for i in insts}, ctx, given=given)
        m = done["match"]
        scores = json.loads((m.path / "scores.json").read_text())
        results = {
            **run_header(ctx, cfg.experiment),
            "recipe": cfg.name,
            "match_run_id": m.producer_run_id,
            "stages": {
                k: {"cache_key": v.cache_key, "run_id": v.producer_run_id, "uri": v.uri} for k, v in done.items()
            },
            **scores,
        }
        summary = {
            f"{metric}/{cs}/{model}": r["summary"][metric]["mean"]
            for cs, models in scores["scores"].items()
            for model, r in models.items()
            for metric in ("top1", "topk")
        }
        tracking.log_metrics(ctx.client, ctx.parent_run_id, summary)
        publish(ctx, results, {n: m.path / n for n in ("table.md", "match.png", "scores.json")})
        return results
