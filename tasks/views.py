from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic.core.stages import StageInstance
from platonic.core.views import build_views

from .stage import execute


@task(name="views", cache_policy=NO_CACHE)
def views(cfg, dedup_m, mode, ctx):
    """Good views, texts for bad views / next-token, the shared tokenizer."""
    return execute(StageInstance("views"), cfg, {"dedup": dedup_m}, mode, ctx,
                   lambda out, run_id: (build_views(dedup_m.path / "texts.parquet", cfg.views, out), {}),
                   log_files=("tokenizer.json",))
