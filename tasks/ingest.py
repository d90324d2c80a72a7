"""The ingest stage: the synthetic world, or a real corpus shard by shard.

In the pipeline the artifact lives in the store (`.platonic/artifacts/ingest/<key>/`);
`platonic ingest ... --out DIR` runs the same stage (same cache key, manifest and MLflow
records) with the artifact in DIR. Either way each shard's output is cached by its content
digest under `.platonic/artifacts/ingest-shards/`, so an unchanged shard is never redone.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic.core.artifacts import Manifest
from platonic.core.data.corpus import ShardResult, ingest_corpus
from platonic.core.data.ingest import ingest_stats, ingest_world
from platonic.core.data.readers import Shard, resolve_sources
from platonic.core.stages import FORCE, RUN, StageInstance

from . import tracking
from .fanout import mapper_for
from .stage import RunContext, _logger, execute


class IngestFailed(RuntimeError):
    """Some shards could not be read; the others were ingested. Carries the manifest."""

    def __init__(self, manifest: Manifest):
        failed = manifest.stats.get("failed_shards", [])
        super().__init__(f"{len(failed)} of {manifest.counts['shards']} shards failed: "
                         + "; ".join(f["error"] for f in failed))
        self.manifest = manifest


def source_manifest(ingest_cfg, shards: list[Shard]) -> Manifest:
    """The corpus as a stage input: its digest covers every shard's id and content digest,
    so it is what the ingest cache key (and MLflow's `datasets.digest`) sees."""
    h = hashlib.sha256()
    for s in shards:
        h.update(f"{s.id}\0{s.digest}\n".encode())
    digest = h.hexdigest()
    return Manifest(stage=f"source:{ingest_cfg.source}", stage_version=0, cache_key=digest[:16],
                    uri=" ".join(ingest_cfg.paths), digest=digest, counts={"shards": len(shards)},
                    schema={s.id: {"uri": s.uri, "digest": s.digest} for s in shards[:1000]},
                    config={}, upstream={}, upstream_digests={})


@task(name="ingest", cache_policy=NO_CACHE)
def ingest(cfg, world_m, mode, ctx, folder: Path | None = None):
    """Source -> normalised Parquet + DuckDB catalog; bad rows quarantined with a reason."""
    inst = StageInstance("ingest")
    if cfg.ingest.source == "world":

        def compute(out, run_id):
            counts = ingest_world(world_m.path, cfg.ingest, out, source=f"world:{world_m.digest[:16]}")
            return counts, {"corpus_stats": ingest_stats(out)}

        return execute(inst, cfg, {"world": world_m}, mode, ctx, compute, log_files=("quarantine.parquet",),
                       folder=folder)

    ic = cfg.ingest
    shards = resolve_sources(ic.paths, ic.source, ic.revision, ic.allow_patterns or None)
    log = _logger()

    def progress(r: ShardResult) -> None:
        c = r.counts
        if r.status == "failed":
            log.error("ingest shard %s FAILED: %s", r.shard.id, r.error)
        else:
            log.info("ingest shard %-28s %-8s in %d kept %d quarantined %d (%.1fs)", r.shard.id, r.status,
                     c.get("in", 0), c.get("kept", 0), c.get("quarantined", 0), r.seconds)

    def compute(out, run_id):
        counts, results = ingest_corpus(shards, ic, out, ctx.store.root / "ingest-shards", progress,
                                        mapper=mapper_for(cfg.fanout))
        failed = [{"shard": r.shard.id, "uri": r.shard.uri, "error": r.error} for r in results if r.status == "failed"]
        return counts, {"failed_shards": failed}

    m = execute(inst, cfg, {"source": source_manifest(ic, shards)}, mode, ctx, compute,
                log_files=("shards.parquet",), folder=folder)
    if m.counts.get("shards_failed"):
        raise IngestFailed(m)
    return m


LATEST = "latest-out.txt"


def remember(store_root: Path, folder: Path) -> None:
    """Note an ingest output outside the store, so `platonic corpus stats` finds it."""
    p = Path(store_root) / "ingest" / LATEST
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(str(Path(folder).resolve()))


def ingest_standalone(cfg, out: Path | None = None, force: bool = False) -> Manifest:
    """`platonic ingest`: the ingest stage alone, outside Prefect, under its own MLflow
    parent run (the stage's nested run carries params, counts, inputs, the manifest)."""
    out_dir = Path(cfg.out_dir).resolve()
    c = tracking.client(out_dir)
    exp = tracking.experiment_id(c, cfg.experiment, out_dir)
    tags = {"platonic.recipe": f"ingest:{cfg.ingest.source}", "platonic.command": "platonic ingest"}
    if commit := tracking.git_commit():
        tags["mlflow.source.git.commit"] = commit
    parent = c.create_run(exp, run_name=f"ingest-{time.strftime('%Y%m%d-%H%M%S')}", tags=tags).info.run_id
    ctx = RunContext(out_dir, exp, parent, tracking.tracking_uri(out_dir))
    try:
        tracking.log_params(c, parent, tracking.flatten({"ingest": cfg.ingest.model_dump(mode="json")}))
        m = ingest.fn(cfg, None, FORCE if force else RUN, ctx, folder=out)
        remember(ctx.store.root, Path(m.uri))
        tracking.log_metrics(c, parent, m.counts)
        c.set_terminated(parent, "FINISHED")
        return m
    except IngestFailed as e:
        remember(ctx.store.root, Path(e.manifest.uri))
        tracking.log_metrics(c, parent, e.manifest.counts)
        c.set_terminated(parent, "FAILED")
        raise
    except BaseException:
        c.set_terminated(parent, "FAILED")
        raise
