"""The stage contract, applied once, to any stage of any flow.

`execute` runs (or reuses) one stage instance: it computes the cache key (instance, version,
the config fields the stage reads, its inputs' digests), takes the key's file lock, and
- on a cache hit: runs no stage body and logs no run: the flow's parent run gets a tag
  naming the producing run (`platonic.reused.<instance>`), which holds the params, inputs,
  metrics and manifest;
- otherwise: runs the spec's `compute` in a staging folder with only its declared config
  slice, commits the artifact atomically (its manifest written inside before the rename), and logs params, inputs
  (digests), counts, stats and files to MLflow.

`run_instances` walks a recipe's instances in order, resolving each one's inputs from the
spec (`platonic.core.stages`), and runs each as a Prefect task run when inside a flow, drawn
in the Prefect UI with edges from its upstream instances' task runs; with `train.parallel`
> 1, trainings run side by side, each in a process of its own, beside the other stages.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from mlflow.tracking import MlflowClient
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.states import Completed, State
from prefect.utilities.annotations import quote

from platonic.core import interrupt
from platonic.core.artifacts import ArtifactStore, Manifest, verify
from platonic.core.config import PipelineConfig
from platonic.core.contract import (
    CorruptCache,
    IncompleteArtifact,
    StageCall,
    StageHooks,
    StageInstance,
    StageSpec,
    UpstreamNotCached,
    cache_key,
    config_slice,
    config_view,
    input_digests,
)
from platonic.core.durable import disk_full
from platonic.core.forkserver import forking_available, trainer_server
from platonic.core.stages.dag import CACHED_ONLY, FORCE, SKIP, instance_inputs, upstream
from platonic.core.stages.registry import spec_of

from . import tracking
from .fanout import mapper_for
from .lineage import describe_evaluated_model


def stage_logger() -> logging.Logger | logging.LoggerAdapter:
    """Prefect's run logger inside a flow (console + UI), a plain logger outside."""
    try:
        from prefect.logging import get_run_logger

        return get_run_logger()
    except Exception:
        return logging.getLogger("platonic")


@dataclass
class RunContext:
    """What every stage execution needs to know about the flow run it belongs to."""

    out_dir: Path
    experiment_id: str
    parent_run_id: str
    tracking_uri: str
    # instances already resolved in this flow run, by cache key: a grid whose cells share a
    # stage (the ablation's world, views, image model) logs it once, not once per cell
    resolved: dict[tuple[str, str], Manifest] = field(default_factory=dict)
    cache_hits: set[tuple[str, str]] = field(default_factory=set)  # which of them came from the cache
    # tags every run of the flow run carries (its Source column in MLflow: tracking.source_tags)
    run_tags: dict[str, str] = field(default_factory=dict)

    @property
    def store(self) -> ArtifactStore:
        return ArtifactStore.of(self.out_dir)

    @property
    def client(self) -> MlflowClient:
        return MlflowClient(tracking_uri=self.tracking_uri)


def recipe_mapper(cfg: Any):
    """The fan-out of a pipeline recipe (`fanout` section); other flows' recipes have none."""
    return mapper_for(cfg.fanout) if isinstance(cfg, PipelineConfig) else None


def state_dir(spec: StageSpec, inst: StageInstance, ctx: RunContext, key: str) -> Path | None:
    """Resumable work of one cache key: training checkpoints under OUT_DIR/checkpoints/,
    generated positives beside the store."""
    if spec.state == "until_commit":
        return (ctx.out_dir / "checkpoints" / inst.id.replace(":", "-") / key).resolve()
    if spec.state == "kept":
        return ctx.store.root / f"{inst.stage}-work" / key
    return None


