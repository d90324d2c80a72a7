"""The DAG as data: every stage of every flow, once — what it reads, takes, writes and computes.

    world -> ingest -> positives -> dedup -> views -> train:{text models}
    world -> train:{image model};  train:* -> embed:* -> evaluate
    world + train:{image model} + embed:{image model} -> ceiling -> evaluate
    train:{model with snapshots} + ingest + embed:{image model} -> curve:{model}

A stage *instance* is a stage applied to one thing: `train:good`, `embed:ntp`. `instances`
lists a recipe's instances in execution order (a topological order); each spec's `inputs`
names the upstream instances it reads, by role. The executor (`platonic.tasks.executor`)
walks them; nothing else knows the DAG's shape. The compute functions below adapt a library
function to `compute(call) -> (counts, stats)` and see only their declared config slice
(see contract.py). Bump `version` when a stage's semantics change: the cache cannot see code.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .artifacts import ArtifactStore, Manifest
from .config import AuditConfig, ConfigError, IngestConfig, PipelineConfig
from .contract import StageCall, StageInstance, StageSpec, cache_key, input_digests

ORDER = ["world", "ingest", "positives", "dedup", "views", "train", "embed", "ceiling", "evaluate", "curve"]


# ---- pipeline stages: compute ----------------------------------------------------------


def world(call: StageCall):
    from .progress import bar
    from .world import generate_world

    return generate_world(call.cfg.world, call.out, progress=bar), {}


def ingest(call: StageCall):
    from .data.corpus import ingest_corpus
    from .data.ingest import ingest_stats, ingest_world
    from .data.readers import Shard

    ic = call.cfg.ingest
    if ic.source == "world":
        w = call.inputs["world"]
        counts = ingest_world(w.path, ic, call.out, source=f"world:{w.digest[:16]}")
        return counts, {"corpus_stats": ingest_stats(call.out)}
    # the shards as resolved (and hashed) once, for the source manifest: see corpus_source
    shards = [Shard(sid, v["uri"], v["digest"]) for sid, v in call.inputs["source"].schema.items()]
    log = call.hooks.logger

    def progress(r) -> None:
        c = r.counts
        if r.status == "failed":
            log.error("ingest shard %s FAILED: %s", r.shard.id, r.error)
        else:
            log.info(
                "ingest shard %-28s %-8s in %d kept %d quarantined %d (%.1fs)",
                r.shard.id,
                r.status,
                c.get("in", 0),
                c.get("kept", 0),
                c.get("quarantined", 0),
                r.seconds,
            )

    counts, results = ingest_corpus(
        shards, ic, call.out, call.cache_root / "ingest-shards", progress, mapper=call.hooks.mapper
    )
    failed = [{"shard": r.shard.id, "uri": r.shard.uri, "error": r.error} for r in results if r.status == "failed"]
    return counts, {"failed_shards": failed}


def corpus_source(ic: IngestConfig) -> dict[str, Manifest]:
    """A real corpus as the ingest stage's input: its digest covers every shard's id and
    content digest, so it is what the ingest cache key (and MLflow's `datasets.digest`) sees."""
    import hashlib

    from .data.readers import resolve_sources

    if ic.source == "world":
        return {}
    shards = resolve_sources(ic.paths, ic.source, ic.revision, ic.allow_patterns or None)
    h = hashlib.sha256()
    for s in shards:
        h.update(f"{s.id}\0{s.digest}\n".encode())
    return {
        "source": Manifest.external(
            f"source:{ic.source}",
            " ".join(ic.paths),
            h.hexdigest(),
            {"shards": len(shards)},
            {s.id: {"uri": s.uri, "digest": s.digest} for s in shards},
        )
    }


def positives(call: StageCall):
    from .positives import WorldGenerator, generate_corpus, generate_positives, make_backend
    from .positives.images import image_source, input_shards

    pc, ingest_dir = call.cfg.positives, call.input("ingest")
    # what generated the texts (the params hold every positives field, prompts included, which
    # the world backend does not read): the backend and, for a model backend, its models
    generator = {"platonic.generator": pc.backend}
    if pc.backend != "world":
        generator |= {f"platonic.{t}_model": getattr(pc.models, t).id for t in ("recaption", "paraphrase")}
    call.hooks.set_tags(generator)
    if pc.backend == "world":
        gen = WorldGenerator(call.input("world"), call.cfg.world, seed=pc.seed)
        return generate_positives(ingest_dir / "corpus.parquet", gen, pc, call.out), {}
    # a model backend: finished batches live in the state folder, keyed by the cache key,
    # so a killed run (or a forced rerun) resumes instead of regenerating
    mapper, log = call.hooks.mapper, call.hooks.logger
    backend = make_backend(pc) if mapper is None else None  # fanned out: each worker builds its own

    def progress(r):
        log.info(
            "positives shard %-20s %-9s %s (resumed %d rows; %.1fs)",
            r.shard,
            r.status,
            r.counts,
            r.resumed_from,
            r.seconds,
        )

    last = [time.monotonic()]

    def on_batch(shard, answered, to_ask):  # a long shard says how far it got, every 30 s
        if time.monotonic() - last[0] > 30:
            last[0] = time.monotonic()
            log.info("positives shard %s: %d / %d requests answered", shard, answered, to_ask)

    world_dir = call.input("world") if "world" in call.inputs else None
    counts, stats = generate_corpus(
        input_shards(ingest_dir),
        pc,
        backend,
        call.state_dir,
        call.out,
        lambda shard: image_source(ingest_dir, world_dir, shard),
        progress,
        on_batch,
        mapper=mapper,
    )
    if getattr(backend, "info", None):
        stats["runner"] = backend.info
    log.info(
        "positives: %d texts generated this run, %.2f texts/s, %.1f tokens/s",
        stats["generated_this_run"],
        stats["texts_per_s"],
        stats["tokens_per_s"],
    )
    return counts, stats


def dedup(call: StageCall):
    from .dedup import dedup as run_dedup

    stats: dict = {}
    counts = run_dedup(
        call.input("positives") / "texts.parquet",
        call.input("ingest") / "eval.parquet",
        call.cfg.dedup,
        call.out,
        eval_name="world",
        stats=stats,
        mapper=call.hooks.mapper,
    )
    return counts, stats


def views(call: StageCall):
    from .views import build_views

    return build_views(call.input("dedup") / "texts.parquet", call.cfg.views, call.out), {}


def train(call: StageCall):
    from .cpus import AUTO, resolve_threads, set_torch_threads
    from .train import run_train, train_under_torchrun

    model = call.inst.model
    mcfg = call.cfg.train.models[model]
    threads = set_torch_threads(call.cfg.train.threads)
    if mcfg.nproc > 1 and call.cfg.train.threads == AUTO:  # the usable CPUs shared by the ranks
        threads = max(1, resolve_threads(AUTO) // mcfg.nproc)

    def on_log(step, metrics):
        call.hooks.log_metrics({f"train/{k}": v for k, v in metrics.items()}, step)

    if mcfg.nproc > 1:
        summary = train_under_torchrun(
            call.cfg.seed, threads, model, mcfg, call.input("data"), call.out, call.state_dir, on_log
        )
    else:
        summary = run_train(
            mcfg,
            call.cfg.seed,
            call.input("data"),
            call.out,
            on_log=on_log,
            desc=call.inst.id,
            state_dir=call.state_dir,
        )
    counts = {"steps": summary["steps"], "samples": summary["samples"], "parameters": summary["parameters"]}
    return counts, {k: v for k, v in summary.items() if k not in counts}


def embed(call: StageCall):
    from .features import run_embed

    e = call.cfg.embed
    counts = run_embed(
        call.cfg.train.models[call.inst.model],
        call.input("model"),
        call.input("eval"),
        call.out,
        e.batch_size,
        e.text_output,
        e.layer,
    )
    # which embedding the evaluation compares (also in the params: the `embed` section)
    call.hooks.set_tags({"platonic.text_output": e.text_output, "platonic.embed_layer": str(e.layer)})
    return counts, {}


def ceiling(call: StageCall):
    from .ceiling import run_ceiling

    ev = call.cfg.evaluate
    metrics = run_ceiling(
        call.input("world"),
        call.input("image"),
        call.input("image_embed"),
        call.cfg.train.models[ev.image_model],
        ev,
        call.cfg.world,
        call.out,
        call.cfg.embed.batch_size,
    )
    return {"oracles": len(metrics)}, metrics


def evaluate(call: StageCall):
    from .evaluate import run_evaluate

    ev, models = call.cfg.evaluate, call.cfg.train.models
    labels = {m: f"{models[m].kind}, {models[m].views} views" for m in ev.text_models}
    ceiling_dir = call.inputs["ceiling"].path if "ceiling" in call.inputs else None
    metrics = run_evaluate(
        {role: m.path for role, m in call.inputs.items() if role != "ceiling"},
        ev,
        call.out,
        labels,
        {m: models[m].views for m in ev.text_models},
        ceiling_dir,
    )
    return {"n": metrics.pop("n")}, metrics


def curve(call: StageCall):
    from .evaluate import run_curve

    counts = run_curve(
        call.cfg.train.models[call.inst.model],
        call.input("model"),
        call.input("eval"),
        call.input("image"),
        call.cfg.evaluate,
        call.out,
        call.cfg.embed.batch_size,
    )
    for p in json.loads((call.out / "curve.json").read_text())["points"]:
        call.hooks.log_metrics({"curve/mutual_knn": p["mutual_knn"]}, p["samples"])
    return {"points": counts["points"]}, {"final_mutual_knn": counts["final_mutual_knn"]}


# ---- pipeline stages: the DAG ----------------------------------------------------------


def _data_of(cfg: PipelineConfig, model: str) -> str:
    """What a model trains on: the world's renders (image model) or the views."""
    return "world" if cfg.train.models[model].kind == "image_jepa" else "views"


# what the image model's train and embed read of the world: renders and their split. Neither
# changes with the world's text knobs (alt-texts, leaks: their own random streams), so an
# alt-text sweep trains and embeds the image encoder once.
_RENDER_FILES = ("scenes.parquet", "renders.npy")


def _render_files(role: str) -> Callable[[PipelineConfig, StageInstance], dict[str, tuple[str, ...]]]:
    def files(cfg: PipelineConfig, inst: StageInstance) -> dict[str, tuple[str, ...]]:
        return {role: _RENDER_FILES} if cfg.train.models[inst.model].kind == "image_jepa" else {}

    return files


def _eval_of(cfg: PipelineConfig, model: str) -> str:
    """What a model's eval features come from: the world's eval renders or the eval captions."""
    return "world" if cfg.train.models[model].kind == "image_jepa" else "ingest"


SPECS: dict[str, StageSpec] = {
    s.name: s
    for s in [
        StageSpec(
            "world",
            1,
            ("world",),
            ("scenes.parquet", "renders.npy", "alt_texts.parquet", "eval_captions.parquet"),
            world,
            "generate the synthetic world: scenes, image renders, alt-texts, eval captions",
            inputs=lambda cfg, i: {},
        ),
        StageSpec(
            "ingest",
            3,
            ("ingest",),
            (
                "corpus.parquet",
                "eval.parquet",
                "images.parquet",
                "quarantine.parquet",
                "catalog.duckdb",
                "(corpora: texts/, quarantine/, images/ shard=<id> partitions, shards.parquet)",
            ),
            ingest,
            "normalise the source (the world, or a real corpus shard by shard) into Parquet, one row per "
            "text, + a DuckDB catalog; bad rows quarantined with a reason",
            inputs=lambda cfg, i: {"world": "world"} if cfg.ingest.source == "world" else {},
            external=lambda cfg, i: corpus_source(cfg.ingest),
            log_files=("quarantine.parquet", "shards.parquet"),
        ),
        StageSpec(
            "positives",
            1,
            ("positives",),
            ("texts.parquet", "failures.parquet", "(model backends: generations.parquet)"),
            positives,
            "extra texts per image: recaptions (sees the image) and paraphrases (sees only the alt-text)",
            # the world is an input when it is the source: its renders are the images, and the
            # world backend's captioner is the world's grammar (world.* covered by its digest)
            inputs=lambda cfg, i: {"ingest": "ingest"} | ({"world": "world"} if cfg.ingest.source == "world" else {}),
            uses=("world",),
            log_files=("failures.parquet", "generations.parquet"),
            state="kept",
        ),
        StageSpec(
            "dedup",
            2,
            ("dedup",),
            (
                "texts.parquet",
                "removed.parquet",
                "matches.parquet",
                "eval.parquet",
                "summary.json",
                "summary.md",
                "report.json",
            ),
            dedup,
            "contamination audit of the training texts against the eval split (exact after normalisation, "
            "near-duplicate: MinHash LSH + exact Jaccard, opt-in embeddings), then the removal policy",
            inputs=lambda cfg, i: {"positives": "positives", "ingest": "ingest"},
            log_files=("report.json", "summary.md", "removed.parquet", "matches.parquet"),
        ),
        StageSpec(
            "views",
            1,
            ("views",),
            ("good_views.parquet", "texts.parquet", "tokenizer.json", "meta.json"),
            views,
            "good views (texts of one image), texts for bad views / next-token, the shared tokenizer",
            inputs=lambda cfg, i: {"dedup": "dedup"},
            log_files=("tokenizer.json",),
        ),
        StageSpec(
            "train",
            2,
            ("seed", "train.models.{model}"),
            ("model.safetensors", "model.json", "tokenizer.json"),
            train,
            "train one model: text JEPA (good/bad views), causal LM (next-token) or image JEPA (renders); "
            "torchrun when nproc > 1, resumable checkpoints in OUT_DIR/checkpoints/train-<model>/<key>",
            inputs=lambda cfg, i: {"data": _data_of(cfg, i.model)},
            input_files=_render_files("data"),
            model=lambda cfg, i: cfg.train.models[i.model] if cfg.train.models[i.model].kind != "image_jepa" else None,
            uses=("train.threads",),
            log_files=("model.safetensors", "model.json", "tokenizer.json"),
            state="until_commit",
        ),
        StageSpec(
            "embed",
            1,
            ("embed",),
            ("features.npz", "ids.parquet"),
            embed,
            "per-layer embeddings of the eval captions (text models) or eval renders (image model)",
            inputs=lambda cfg, i: {"model": f"train:{i.model}", "eval": _eval_of(cfg, i.model)},
            input_files=_render_files("eval"),
            uses=("train.models.{model}",),
            fan_out=True,
        ),
        StageSpec(
            "ceiling",
            1,
            (
                "evaluate.image_model",
                "evaluate.k",
                "evaluate.clamp_quantile",
                "evaluate.clamp",
                "evaluate.layers",
                "evaluate.bootstrap",
                "evaluate.ceiling",
            ),  # fmt: skip
            ("ceiling.json",),
            ceiling,
            "oracle text features of the world's ground truth scored against the image encoder: the bag of "
            "true attributes, an MLP fitted on training scenes (the ceiling), the image encoder on a second render",
            inputs=lambda cfg, i: {
                "world": "world",
                "image": f"train:{cfg.evaluate.image_model}",
                "image_embed": f"embed:{cfg.evaluate.image_model}",
            },
            uses=("world", "train.models", "embed.batch_size"),
            log_files=("ceiling.json",),
        ),
        StageSpec(
            "evaluate",
            3,
            ("evaluate",),
            ("scores.json", "table.md", "alignment.png"),
            evaluate,
            "mutual kNN (PRH) of every text model with the image encoder, bootstrap CIs, the rotation "
            "(Procrustes fit on half the eval pairs: held-out R@1, residual), each model's fraction of the "
            "ceiling, table and plot",
            inputs=lambda cfg, i: (
                {m: f"embed:{m}" for m in evaluated_models(cfg)} | ({"ceiling": "ceiling"} if has_ceiling(cfg) else {})
            ),
            uses=("train.models",),
            log_files=("scores.json", "table.md", "alignment.png"),
        ),
        StageSpec(
            "curve",
            2,
            ("evaluate.image_model", "evaluate.k", "evaluate.clamp_quantile", "evaluate.clamp", "evaluate.layers"),
            ("curve.json",),
            curve,
            "alignment along one training run: mutual kNN at every log-spaced snapshot (train.models.*.snapshots)",
            inputs=lambda cfg, i: {
                "model": f"train:{i.model}",
                "eval": "ingest",
                "image": f"embed:{cfg.evaluate.image_model}",
            },
            uses=("train.models.{model}", "embed.batch_size"),
            log_files=("curve.json",),
        ),
    ]
}


def evaluated_models(cfg: PipelineConfig) -> list[str]:
    return [cfg.evaluate.image_model, *cfg.evaluate.text_models]


def has_ceiling(cfg: PipelineConfig) -> bool:
    """Oracles need the world's ground truth: the synthetic world only."""
    return cfg.ingest.source == "world" and bool(cfg.evaluate.ceiling.oracles)


def curve_models(cfg: PipelineConfig) -> list[str]:
    """Text models evaluated along their run (they save snapshots)."""
    return [m for m in cfg.evaluate.text_models if cfg.train.models[m].snapshots > 0]


def instances(cfg: PipelineConfig) -> list[StageInstance]:
    """Every stage instance of the recipe, in execution order."""
    models = evaluated_models(cfg)
    return [
        *(StageInstance(s) for s in ORDER[:5]),
        *(StageInstance("train", m) for m in models),
        *(StageInstance("embed", m) for m in models),
        *([StageInstance("ceiling")] if has_ceiling(cfg) else []),
        StageInstance("evaluate"),
        *(StageInstance("curve", m) for m in curve_models(cfg)),
    ]


def closure(cfg: PipelineConfig, ids: list[str]) -> list[StageInstance]:
    """The instances `ids` and everything they read, transitively, in execution order."""
    by_id = {i.id: i for i in instances(cfg)}
    needed: set[str] = set()
    todo = list(ids)
    while todo:
        x = todo.pop()
        if x not in needed:
            needed.add(x)
            todo += upstream(cfg, by_id[x]).values()
    return [i for i in by_id.values() if i.id in needed]


def upstream(cfg: Any, inst: StageInstance) -> dict[str, str]:
    """role -> upstream instance id of one instance."""
    spec = FLOW_SPECS[inst.flow][inst.stage]
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


# ---- run plan ------------------------------------------------------------------------

RUN, FORCE, CACHED_ONLY, SKIP = "run", "force", "cached-only", "skip"


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
    if cfg.ingest.source != "world" and unfed:
        raise ConfigError(
            f"the stages after ingest ({', '.join(unfed[:3])}, ...) need a positives backend and images for a "
            f"real corpus ({cfg.ingest.source}), which the 'world' backend cannot provide: run `--only ingest` or "
            "`platonic ingest` for real corpora (with a model backend, `--only positives` generates their positives)"
        )
    return modes


def uncached(cfg: PipelineConfig, modes: dict[str, str], store: ArtifactStore) -> list[str]:
    """The instances a plan takes from the cache (CACHED_ONLY: `--only`'s upstream) that
    `store` does not hold for this recipe, in execution order: what the executor would stop
    on, found before anything starts. Each key is computed as the executor computes it, on
    its inputs' cached manifests; an instance reading a missing one is missing too, one
    reading an instance this run executes (`--force` of an upstream) is left to the executor
    (its key depends on that output)."""
    found: dict[str, Manifest] = {}
    missing: list[str] = []
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
        else:
            found[inst.id] = hit
    return missing


# ---- the comparison flow (`platonic compare`) -------------------------------------------


def evalset(call: StageCall):
    from .compare import materialize_evalset

    return materialize_evalset(call.cfg.eval_sets[call.inst.set], call.out), {}


def features(call: StageCall):
    from .compare import embed_model

    i = call.inst
    mcfg = (call.cfg.text_models if i.modality == "text" else call.cfg.vision_models)[i.model]
    return embed_model(mcfg, i.modality, call.input("evalset"), call.out), {}


def compare(call: StageCall):
    from .compare import compare_grid

    keyed = {
        tuple(role.split(":", 1)[1].split("@")): m.path
        for role, m in call.inputs.items()
        if role.startswith("features:")
    }
    evalsets = {role.split(":", 1)[1]: m.path for role, m in call.inputs.items() if role.startswith("evalset:")}
    result = compare_grid(keyed, call.cfg, call.out, evalsets)
    metrics = {
        f"mutual_knn/{e}/{t}/{v}": s["mutual_knn"]
        for e, ts in result["scores"].items()
        for t, vs in ts.items()
        for v, s in vs.items()
    }
    return {"cells": len(metrics)}, metrics


def compare_instances(cfg: Any) -> list[StageInstance]:
    out = [StageInstance("evalset", set=name, flow="compare") for name in cfg.eval_sets]
    for name in cfg.eval_sets:
        for modality, models in (("text", cfg.text_models), ("vision", cfg.vision_models)):
            out += [StageInstance("features", model=m, set=name, modality=modality, flow="compare") for m in models]
    return [*out, StageInstance("compare", flow="compare")]


COMPARE_SPECS: dict[str, StageSpec] = {
    s.name: s
    for s in [
        StageSpec(
            "evalset",
            1,
            ("eval_sets.{set}",),
            ("captions.parquet", "images.parquet"),
            evalset,
            "an eval set materialised: every caption (grouped by image) + PNG bytes",
            inputs=lambda cfg, i: {},
        ),
        StageSpec(
            "features",
            1,
            ("{modality}_models.{model}",),
            ("features.npz",),
            features,
            "per-layer features of one eval set with one model",
            inputs=lambda cfg, i: {"evalset": f"evalset:{i.set}"},
        ),
        StageSpec(
            "compare",
            2,
            ("k", "clamp_quantile", "clamp", "layers", "bootstrap", "retrieval"),
            ("scores.json", "table.md"),
            compare,
            "mutual kNN of every text x vision model pair per eval set; retrieval",
            uses=("eval_sets", "text_models", "vision_models"),  # names: their features are inputs
            inputs=lambda cfg, i: {x.id: x.id for x in compare_instances(cfg) if x.stage != "compare"},
            log_files=("scores.json", "table.md"),
        ),
    ]
}


# ---- the ablation grid (`platonic ablate`): its cells are pipeline stage instances ---------


def ablation(call: StageCall):
    """The grid's summary from every cell's evaluate, embed and curve artifacts. Inputs are
    named `<cell>/<instance>`; the cells (their recipes) and the MLflow run behind each of
    their stage instances come from the flow as context (records name the runs)."""
    from .ablation import CellResult, grid_metrics, summarize

    cells = call.context["cells"]
    results = []
    for cell in cells:  # cell names hold slashes ("recap/seed=0"): strip the prefix
        mine = {k.removeprefix(cell.name + "/"): m for k, m in call.inputs.items() if k.startswith(cell.name + "/")}
        results.append(
            CellResult(
                cell,
                mine["evaluate"].path,
                {k.split(":", 1)[1]: v.path for k, v in mine.items() if k.startswith("embed:")},
                {k.split(":", 1)[1]: v.path for k, v in mine.items() if k.startswith("curve:")},
                call.context["runs"][cell.name],
            )
        )
    summary = summarize(call.cfg, results, call.out)
    counts = {"cells": len(cells), "records": sum(len(cell.cfg.evaluate.text_models) for cell in cells)}
    return counts, grid_metrics(summary)


ABLATE_SPECS: dict[str, StageSpec] = {
    "ablation": StageSpec(
        "ablation",
        5,
        ("name", "seeds", "rows", "sweep", "columns", "efficiency", "scaling", "confidence"),
        ("cells.json", "summary.json", "table.md", "curves.png", "scaling.png", "sweep.png"),
        ablation,
        "the grid summarised: mean ± CI over seeds per cell, retrieval, text-text rotations, "
        "sample efficiency, the scaling-law fit checked on a held-out run",
        log_files=("cells.json", "summary.json", "table.md", "curves.png", "scaling.png", "sweep.png"),
    ),
}

# inputs of the summary stage: what it reads of each cell
ABLATION_INPUTS = ("evaluate", "embed:", "curve:")


# ---- the contamination audit (`platonic audit`) -------------------------------------------


def audit(call: StageCall):
    """Audit the corpus against the eval sets at the configured levels."""
    import re

    from .dedup import audit as run_audit
    from .dedup import audit_metrics

    files, evals = call.context["files"], call.context["evals"]
    summary = run_audit(files, evals, call.cfg, call.out)
    # per eval set and level, in the manifest (a cache hit logs them again); MLflow metric
    # names allow letters, digits and `_-. /` only
    counts = {
        "corpus_texts": summary["corpus_texts"],
        "eval_captions": evals.num_rows,
        **{re.sub(r"[^\w\-. /]", "_", k): v for k, v in audit_metrics(summary).items()},
    }
    return counts, summary["stats"]


def audit_inputs(cfg: AuditConfig) -> tuple[list[Path], Any, dict[str, Manifest]]:
    """Corpus files and eval captions (through the real loaders), each described by a
    manifest of its own, so the cache key, MLflow inputs and lineage treat them like any
    upstream artifact. A bad path or eval spec is a ConfigError: one line for the user."""
    import hashlib

    import pyarrow.parquet as pq

    from .artifacts import file_digest
    from .data.evalsets import EvalSetError, load_eval_spec
    from .dedup import corpus_files, eval_table

    try:
        files = corpus_files(cfg.corpus)
        named = dict(load_eval_spec(s) for s in cfg.eval)
    except (EvalSetError, FileNotFoundError, ValueError) as e:
        raise ConfigError(str(e)) from None
    if len(named) != len(cfg.eval):
        raise ConfigError(f"eval sets {cfg.eval} name the same set twice")
    evals = eval_table(named)
    h = hashlib.sha256()
    for f in files:
        h.update(file_digest(f).encode())
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    uri = str(files[0]) + (f" (+{len(files) - 1} more)" if len(files) > 1 else "")
    eh = hashlib.sha256()
    for col in evals.columns:
        for v in col.to_pylist():
            eh.update(v.encode() + b"\0")
    return (
        files,
        evals,
        {
            "corpus": Manifest.external("external:corpus", uri, h.hexdigest(), {"files": len(files), "texts": rows}),
            "eval": Manifest.external(
                "external:eval",
                ";".join(cfg.eval),
                eh.hexdigest(),
                {"eval_sets": len(named), "captions": evals.num_rows},
            ),
        },
    )


AUDIT_SPECS: dict[str, StageSpec] = {
    "audit": StageSpec(
        "audit",
        1,
        ("levels", "near", "embed"),
        ("eval.parquet", "matches.parquet", "summary.json", "summary.md"),
        audit,
        "contamination audit of any corpus against eval sets: exact, near-duplicate, embedding",
        log_files=("summary.md", "summary.json", "matches.parquet"),
    ),
}


# ---- pair-free classification (`platonic match`) -----------------------------------------
#
#   [base pipeline: world, ..., train:{models}] -> match_data -> match_image, match_text:{model} -> match
#
# World sources reuse the base recipe's pipeline instances (world and the trained models, by
# their instance ids), so a recipe whose demo already ran finds them in the cache.


def match_data(call: StageCall):
    from .config import WorldConfig
    from .match.data import materialize

    world = None
    if "world" in call.inputs:  # the world's knobs, as its manifest recorded them
        world = WorldConfig.model_validate(call.inputs["world"].config["world"])
    return materialize(call.cfg.data, call.out, world), {}


def match_image(call: StageCall):
    import numpy as np

    from .cpus import set_torch_threads
    from .features import save_features
    from .match.data import load_images
    from .match.features import image_features

    set_torch_threads(call.cfg.threads)
    images = load_images(call.input("data"))
    model = call.inputs["model"].path if "model" in call.inputs else None
    feats = image_features(call.cfg.image_model, images, not isinstance(images, np.ndarray), model)
    save_features([feats], call.out / "features.npz")
    return {"images": len(feats), "dim": int(feats.shape[1])}, {}


def match_text(call: StageCall):
    import numpy as np

    from .cpus import set_torch_threads
    from .match.data import load_labels
    from .match.features import text_class_features

    set_torch_threads(call.cfg.threads)
    class_sets, _ = load_labels(call.input("data"))
    model = call.inputs["model"].path if "model" in call.inputs else None
    mcfg = call.cfg.text_models[call.inst.model]
    feats, texts = text_class_features(mcfg, class_sets, list(call.cfg.prompts), model)
    np.savez(call.out / "classes.npz", **{k: v.astype(np.float32) for k, v in feats.items()})
    (call.out / "prompts.json").write_text(json.dumps(texts, indent=1))
    return {"class_sets": len(feats), "prompts": sum(len(t) for t in texts.values())}, {}


def match(call: StageCall):
    import numpy as np

    from .features import load_features
    from .match.data import load_labels
    from .match.report import run_match

    class_names, labels = load_labels(call.input("data"))
    image = load_features(call.input("image") / "features.npz")[0]
    text = {}
    for role, m in call.inputs.items():
        if role.startswith("text:"):
            with np.load(m.path / "classes.npz") as z:
                text[role.split(":", 1)[1]] = {k: z[k] for k in z.files}
    result = run_match(labels, class_names, image, text, call.cfg.match, call.out)
    metrics = {
        f"{metric}/{cs}/{model}": r["summary"][metric]["mean"]
        for cs, models in result["scores"].items()
        for model, r in models.items()
        for metric in ("top1", "topk", "oracle_top1", "oracle_topk")
    }
    return {"cells": sum(len(v) for v in result["scores"].values())}, metrics


def _match_model_input(m) -> dict[str, str]:
    return {"model": f"train:{m.id}"} if m.source == "world" else {}


def match_instances(cfg: Any) -> list[StageInstance]:
    return [
        StageInstance("match_data", flow="match"),
        StageInstance("match_image", flow="match"),
        *(StageInstance("match_text", model=m, flow="match") for m in cfg.text_models),
        StageInstance("match", flow="match"),
    ]


def match_base(cfg: Any) -> PipelineConfig | None:
    """The base pipeline recipe of a world match (its out_dir set to the match's), or None."""
    from .config import read_recipe, validate_recipe

    if cfg.base is None:
        return None
    raw, origin = read_recipe(cfg.base)
    base = validate_recipe(raw, origin, [*cfg.base_set, f"out_dir={cfg.out_dir}"])
    for name, m in [("image_model", cfg.image_model), *((f"text_models.{k}", v) for k, v in cfg.text_models.items())]:
        if m.source == "world" and m.id not in base.train.models:
            known = ", ".join(base.train.models)
            raise ConfigError(f"{name}: {m.id!r} is not a model of {origin} (train.models: {known})")
    if cfg.data.source == "world" and base.ingest.source != "world":
        raise ConfigError(f"data.source world: {origin} ingests {base.ingest.source!r}, not the world")
    return base


def match_base_instances(base: PipelineConfig, cfg: Any) -> list[StageInstance]:
    """The base pipeline's instances a world match reads (the world, the trained models) and
    everything upstream of them, in pipeline order."""
    want = (["world"] if cfg.data.source == "world" else []) + [
        f"train:{m.id}" for m in [cfg.image_model, *cfg.text_models.values()] if m.source == "world"
    ]
    return closure(base, want)


MATCH_SPECS: dict[str, StageSpec] = {
    s.name: s
    for s in [
        StageSpec(
            "match_data",
            1,
            ("data",),
            ("labels.parquet", "classes.json", "(world, fashion_mnist: images.npy)"),
            match_data,
            "labelled images and class names: the world's single-object scenes, Fashion-MNIST (IDX) or an "
            "ImageFolder (ImageNet-100)",
            inputs=lambda cfg, i: {"world": "world"} if cfg.data.source == "world" else {},
            log_files=("classes.json",),
        ),
        StageSpec(
            "match_image",
            1,
            ("image_model",),
            ("features.npz",),
            match_image,
            "the labelled images through the image encoder (one fixed layer)",
            inputs=lambda cfg, i: {"data": "match_data"} | _match_model_input(cfg.image_model),
            uses=("threads",),
        ),
        StageSpec(
            "match_text",
            1,
            ("text_models.{model}", "prompts"),
            ("classes.npz", "prompts.json"),
            match_text,
            "class-name prompts through one text encoder, averaged and normalised per class (one fixed layer)",
            inputs=lambda cfg, i: {"data": "match_data"} | _match_model_input(cfg.text_models[i.model]),
            uses=("threads",),
            log_files=("prompts.json",),
        ),
        StageSpec(
            "match",
            2,
            ("match",),
            ("scores.json", "table.md", "match.png"),
            match,
            "pair-free matching per seed: k-means clusters, kernels, the quadratic assignment; top-1/top-k "
            "against chance and the labelled oracle, t intervals over seeds",
            inputs=lambda cfg, i: (
                {"data": "match_data", "image": "match_image"}
                | {f"text:{m}": f"match_text:{m}" for m in cfg.text_models}
            ),
            log_files=("scores.json", "table.md", "match.png"),
        ),
    ]
}


# ---- captioning through one map (`platonic caption`, platonic_core/caption/) ----------------


def _threads(call: StageCall) -> None:
    from .cpus import set_torch_threads

    set_torch_threads(call.cfg.threads)


def _encoder_checkpoint(call: StageCall, enc) -> Path | None:
    """The train artifact an encoder reads: the pipeline's (an input), a folder (checkpoint)."""
    if enc.source == "pipeline":
        return call.input("model")
    return Path(enc.id) if enc.source == "checkpoint" else None


def caption_data(call: StageCall):
    from .caption.data import karpathy_data, world_data
    from .config import WorldConfig

    d = call.cfg.data
    if d.source == "world":
        world = call.inputs["world"]
        # the grammar the references are written in: the world's own config (its digest covers it)
        wcfg = WorldConfig.model_validate(world.config["world"])
        return world_data(world.path, call.input("dedup"), wcfg, d, call.out), {}
    return karpathy_data(d, call.out), {}


def caption_text(call: StageCall):
    from .caption.encode import run_text_features

    _threads(call)
    enc = call.cfg.text_encoders[call.inst.model]
    return run_text_features(enc, call.input("data"), call.out, _encoder_checkpoint(call, enc)), {}


def caption_image(call: StageCall):
    from .caption.encode import run_image_features

    _threads(call)
    enc = call.cfg.image_encoder
    world = call.input("world") if "world" in call.inputs else None
    return run_image_features(enc, call.input("data"), call.out, _encoder_checkpoint(call, enc), world), {}


def caption_decoder(call: StageCall):
    from .caption.run import run_decoders

    _threads(call)

    def on_log(seed: int, step: int, metrics: dict) -> None:
        call.hooks.log_metrics({f"decoder/seed_{seed}/{k}": v for k, v in metrics.items()}, step)

    res = run_decoders(call.input("data"), call.input("text"), call.cfg.decoder, list(call.cfg.seeds), call.out, on_log)
    stats = {f"final_loss_seed_{s}": v["final_loss"] for s, v in res["seeds"].items()}
    return {"texts": res["texts"], "vocab": res["vocab"], "decoders": len(res["seeds"])}, stats


def caption_map(call: StageCall):
    from .caption.run import run_maps

    info = run_maps(call.input("text"), call.input("image"), call.cfg.maps, list(call.cfg.seeds), call.out)
    stats = {}
    for seed, v in info.items():  # the pair-free map's matching cost, and that of the rotation pairs would pick
        for k in ("transport_cost", "paired_rotation_transport_cost"):
            if k in v.get("pairfree", {}):
                stats[f"pairfree_{k}_seed_{seed}"] = v["pairfree"][k]
    return {"maps": sum(len(v) for v in info.values())}, stats


def caption_eval(call: StageCall):
    from .caption.evaluate import run_caption_eval

    _threads(call)
    res = run_caption_eval(
        call.input("data"),
        call.input("text"),
        call.input("image"),
        call.input("decoder"),
        call.input("map"),
        call.cfg.eval,
        list(call.cfg.seeds),
        call.out,
        call.cfg.decoder.device,
        call.hooks.logger.info,
    )
    metrics = {}
    for seed, methods in res["scores"].items():
        for m, s in methods.items():
            if "CIDEr-D" in s:
                metrics[f"CIDEr-D_{m}_seed_{seed}".replace("@", "_at_")] = s["CIDEr-D"]
    return {"images": res["n_images"], "systems": sum(len(v) for v in res["scores"].values())}, metrics


def caption_report(call: StageCall):
    from .caption.run import run_report
    from .caption.summary import summary_metrics

    evals = {role.split(":", 1)[1]: m.path for role, m in call.inputs.items() if role.startswith("eval:")}
    world = call.input("world") if "world" in call.inputs else None
    res = run_report(evals, call.input("data"), call.out, call.cfg.eval.examples, call.cfg.confidence, world)
    return {"encoders": len(evals), "files": len(res["files"])}, summary_metrics(res["summary"])


def caption_instances(cfg: Any) -> list[StageInstance]:
    """Every stage instance of a caption recipe, in execution order."""
    texts = list(cfg.text_encoders)
    return [
        StageInstance("caption_data", flow="caption"),
        StageInstance("caption_image", flow="caption"),
        *(StageInstance("caption_text", t, flow="caption") for t in texts),
        *(StageInstance("caption_decoder", t, flow="caption") for t in texts),
        *(StageInstance("caption_map", t, flow="caption") for t in texts),
        *(StageInstance("caption_eval", t, flow="caption") for t in texts),
        StageInstance("caption_report", flow="caption"),
    ]


def _caption_external(cfg: Any, enc) -> dict[str, Manifest]:
    """A checkpoint folder named by path: its weights' digest is an input (the cache sees it)."""
    if enc.source != "checkpoint":
        return {}
    from .artifacts import file_digest

    weights = Path(enc.id) / "model.safetensors"
    if not weights.is_file():
        raise ConfigError(f"{enc.id}: not a train artifact (no model.safetensors)")
    return {f"checkpoint:{enc.id}": Manifest.external("external:checkpoint", enc.id, file_digest(weights), {})}


def _karpathy_external(cfg: Any, i: StageInstance) -> dict[str, Manifest]:
    if cfg.data.source != "karpathy":
        return {}
    from .caption.data import CaptionDataError, karpathy_sources

    try:
        sources = karpathy_sources(cfg.data)
    except CaptionDataError as e:
        raise ConfigError(str(e)) from None
    return {
        f"karpathy:{name}": Manifest.external(f"external:karpathy_{name}", uri, digest, counts)
        for name, (uri, digest, counts) in sources.items()
    }


def _model_input(enc) -> dict[str, str]:
    return {"model": f"train:{enc.id}"} if enc.source == "pipeline" else {}


def _world_input(cfg: Any) -> dict[str, str]:
    return {"world": "world"} if cfg.data.source == "world" else {}


CAPTION_SPECS: dict[str, StageSpec] = {
    s.name: s
    for s in [
        StageSpec(
            "caption_data",
            1,
            ("data",),
            ("pairs.parquet", "decoder_texts.parquet", "references.parquet", "conditions.parquet", "images.parquet"),
            caption_data,
            "the captioner's data: map pairs, decoder texts (text only), eval images with several references, "
            "the ceiling's conditioning captions (the world, or Karpathy JSONs)",
            inputs=lambda cfg, i: {"world": "world", "dedup": "dedup"} if cfg.data.source == "world" else {},
            external=_karpathy_external,
        ),
        StageSpec(
            "caption_image",
            1,
            ("image_encoder",),
            ("features.npz",),
            caption_image,
            "one layer of image features of the pair images and the eval images",
            inputs=lambda cfg, i: {"data": "caption_data"} | _model_input(cfg.image_encoder) | _world_input(cfg),
            external=lambda cfg, i: _caption_external(cfg, cfg.image_encoder),
            uses=("threads",),
        ),
        StageSpec(
            "caption_text",
            1,
            ("text_encoders.{model}",),
            ("features.npz",),
            caption_text,
            "one layer of text features of the decoder texts, the pair captions and the conditioning captions",
            inputs=lambda cfg, i: {"data": "caption_data"} | _model_input(cfg.text_encoders[i.model]),
            external=lambda cfg, i: _caption_external(cfg, cfg.text_encoders[i.model]),
            uses=("threads",),
        ),
        StageSpec(
            "caption_decoder",
            1,
            ("decoder", "seeds"),
            ("seed_<s>/lm/", "seed_<s>/prefix.safetensors", "decoders.json"),
            caption_decoder,
            "the text-only decoder, one per seed: a causal LM writing each training caption back from a prefix "
            "made of that caption's frozen text embedding (never an image)",
            inputs=lambda cfg, i: {"data": "caption_data", "text": f"caption_text:{i.model}"},
            uses=("threads",),
            log_files=("decoders.json",),
        ),
        StageSpec(
            "caption_map",
            1,
            ("maps", "seeds"),
            ("maps.npz", "maps.json"),
            caption_map,
            "maps from image features into the text encoder's space: paired (lstsq, procrustes) on N pairs, and a "
            "pair-free rotation (Wasserstein-Procrustes from within-modality structure), per seed",
            inputs=lambda cfg, i: {"text": f"caption_text:{i.model}", "image": "caption_image"},
            log_files=("maps.json",),
        ),
        StageSpec(
            "caption_eval",
            1,
            ("eval.metrics", "eval.max_new_tokens", "eval.num_beams", "seeds"),
            ("generations.parquet", "scores.json"),
            caption_eval,
            "captions of the held-out images through every map, the ceiling and the floors; pycocoevalcap scores "
            "(PTB tokenizer; BLEU, METEOR, ROUGE-L, CIDEr-D); each map's R@1 on the eval images",
            inputs=lambda cfg, i: {
                "data": "caption_data",
                "text": f"caption_text:{i.model}",
                "image": "caption_image",
                "decoder": f"caption_decoder:{i.model}",
                "map": f"caption_map:{i.model}",
            },
            uses=("threads", "decoder.device", "eval.batch_size"),
            log_files=("scores.json", "generations.parquet"),
        ),
        StageSpec(
            "caption_report",
            1,
            ("eval.examples", "confidence"),
            ("summary.json", "table.md", "curve.png", "examples.md", "examples.html", "example_NN.png"),
            caption_report,
            "the table over encoders and seeds (mean and t interval), the CIDEr-vs-pairs curve, examples with the "
            "rendered images",
            inputs=lambda cfg, i: (
                {"data": "caption_data"}
                | {f"eval:{t}": f"caption_eval:{t}" for t in cfg.text_encoders}
                | _world_input(cfg)
            ),
            log_files=("summary.json", "table.md", "curve.png", "examples.md", "examples.html", "example_*.png"),
        ),
    ]
}


FLOW_SPECS: dict[str, dict[str, StageSpec]] = {
    "pipeline": SPECS,
    "compare": COMPARE_SPECS,
    "ablate": ABLATE_SPECS,
    "audit": AUDIT_SPECS,
    "match": MATCH_SPECS,
    "caption": CAPTION_SPECS,
}


def spec_of(inst: StageInstance) -> StageSpec:
    return FLOW_SPECS[inst.flow][inst.stage]
