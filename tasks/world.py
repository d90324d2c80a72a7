from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic.core.stages import StageInstance
from platonic.core.world import generate_world

from .stage import execute


@task(name="world", cache_policy=NO_CACHE)
def world(cfg, mode, ctx):
    """Generate the synthetic world (the demo's source)."""
    return execute(StageInstance("world"), cfg, {}, mode, ctx,
                   lambda out, run_id: (generate_world(cfg.world, out), {}))