def execute(
    inst: StageInstance,
    cfg: Any,
    inputs: dict[str, Manifest],
    mode: str,
    ctx: RunContext,
    roles: dict[str, str] | None = None,
    context: dict[str, Any] | None = None,
    folder: Path | None = None,
) -> Manifest:
    """Run (or reuse) one stage instance and return its manifest.

    `inputs` are named as the cache key and MLflow see them (upstream instance ids, or an
    external input's name); `roles` maps the names the compute uses to those (default: the
    same). `context`: objects the flow hands to compute (not config: the ablation's cells).
    `folder`: the artifact lives there instead of the store, and compute works in it in
    place (a resumable stage keeps what an earlier run finished). An artifact whose counts
    report failed shards is incomplete: never a cache hit, so a rerun retries them."""
    spec = spec_of(inst)
    roles = roles or {n: n for n in inputs}
    key = cache_key(spec, inst, cfg, input_digests(spec, inst, cfg, inputs, roles))
    if mode != FORCE and (key, inst.id) in ctx.resolved:
        ctx.cache_hits.add((key, inst.id))
        return ctx.resolved[(key, inst.id)]
    try:
        with _exclusive(ctx.store, inst, key):
            manifest, cached = _execute_locked(spec, inst, cfg, inputs, roles, context or {}, mode, ctx, key, folder)
    except Exception as e:  # a full disk, wherever it struck (stage files, manifest, MLflow): one line naming it
        where = folder or ctx.store.folder(inst.id, key)
        if (full := disk_full(e, where=where, database=ctx.tracking_uri)) is not None and full is not e:
            raise full from e
        raise
    ctx.resolved[(key, inst.id)] = manifest
    if cached:
        ctx.cache_hits.add((key, inst.id))
    else:  # executed now (a forced rerun of what was a hit earlier in this flow run included)
        ctx.cache_hits.discard((key, inst.id))
    state = state_dir(spec, inst, ctx, key)
    if spec.state == "until_commit":
        _remove_state(state)
    return manifest


def _remove_state(state: Path) -> None:
    """Committed: the resumable state and the folders it leaves empty go."""
    shutil.rmtree(state, ignore_errors=True)
    for d in (state.parent, state.parent.parent):
        try:
            d.rmdir()
        except OSError:
            break


