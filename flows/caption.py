"""Captioning through one map as one Prefect flow (`platonic caption RECIPE`).

    platonic caption configs/caption_world.yaml [--set seeds=[0]] [--base-set train.threads=1]

World recipes first run the base pipeline's stages the captioner reads (world, dedup, the
encoders' train stages: cache hits after `platonic run` on the base recipe), then the caption
stages (platonic.core.stages.caption, CAPTION_SPECS), all through the one executor: cached by content,
one nested MLflow run each, lineage back to the world. The report's files (table, curve,
examples with the rendered images) go to the parent run and to `<out>/runs/<run id>/`.
"""

from __future__ import annotations

import json

from prefect import flow

from platonic.core.caption.recipe import pipeline_needs
from platonic.core.caption.summary import summary_metrics
from platonic.core.config import CaptionConfig, PipelineConfig
from platonic.core.stages.caption import caption_instances
from platonic.core.stages.dag import FORCE, RUN
from platonic.core.stages.pipeline import closure
from platonic.tasks import tracking
from platonic.tasks.executor import run_instances
from platonic.tasks.runs import parent_run, publish, recipe_run_name, run_header

from . import ctrl_c


@flow(name="caption", flow_run_name=recipe_run_name, log_prints=True)
def caption_flow(config: dict, base: dict | None = None, force: list[str] | None = None) -> dict:
    """`force`: caption stages (names or instance ids) re-executed even on a cache hit."""
    cfg = CaptionConfig.model_validate(config)
    pcfg = PipelineConfig.model_validate(base) if base is not None else None
    with (
        ctrl_c.over_prefect(),
        parent_run(
            cfg.out_dir,
            cfg.experiment,
            cfg.name,
            {"caption": config, "base": base},
            {tracking.FLOW_TAG: "caption"},
            params={"caption": config},
        ) as ctx,
    ):
        given = {}
        if pcfg is not None:
            insts = closure(pcfg, pipeline_needs(cfg, pcfg))
            given = run_instances(pcfg, insts, {i.id: RUN for i in insts}, ctx)
        insts = caption_instances(cfg)
        modes = {i.id: FORCE if force and (i.stage in force or i.id in force) else RUN for i in insts}
        done = run_instances(cfg, insts, modes, ctx, given=given)
        report = done["caption_report"]
        summary = json.loads((report.path / "summary.json").read_text())
        tracking.log_metrics(ctx.client, ctx.parent_run_id, summary_metrics(summary))
        results = {
            **run_header(ctx, cfg.experiment),
            "recipe": cfg.name,
            "report_run_id": report.producer_run_id,
            "stages": {
                k: {"cache_key": v.cache_key, "run_id": v.producer_run_id, "uri": v.uri} for k, v in done.items()
            },
            "summary": summary,
        }
        files = {p.name: p for p in sorted(report.path.iterdir()) if p.is_file() and p.name != "manifest.json"}
        publish(ctx, results, files)
        return results
