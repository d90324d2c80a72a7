from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic.core.evaluate import run_evaluate
from platonic.core.stages import StageInstance

from .stage import execute


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate(cfg, embed_ms, mode, ctx):
    """Mutual kNN of every text model with the image encoder; table and plot."""
    labels = {m: f"{cfg.train.models[m].kind}, {cfg.train.models[m].views} views" for m in cfg.evaluate.text_models}

    def compute(out, run_id):
        metrics = run_evaluate({m.stage.split(":", 1)[1]: m.path for m in embed_ms.values()}, cfg.evaluate, out, labels,
                               {m: cfg.train.models[m].views for m in cfg.evaluate.text_models})
        return {"n": metrics.pop("n")}, metrics

    return execute(StageInstance("evaluate"), cfg, embed_ms, mode, ctx, compute,
                   log_files=("scores.json", "table.md", "alignment.png"))