@contextmanager
def _exclusive(store: ArtifactStore, inst: StageInstance, key: str) -> Iterator[None]:
    """One producer per (stage instance, cache key) at a time, across processes on this
    filesystem: a second flow run of the same recipe waits, then finds a cache hit, instead
    of computing the artifact again and replacing it under the first run's feet. The lock
    is released by the OS if its holder dies."""
    locks = store.root / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    lock = FileLock(locks / f"{inst.id.replace(':', '-')}-{key}.lock")
    try:
        lock.acquire(blocking=False)
    except Timeout:
        stage_logger().info("%-14s waiting    %s (another run is producing it)", inst.id, key)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _execute_locked(
    spec: StageSpec,
    inst: StageInstance,
    cfg: Any,
    inputs: dict[str, Manifest],
    roles: dict[str, str],
    context: dict[str, Any],
    mode: str,
    ctx: RunContext,
    key: str,
    folder: Path | None,
) -> tuple[Manifest, bool]:
    store, c, log = ctx.store, ctx.client, stage_logger()

    def unreadable(line: str) -> None:  # a manifest that cannot be read: a miss, said once
        log.warning("%-14s %s", inst.id, line)

    hit = store.lookup(inst.id, key, unreadable) if folder is None else store.lookup_at(folder, key, unreadable)
    if hit is not None and hit.incomplete:
        hit = None
    if hit is not None and mode != FORCE and (problem := verify(hit)):
        # a corrupt cache must not feed a run: rebuild (the new commit replaces the folder)
        if mode == CACHED_ONLY:
            raise CorruptCache(  # found here only if it changed after the check before the run (dag.require_cached)
                f"stage {inst.id}: the cached artifact {hit.uri} is corrupt ({problem}); rebuild it: "
                f"platonic run RECIPE --force {inst.id}, then rerun with --only"
            )
        log.warning("%-14s cache hit  %s failed verification: %s; rebuilding it", inst.id, key, problem)
        hit = None
    if hit is None and mode == CACHED_ONLY:
        raise UpstreamNotCached(
            f"stage {inst.id} has no cached artifact for this config (cache key {key}); "
            "run the pipeline without --only first"
        )
    # a folder of the user's choosing is claimed before any run starts: one holding files
    # the stage did not write is refused with nothing in it touched
    work = store.in_place(folder, inst.id) if folder is not None and (hit is None or mode == FORCE) else None
    upstream_keys = {n: m.cache_key for n, m in inputs.items()}
    upstream_runs = {n: m.producer_run_id for n, m in inputs.items()}
    links = ", ".join(f"{n} {tracking.run_link(ctx.experiment_id, r)}" for n, r in upstream_runs.items() if r)
    tags = {
        **ctx.run_tags,
        tracking.PARENT_TAG: ctx.parent_run_id,
        tracking.STAGE_TAG: inst.stage,
        tracking.INSTANCE_TAG: inst.id,
        tracking.STAGE_VERSION_TAG: str(spec.version),
        tracking.CACHE_KEY_TAG: key,
        tracking.UPSTREAM_TAG: json.dumps(upstream_keys),
        tracking.UPSTREAM_RUNS_TAG: json.dumps(upstream_runs),
        tracking.NOTE_TAG: f"Inputs: {links or 'none'}",  # the run's description: links the UI follows
        **tracking.owner_tags(),  # whose process it is: a run it leaves RUNNING when killed is swept
        **({tracking.MODEL_TAG: inst.model} if inst.model else {}),  # tags.model = 'good': one model's runs
    }
    if hit is not None and mode != FORCE:
        # a hit logs no run of its own (an empty child per reused stage buried the runs that
        # did work): the parent names the producer run, which holds the params, inputs,
        # metrics and manifest (lineage reads them there)
        log.info("%-14s cache hit  %s (produced by run %s)", inst.id, key, hit.producer_run_id)
        tracking.set_tags(c, ctx.parent_run_id, {tracking.reused_tag(inst.id): hit.producer_run_id})
        return hit, True
    run_id = c.create_run(ctx.experiment_id, run_name=inst.id, tags=tags).info.run_id
    try:
        the_slice = config_slice(spec, inst, cfg)
        mcfg = spec.model(cfg, inst) if spec.model is not None else None
        tracking.log_params(
            c, run_id, {**run_params(spec, inst, the_slice), **(tracking.model_params(mcfg) if mcfg else {})}
        )
        for n, m in inputs.items():
            tracking.log_input(c, run_id, n, m.digest, m.uri, m.schema, m.counts)
        log.info("%-14s running    %s%s", inst.id, key, " (forced)" if hit is not None else "")
        t0 = time.perf_counter()
        tmp = store.staging(inst.id, key) if work is None else work
        hooks = StageHooks(
            log_metrics=lambda metrics, step: tracking.log_metrics(c, run_id, metrics, step=step),
            set_tags=lambda tags: tracking.set_tags(c, run_id, tags),
            logger=log,
            mapper=recipe_mapper(cfg),
        )
        call = StageCall(
            inst,
            config_view(spec, inst, cfg),
            {r: inputs[n] for r, n in roles.items()},
            tmp,
            hooks,
            state_dir=state_dir(spec, inst, ctx, key),
            cache_root=store.root,
            context=context,
        )
        counts, stats = spec.compute(call)
        stats = {**stats, "seconds": round(time.perf_counter() - t0, 3)}
        manifest = store.commit(
            tmp,
            Manifest(
                stage=inst.id,
                stage_version=spec.version,
                cache_key=key,
                uri="",
                digest="",
                counts=counts,
                schema={},
                config=the_slice,
                upstream=upstream_keys,
                upstream_digests={n: m.digest for n, m in inputs.items()},
                upstream_runs=upstream_runs,
                stats=stats,
                producer_run_id=run_id,
            ),
            dest=folder,
        )
        tracking.set_tags(
            c,
            run_id,
            {
                tracking.CACHE_HIT_TAG: "false",
                tracking.PRODUCER_TAG: run_id,
                tracking.DIGEST_TAG: tracking.mlflow_digest(manifest.digest),
            },
        )
        tracking.log_text(c, run_id, manifest.to_json(), "manifest.json")
        for name in spec.log_files:  # a name, or a glob (example_*.png)
            for p in sorted(manifest.path.glob(name)):
                if p.is_file():
                    c.log_artifact(run_id, str(p), "outputs")
        model_id, data = None, None
        if mcfg is not None:  # the model first: the run's counts are then linked to it and to its training data
            name = f"{getattr(cfg, 'name', 'platonic')}-{inst.model}"  # registered: demo-good, one version per run
            try:
                model_id = tracking.log_trained_model(
                    c, run_id, ctx.experiment_id, manifest.path, mcfg, name, inst.model
                )
            except Exception as e:  # the artifact is committed and sound: a tracking failure must not fail it
                log.warning("%-14s not logged as an MLflow model: %s: %s", inst.id, type(e).__name__, e)
            if model_id and (n := roles.get("data")) in inputs:
                data = (n, tracking.mlflow_digest(inputs[n].digest))
        numeric = {k: v for k, v in stats.items() if isinstance(v, (int, float))}
        tracking.log_metrics(c, run_id, counts, model_id=model_id, dataset=data)
        tracking.log_metrics(c, run_id, numeric)
        if spec.per_model is not None:
            log_evaluations(spec, manifest, inputs, the_slice, ctx, run_id)
        c.set_terminated(run_id, "FINISHED")
        shown = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in counts.items())
        log.info("%-14s done       %s in %.1fs: %s", inst.id, manifest.digest[:12], stats["seconds"], shown)
        return manifest, False
    except BaseException as e:
        with contextlib.suppress(Exception):  # on a full disk this write fails too: the cause is what to say
            c.set_terminated(run_id, tracking.end_status(e))
        raise


