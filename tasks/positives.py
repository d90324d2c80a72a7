from __future__ import annotations

import time

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic.core.positives import (
    WorldGenerator,
    generate_corpus,
    generate_positives,
    make_backend,
)
from platonic.core.positives.images import image_source, input_shards
from platonic.core.stages import StageInstance, cache_key

from .fanout import mapper_for
from .stage import _logger, execute


@task(name="positives", cache_policy=NO_CACHE)
def positives(cfg, ingest_m, world_m, mode, ctx):
    """Recaptions and paraphrases through the generator interface: the world's own (demo),
    or a real model (openai | transformers | vllm), resumable shard by shard."""
    inst = StageInstance("positives")
    # the world is an input when it is the source (its renders are the images); a real
    # corpus's images are located by the ingest
    inputs = {"ingest": ingest_m} | ({"world": world_m} if cfg.ingest.source == "world" else {})
    pc = cfg.positives

    def compute_world(out, run_id):
        gen = WorldGenerator(world_m.path, cfg.world, seed=pc.seed)
        return generate_positives(ingest_m.path / "corpus.parquet", gen, pc, out), {}

    def compute_llm(out, run_id):
        # finished batches live beside the store, keyed by this stage's cache key, so a
        # killed run (or a forced rerun) resumes instead of regenerating
        key = cache_key(inst, cfg, {n: m.digest for n, m in inputs.items()})
        work = ctx.store.root / "positives-work" / key
        mapper = mapper_for(cfg.fanout)
        backend = make_backend(pc) if mapper is None else None  # fanned out: each worker builds its own
        log = _logger()

        def progress(r):
            log.info("positives shard %-20s %-9s %s (resumed %d rows; %.1fs)", r.shard, r.status, r.counts,
                     r.resumed_from, r.seconds)

        last = [time.monotonic()]

        def on_batch(shard, answered, to_ask):  # a long shard says how far it got, every 30 s
            if time.monotonic() - last[0] > 30:
                last[0] = time.monotonic()
                log.info("positives shard %s: %d / %d requests answered", shard, answered, to_ask)

        world_dir = world_m.path if "world" in inputs else None
        counts, stats = generate_corpus(input_shards(ingest_m.path), pc, backend, work, out,
                                        lambda shard: image_source(ingest_m.path, world_dir, shard), progress, on_batch,
                                        mapper=mapper)
        if getattr(backend, "info", None):
            stats["runner"] = backend.info
        log.info("positives: %d texts generated this run, %.2f texts/s, %.1f tokens/s", stats["generated_this_run"],
                 stats["texts_per_s"], stats["tokens_per_s"])
        return counts, stats

    # the world backend reads world.* too (its captioner is the world's grammar): the world
    # digest is an input, so a world change re-generates
    return execute(inst, cfg, inputs, mode, ctx, compute_world if pc.backend == "world" else compute_llm,
                   log_files=("failures.parquet", "generations.parquet"))
