from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic.core.dedup import dedup as run_dedup
from platonic.core.stages import StageInstance

from .fanout import mapper_for
from .stage import execute


@task(name="dedup", cache_policy=NO_CACHE)
def dedup(cfg, positives_m, ingest_m, mode, ctx):
    """Audit the training texts against the eval split (per level), then apply the removal policy."""

    def compute(out, run_id):
        stats: dict = {}
        counts = run_dedup(positives_m.path / "texts.parquet", ingest_m.path / "eval.parquet", cfg.dedup, out,
                           eval_name="world", stats=stats,
                           mapper=mapper_for(cfg.fanout))
        return counts, stats

    return execute(StageInstance("dedup"), cfg, {"positives": positives_m, "ingest": ingest_m}, mode, ctx, compute,
                   log_files=("report.json", "summary.md", "removed.parquet", "matches.parquet"))
