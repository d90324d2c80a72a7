from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic.core.features import run_embed
from platonic.core.stages import StageInstance

from . import tracking
from .stage import execute


@task(name="embed", cache_policy=NO_CACHE, task_run_name="embed:{model}")
def embed(cfg, model, train_m, eval_m, mode, ctx):
    """Per-layer features of the eval split for one trained model."""
    inst = StageInstance("embed", model)

    def compute(out, run_id):
        counts = run_embed(cfg.train.models[model], train_m.path, eval_m.path, out, cfg.embed.batch_size,
                           cfg.embed.text_output, cfg.embed.layer)
        # which embedding the evaluation compares (also in the params: the `embed` section)
        tracking.set_tags(ctx.client, run_id, {"platonic.text_output": cfg.embed.text_output,
                                               "platonic.embed_layer": str(cfg.embed.layer)})
        return counts, {}

    return execute(inst, cfg, {train_m.stage: train_m, eval_m.stage: eval_m}, mode, ctx, compute)