def run_params(spec: StageSpec, inst: StageInstance, the_slice: dict[str, Any]) -> dict[str, str]:
    """A stage's config slice as MLflow params, a per-model read (`train.models.{model}`)
    under `model.*`: `model.steps` on every model's train run, not `train.models.good.steps`
    on one and `train.models.bad.steps` on another (the cache key and manifest keep the
    recipe's paths)."""
    renamed = {}
    for template in spec.reads:
        path = inst.fill(template)
        if "{model}" in template and path in the_slice:
            renamed[path] = "model" + template.split("{model}", 1)[1]
    return tracking.flatten({renamed.get(k, k): v for k, v in the_slice.items()})


def log_evaluations(
    spec: StageSpec,
    manifest: Manifest,
    inputs: dict[str, Manifest],
    the_slice: dict[str, Any],
    ctx: RunContext,
    run_id: str,
) -> None:
    """A stage that scores several models (spec.per_model): one evaluation run per model
    under its run, linked to the model's train run and logged model (tracking.log_model_evaluations)."""
    scores = spec.per_model(manifest.path)
    train_runs, datasets = {}, {}
    for m in scores:
        train_runs[m] = _producer_of(f"train:{m}", inputs)
        for n, up in inputs.items():  # the model's features the evaluation read (`embed:good`)
            if n == f"embed:{m}" or (n == m and up.stage.startswith("embed:")):
                datasets[m] = (up.stage, up)
    try:
        tracking.log_model_evaluations(
            ctx.client,
            ctx.experiment_id,
            run_id,
            tracking.flatten(the_slice),
            scores,
            train_runs,
            datasets,
            run_tags=ctx.run_tags,
        )
    except Exception as e:  # the artifact is committed and sound: a tracking failure must not fail it
        stage_logger().warning("%-14s per-model evaluation runs not logged: %s: %s", spec.name, type(e).__name__, e)
        return
    for m, train_run in train_runs.items():  # each logged model's card and pyfunc name this evaluation's layer
        try:
            if train_run:
                describe_evaluated_model(ctx.client, train_run)
        except Exception as e:
            stage_logger().warning("%-14s %s's logged model not described: %s: %s", spec.name, m, type(e).__name__, e)


def _producer_of(instance: str, inputs: dict[str, Manifest]) -> str | None:
    """The run that produced `instance` (`train:good`): an input itself, or an input's upstream."""
    for n, m in inputs.items():
        if n == instance or m.stage == instance:
            return m.producer_run_id
    for m in inputs.values():
        if m.upstream_runs.get(instance):
            return m.upstream_runs[instance]
    return None


