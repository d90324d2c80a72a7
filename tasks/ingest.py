from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic_core.data.ingest import ingest_stats, ingest_world
from platonic_core.stages import StageInstance

from .stage import execute


@task(name="ingest", cache_policy=NO_CACHE)
def ingest(cfg, world_m, mode, ctx):
    """World output -> normalised Parquet + DuckDB catalog; bad rows quarantined."""

    def compute(out, run_id):
        counts = ingest_world(world_m.path, cfg.ingest, out, source=f"world:{world_m.digest[:16]}")
        return counts, {"corpus_stats": ingest_stats(out)}

    return execute(StageInstance("ingest"), cfg, {"world": world_m}, mode, ctx, compute,
                   log_files=("quarantine.parquet",))
