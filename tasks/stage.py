"""The stage contract, once: cache lookup, MLflow nested run, manifest.

Every stage task calls `execute(...)` with a `compute(out_dir) -> (counts, stats)` closure.
`execute` computes the cache key (stage, version, config fields read, input digests), and
- on a cache hit: runs no stage body, and logs a nested MLflow run tagged
  `platonic.cache_hit=true` that points at the producing run (`platonic.producer_run_id`);
- otherwise: runs `compute` in a staging folder, commits the artifact atomically, writes
  the manifest, and logs params, inputs (digests), counts, stats and files to MLflow.
"""

from __future__ import annotations

import fcntl
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mlflow.tracking import MlflowClient

from platonic.core.artifacts import ArtifactStore, Manifest
from platonic.core.config import PipelineConfig
from platonic.core.stages import CACHED_ONLY, FORCE, StageInstance, cache_key

from . import tracking


def _logger() -> logging.Logger | logging.LoggerAdapter:
    """Prefect's run logger inside a flow (console + UI), a plain logger outside."""
    try:
        from prefect.logging import get_run_logger

        return get_run_logger()
    except Exception:
        return logging.getLogger("platonic")


class UpstreamNotCached(RuntimeError):
    pass


@dataclass
class RunContext:
    """What every stage task needs to know about the flow run it belongs to."""

    out_dir: Path
    experiment_id: str
    parent_run_id: str
    tracking_uri: str
    # instances already resolved in this flow run, by cache key: a grid whose cells share a
    # stage (the ablation's world, views, image model) logs it once, not once per cell
    resolved: dict[tuple[str, str], Manifest] = field(default_factory=dict)

    @property
    def store(self) -> ArtifactStore:
        return ArtifactStore(self.out_dir / "artifacts")

    @property
    def client(self) -> MlflowClient:
        return MlflowClient(tracking_uri=self.tracking_uri)


def execute(
    inst: StageInstance,
    cfg: PipelineConfig,
    inputs: dict[str, Manifest],
    mode: str,
    ctx: RunContext,
    compute: Callable[[Path, str], tuple[dict, dict]],
    log_files: tuple[str, ...] = (),
    folder: Path | None = None,
) -> Manifest:
    """Run (or reuse) one stage instance and return its manifest. `compute(out, run_id)`.

    `folder`: the artifact lives there instead of the store, and `compute` works in it in
    place (a resumable stage keeps what an earlier run finished). An artifact whose counts
    report failed shards is incomplete: never a cache hit, so a rerun retries them."""
    key = cache_key(inst, cfg, {n: m.digest for n, m in inputs.items()})
    if mode != FORCE and (key, inst.id) in ctx.resolved:
        return ctx.resolved[(key, inst.id)]
    manifest = _execute(inst, cfg, inputs, mode, ctx, compute, log_files, key, folder)
    ctx.resolved[(key, inst.id)] = manifest
    return manifest


@contextmanager
def _exclusive(store: ArtifactStore, inst: StageInstance, key: str, log) -> Iterator[None]:
    """One producer per (stage instance, cache key) at a time, across processes on this
    filesystem: a second flow run of the same recipe waits, then finds a cache hit, instead
    of computing the artifact again and replacing it under the first run's feet. The lock
    is released by the OS if its holder dies."""
    locks = store.root / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{inst.id.replace(':', '-')}-{key}.lock", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("%-14s waiting    %s (another run is producing it)", inst.id, key)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _execute(inst, cfg, inputs, mode, ctx, compute, log_files, key, folder) -> Manifest:
    with _exclusive(ctx.store, inst, key, _logger()):
        return _execute_locked(inst, cfg, inputs, mode, ctx, compute, log_files, key, folder)


def _execute_locked(inst, cfg, inputs, mode, ctx, compute, log_files, key, folder) -> Manifest:
    store, c, log = ctx.store, ctx.client, _logger()
    hit = store.lookup(inst.id, key) if folder is None else store.lookup_at(folder, key)
    if hit is not None and hit.counts.get("shards_failed"):
        hit = None
    if hit is None and mode == CACHED_ONLY:
        raise UpstreamNotCached(
            f"stage {inst.id} has no cached artifact for this config (cache key {key}); "
            "run the pipeline without --only first"
        )
    run = c.create_run(ctx.experiment_id, run_name=inst.id, tags={
        tracking.PARENT_TAG: ctx.parent_run_id, "platonic.stage": inst.stage, "platonic.stage_instance": inst.id,
        "platonic.stage_version": str(inst.spec().version), "platonic.cache_key": key,
        "platonic.upstream": json.dumps({n: m.cache_key for n, m in inputs.items()}),
        "platonic.upstream_runs": json.dumps({n: m.producer_run_id for n, m in inputs.items()}),
    })
    run_id = run.info.run_id
    try:
        tracking.log_params(c, run_id, tracking.flatten(inst.config_slice(cfg)))
        for n, m in inputs.items():
            tracking.log_input(c, run_id, n, m.digest, m.uri, m.schema, m.counts)
        if hit is not None and mode != FORCE:
            log.info("%-14s cache hit  %s (produced by run %s)", inst.id, key, hit.producer_run_id)
            tracking.set_tags(c, run_id, {"platonic.cache_hit": "true", "platonic.producer_run_id": hit.producer_run_id,
                                          "platonic.digest": hit.digest})
            tracking.log_metrics(c, run_id, hit.counts)
            tracking.log_text(c, run_id, hit.to_json(), "manifest.json")
            c.set_terminated(run_id, "FINISHED")
            return hit
        log.info("%-14s running    %s%s", inst.id, key, " (forced)" if hit is not None else "")
        t0 = time.perf_counter()
        tmp = store.staging(inst.id, key) if folder is None else store.in_place(folder)
        counts, stats = compute(tmp, run_id)
        stats = {**stats, "seconds": round(time.perf_counter() - t0, 3)}
        manifest = store.commit(tmp, Manifest(
            stage=inst.id, stage_version=inst.spec().version, cache_key=key, uri="", digest="", counts=counts,
            schema={}, config=inst.config_slice(cfg), upstream={n: m.cache_key for n, m in inputs.items()},
            upstream_digests={n: m.digest for n, m in inputs.items()},
            upstream_runs={n: m.producer_run_id for n, m in inputs.items()}, stats=stats, producer_run_id=run_id,
        ), dest=folder)
        tracking.set_tags(c, run_id, {"platonic.cache_hit": "false", "platonic.producer_run_id": run_id,
                                      "platonic.digest": manifest.digest})
        tracking.log_metrics(c, run_id, {**counts, **{k: v for k, v in stats.items() if isinstance(v, (int, float))}})
        tracking.log_text(c, run_id, manifest.to_json(), "manifest.json")
        for name in log_files:
            p = manifest.path / name
            if p.exists():
                c.log_artifact(run_id, str(p), "outputs")
        c.set_terminated(run_id, "FINISHED")
        log.info("%-14s done       %s in %.1fs %s", inst.id, manifest.digest[:12], stats["seconds"], counts)
        return manifest
    except BaseException:
        c.set_terminated(run_id, "FAILED")
        raise