def _stage_task_body(inst: StageInstance, cfg: Any, inputs: dict, mode: str, ctx: RunContext, **kw: Any):
    """A stage as a Prefect task: a cache hit ends in a Completed state named Cached, so the
    Prefect UI shows what was reused."""
    manifest = execute(inst, cfg, inputs, mode, ctx, **kw)
    if (manifest.cache_key, inst.id) in ctx.cache_hits:
        return Completed(data=manifest, name="Cached", message="platonic cache hit")
    return manifest


# one Prefect task for every stage; each call is named after its instance (`train:good`).
# Prefect's own cache is off: the cache key is the project's (contract.cache_key)
stage_task = task(_stage_task_body, name="stage", cache_policy=NO_CACHE)


def _task_of(inst: StageInstance):
    """The Prefect task of one instance. Stages that resume where they stopped (training
    checkpoints, generated positives) retry once."""
    retries = 1 if spec_of(inst).state != "none" else 0
    return stage_task.with_options(name=inst.stage, task_run_name=inst.id, retries=retries, retry_delay_seconds=2)


def _run(
    inst: StageInstance,
    cfg: Any,
    inputs: dict[str, Manifest],
    mode: str,
    ctx: RunContext,
    wait_for: Sequence[State] = (),
    **kw: Any,
) -> tuple[Manifest, State | None]:
    """One instance and its task run's final state: a Prefect task run inside a flow, a
    plain call outside one (a command that opens its own MLflow run without a Prefect
    server: `platonic ingest`, `platonic audit`; no state then).

    The task run's edges in the Prefect UI are exactly `wait_for` (the upstream instances'
    task runs, as `platonic stages` lists them): every argument goes in `quote`d, so Prefect
    neither walks the recipe, the manifests and the run context looking for results of other
    task runs (it matched objects by id: every stage seemed to read every earlier one) nor
    spends the time doing it."""
    if FlowRunContext.get() is None:
        return execute(inst, cfg, inputs, mode, ctx, **kw), None
    args = (quote(a) for a in (inst, cfg, inputs, mode, ctx))
    state = _task_of(inst)(*args, wait_for=list(wait_for), return_state=True, **{k: quote(v) for k, v in kw.items()})
    m = state.result()
    while isinstance(m, State):  # a Cached state: the task's return value as it came back
        m = m.result()
    return m, state


def run_instance(
    inst: StageInstance,
    cfg: Any,
    inputs: dict[str, Manifest],
    mode: str,
    ctx: RunContext,
    **kw: Any,
) -> Manifest:
    """One instance, as a task run when inside a flow (a flow's single stage: `run_instances`
    draws the edges between several)."""
    return _complete(_run(inst, cfg, inputs, mode, ctx, **kw)[0])


def _complete(m: Manifest) -> Manifest:
    """`m`, unless its counts report failed shards (IncompleteArtifact: the run fails, a
    rerun retries them)."""
    if m.incomplete:
        raise IncompleteArtifact(m)
    return m


