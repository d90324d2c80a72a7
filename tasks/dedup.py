from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic_core.dedup import dedup as run_dedup
from platonic_core.stages import StageInstance

from .stage import execute


@task(name="dedup", cache_policy=NO_CACHE)
def dedup(cfg, positives_m, ingest_m, mode, ctx):
    """Drop training texts equal (after normalisation) to an eval caption."""

    def compute(out, run_id):
        return run_dedup(positives_m.path / "texts.parquet", ingest_m.path / "eval.parquet", cfg.dedup, out), {}

    return execute(StageInstance("dedup"), cfg, {"positives": positives_m, "ingest": ingest_m}, mode, ctx, compute,
                   log_files=("report.json", "removed.parquet"))
