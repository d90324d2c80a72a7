from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic_core.positives import WorldGenerator, generate_positives
from platonic_core.stages import StageInstance

from .stage import execute


@task(name="positives", cache_policy=NO_CACHE)
def positives(cfg, ingest_m, world_m, mode, ctx):
    """Recaptions and paraphrases through the generator interface (demo: the world's own)."""

    def compute(out, run_id):
        gen = WorldGenerator(world_m.path, cfg.world, seed=cfg.positives.seed)
        return generate_positives(ingest_m.path / "corpus.parquet", gen, cfg.positives, out), {}

    # the world backend reads world.* too (its captioner is the world's grammar): the world
    # digest is an input, so a world change re-generates
    return execute(StageInstance("positives"), cfg, {"ingest": ingest_m, "world": world_m}, mode, ctx, compute,
                   log_files=("failures.parquet",))
