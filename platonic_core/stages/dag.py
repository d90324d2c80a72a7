"""The DAG's helpers, one place for every flow: which spec an instance runs (`spec_of`), what it
reads (`upstream`, `instance_inputs`), and the pipeline's run plan over `instances`
(`closure`, `plan` with its selectors, `uncached`, `require_cached`).

`upstream` and `instance_inputs` work on an instance of any flow (through the registry,
`FLOW_SPECS` and `spec_of` in registry.py). The run plan is the pipeline's: `--only`,
`--from` and `--force` select among its instances (`closure` is in pipeline.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..artifacts import ArtifactStore, Manifest, verify
from ..config import ConfigError, PipelineConfig
from ..contract import CorruptCache, StageInstance, UpstreamNotCached, cache_key, input_digests
from .pipeline import ORDER, closure, instances, is_real
from .registry import spec_of

# what the executor does with an instance: every flow's modes (the pipeline's from `plan`)
RUN, FORCE, CACHED_ONLY, SKIP = "run", "force", "cached-only", "skip"


def upstream(cfg: Any, inst: StageInstance) -> dict[str, str]:
    """role -> upstream instance id of one instance."""
    spec = spec_of(inst)
    return spec.inputs(cfg, inst) if spec.inputs is not None else {}


def instance_inputs(
    cfg: Any, inst: StageInstance, done: dict[str, Manifest]
) -> tuple[dict[str, Manifest], dict[str, str]]:
    """What one instance executes on: its inputs by name (the upstream manifests, taken from
    `done` by instance id, and its external inputs: a real corpus's shards) and the role ->
    input name map its compute uses."""
    spec = spec_of(inst)
    roles = upstream(cfg, inst)
    externals = spec.external(cfg, inst) if spec.external is not None else {}
    return {**{up: done[up] for up in roles.values()}, **externals}, {**roles, **{n: n for n in externals}}


# ---- the pipeline's run plan ------------------------------------------------------------


def _matches(selector: str, inst: StageInstance) -> bool:
    return selector in (inst.stage, inst.id)


def check_selector(selector: str, cfg: PipelineConfig) -> None:
    known = {i.stage for i in instances(cfg)} | {i.id for i in instances(cfg)}
    if selector not in known:
        raise ConfigError(
            f"unknown stage {selector!r}; stages: {', '.join(ORDER)} (or e.g. train:{cfg.evaluate.text_models[0]})"
        )


def plan(
    cfg: PipelineConfig, only: str | None = None, from_: str | None = None, force: list[str] | None = None
) -> dict[str, str]:
    """Stage instance id -> mode.

    - default: every stage runs, cache hits skip the body
    - `only S`: S executes (forced); upstream must be cached; downstream is skipped
    - `from S`: S and everything downstream of it execute (forced); the rest as default
    - `force S`: S executes even on a cache hit; downstream re-executes if S's output changed
    """
    force = force or []
    for s in [only, from_, *force]:
        if s:
            check_selector(s, cfg)
    if only and from_:
        raise ConfigError("--only and --from cannot be combined")
    insts = instances(cfg)
    modes = {i.id: RUN for i in insts}
    if only:
        # the selected instances execute; their transitive inputs must come from the cache;
        # nothing else is touched
        needed = {i.id for i in closure(cfg, [i.id for i in insts if _matches(only, i)])}
        for i in insts:
            modes[i.id] = FORCE if _matches(only, i) else (CACHED_ONLY if i.id in needed else SKIP)
    if from_:
        # the selected instances and everything that (transitively) reads their output
        dirty = {i.id for i in insts if _matches(from_, i)}
        for i in insts:  # execution order is a topological order
            if i.id in dirty or any(u in dirty for u in upstream(cfg, i).values()):
                dirty.add(i.id)
                modes[i.id] = FORCE
    for s in force:
        for i in insts:
            if _matches(s, i) and modes[i.id] != SKIP:
                modes[i.id] = FORCE
    unfed = [
        i
        for i, m in modes.items()
        if m != SKIP and i not in ("world", "ingest") and not (i == "positives" and cfg.positives.backend != "world")
    ]
    # the world and the concept set (real data: WordNet) carry their own eval set and image side
    if cfg.ingest.source != "world" and not is_real(cfg) and unfed:
        raise ConfigError(
            f"the stages after ingest ({', '.join(unfed[:3])}, ...) need a positives backend and images for a "
            f"real corpus ({cfg.ingest.source}), which the 'world' backend cannot provide: run `--only ingest` or "
            "`platonic ingest` for real corpora (with a model backend, `--only positives` generates their positives)"
        )
    return modes


def uncached(cfg: PipelineConfig, modes: dict[str, str], store: ArtifactStore) -> list[str]:
    """The instances a plan takes from the cache that `store` does not hold (`cached_inputs`)."""
    return cached_inputs(cfg, modes, store)[0]


def cached_inputs(
    cfg: PipelineConfig, modes: dict[str, str], store: ArtifactStore
) -> tuple[list[str], list[tuple[str, Manifest, str]]]:
    """The instances a plan takes from the cache (CACHED_ONLY: `--only`'s upstream) that
    `store` does not hold for this recipe, in execution order: what the executor would stop
    on, found before anything starts. Each key is computed as the executor computes it, on
    its inputs' cached manifests; an instance reading a missing one is missing too, one
    reading an instance this run executes (`--force` of an upstream) is left to the executor
    (its key depends on that output). Second: (instance, manifest, what changed) of the hits
    whose files fail verification (`artifacts.verify`, the fast path a cache hit takes), which
    the executor would stop on too, after Prefect had started and logged its traceback."""
    found: dict[str, Manifest] = {}
    missing: list[str] = []
    corrupt: list[tuple[str, Manifest, str]] = []
    for inst in instances(cfg):
        if modes.get(inst.id) != CACHED_ONLY:
            continue
        ups = upstream(cfg, inst).values()
        if any(up in missing for up in ups):
            missing.append(inst.id)
            continue
        if any(up not in found for up in ups):
            continue
        spec = spec_of(inst)
        inputs, roles = instance_inputs(cfg, inst, found)
        hit = store.lookup(inst.id, cache_key(spec, inst, cfg, input_digests(spec, inst, cfg, inputs, roles)))
        if hit is None or hit.incomplete:
            missing.append(inst.id)
            continue
        if problem := verify(hit):
            corrupt.append((inst.id, hit, problem))
        found[inst.id] = hit  # what reads it is keyed on its recorded digest: found too
    return missing, corrupt


def require_cached(
    cfg: PipelineConfig, modes: dict[str, str], rebuild: str, command: str = "platonic run RECIPE"
) -> None:
    """Raise UpstreamNotCached, naming them, if stages the plan takes from the cache (`--only
    S`'s upstream) are not there, or CorruptCache, naming the first artifact whose files fail
    verification and the run that rebuilds it: before a parent run opens (and, from the CLI,
    before Prefect or MLflow is imported). `rebuild`: what to do about missing stages, the
    message's end; `command`: the user's command without --only."""
    missing, corrupt = cached_inputs(cfg, modes, ArtifactStore.of(cfg.out_dir))
    if missing:
        selected = ", ".join(i for i, m in modes.items() if m == FORCE)
        where = Path(cfg.out_dir).resolve()  # from another folder, which store was looked in says why
        raise UpstreamNotCached(
            f"{selected} reads stages that are not cached for this recipe in the store {where} "
            f"({', '.join(missing)}); {rebuild}"
        )
    if corrupt:
        inst, hit, problem = corrupt[0]
        more = f" ({len(corrupt) - 1} more cached artifacts fail too: {', '.join(i for i, _, _ in corrupt[1:])})"
        # a plain run would rebuild it; --only takes it from the cache, so say which run does
        raise CorruptCache(
            f"stage {inst}: the cached artifact {hit.path} is corrupt ({problem}); rebuild it: "
            f"{command} {' '.join(f'--force {i}' for i, _, _ in corrupt)}, then rerun with --only"
            + (more if len(corrupt) > 1 else "")
        )