def run_instances(
    cfg: Any,
    insts: list[StageInstance],
    modes: dict[str, str],
    ctx: RunContext,
    given: dict[str, Manifest] | None = None,
) -> dict[str, Manifest]:
    """Every instance not skipped, in order (a topological order), each on its upstream
    manifests. Instances of a `fan_out` stage go to the recipe's fan-out engine together
    (one Dask task run each) when it has one. With `train.parallel` > 1, trainings run side by
    side instead (`_side_by_side`). `given`: manifests of instances another flow's recipe
    already resolved (the base pipeline of `platonic match` or `platonic caption`), by
    instance id."""
    done: dict[str, Manifest] = dict(given or {})
    states: dict[str, State] = {}  # instance id -> its task run's final state: the graph's edges
    mapper = recipe_mapper(cfg)

    def call_args(inst: StageInstance) -> tuple:
        inputs, roles = instance_inputs(cfg, inst, done)
        return (inst, cfg, inputs, modes[inst.id], ctx, roles)

    def start(inst: StageInstance) -> Callable[[], tuple[Manifest, State | None]]:
        """The instance's run, its inputs taken now (from this thread's `done`)."""
        *args, roles = call_args(inst)
        wait_for = [states[u] for u in dict.fromkeys(upstream(cfg, inst).values()) if u in states]
        return lambda: _run(*args, wait_for, roles=roles)

    def finish(inst: StageInstance, m: Manifest, state: State | None) -> None:
        if state is not None:  # its result quoted: Prefect walks a state's data too, matching by id
            states[inst.id] = state.model_copy(update={"data": quote(state.data)})
        done[inst.id] = _complete(m)

    todo = [i for i in insts if modes[i.id] != SKIP]
    parallel = cfg.train.parallel if isinstance(cfg, PipelineConfig) else 1
    if parallel > 1:
        _side_by_side(cfg, todo, parallel, start, finish, done)
        return done
    while todo:
        inst = todo.pop(0)
        interrupt.check(inst.id)  # Ctrl-C while the last stage finished: the next one does not start
        spec = spec_of(inst)
        batch = [inst]
        if spec.fan_out and mapper is not None:
            batch += [i for i in todo if i.stage == inst.stage]
            todo = [i for i in todo if i.stage != inst.stage]
        if len(batch) > 1:
            results = mapper(execute, [call_args(i) for i in batch])
            for i, m in zip(batch, results, strict=True):
                done[i.id] = m
        else:
            finish(inst, *start(inst)())
    return done


def _side_by_side(
    cfg: PipelineConfig,
    todo: list[StageInstance],
    parallel: int,
    start: Callable[[StageInstance], Callable[[], tuple[Manifest, State | None]]],
    finish: Callable[[StageInstance, Manifest, State | None], None],
    done: dict[str, Manifest],
) -> None:
    """The instances, each as soon as its inputs are done: up to `parallel` trainings at once
    (each in a process of its own: the train stage sees `train.parallel`, this thread only
    waits on them), the most samples first; the other stages one at a time in this thread,
    meanwhile. A failure or a stop request starts nothing new: the trainings running finish
    (or stop at their next step, their state saved), then the first error is raised. `done`:
    the manifests `finish` records, by instance id."""
    ids = {i.id for i in todo}

    def ready(inst: StageInstance) -> bool:
        return all(u in done or u not in ids for u in upstream(cfg, inst).values())

    def samples(inst: StageInstance) -> int:
        m = cfg.train.models[inst.model]
        return m.total_steps * m.batch_size

    waiting, running = list(todo), {}
    error: BaseException | None = None
    if forking_available() and any(i.stage == "train" and cfg.train.models[i.model].nproc == 1 for i in todo):
        trainer_server()  # its imports run now, beside the first stages, not before the first step
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="train") as pool:

        def collect(block: bool) -> None:
            nonlocal error
            if not running:
                return
            over, _ = wait(running, timeout=None if block else 0, return_when=FIRST_COMPLETED)
            for f in over:
                inst = running.pop(f)
                try:
                    finish(inst, *f.result())
                except BaseException as e:  # noqa: BLE001 - raised below, after the others end
                    error = error or e
                    if running:
                        stage_logger().warning(
                            "%-14s failed; waiting for %s", inst.id, ", ".join(i.id for i in running.values())
                        )

        while (waiting and error is None) or running:
            if error is None and waiting and interrupt.stop_requested():
                error = interrupt.Interrupted(f"stopped before {waiting[0].id}")
            if error is None:
                trainings = sorted((i for i in waiting if i.stage == "train" and ready(i)), key=samples, reverse=True)
                for inst in trainings[: parallel - len(running)]:
                    waiting.remove(inst)
                    running[pool.submit(contextvars.copy_context().run, start(inst))] = inst
                here = next((i for i in waiting if i.stage != "train" and ready(i)), None)
                if here is not None:
                    waiting.remove(here)
                    try:
                        finish(here, *start(here)())
                    except BaseException as e:  # noqa: BLE001 - raised once the trainings end
                        error = e
                    collect(block=False)
                    continue
                if not running:
                    raise RuntimeError(f"no stage can start: {[i.id for i in waiting]} wait on inputs never run")
            collect(block=True)
    if error is not None:
        raise error
