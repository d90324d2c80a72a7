"""The DAG as data: which stages exist, what each reads and writes, and the run plan.

A stage *instance* is a stage applied to one thing: `train:good`, `embed:ntp`. Its cache
key hashes (stage name, stage version, the config fields it reads, its inputs' digests), so
changing one field re-executes exactly the stages that read it and, through the digests,
what is downstream of them.

Bump `version` when a stage's semantics change: the cache cannot see code changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import ConfigError, PipelineConfig, get_path, stable_hash, to_plain

ORDER = ["world", "ingest", "positives", "dedup", "views", "train", "embed", "evaluate", "curve"]


@dataclass(frozen=True)
class StageSpec:
    name: str
    version: int
    reads: tuple[str, ...]  # config paths; `{model}`, `{set}`, `{modality}`: the instance's
    inputs: tuple[str, ...]  # upstream stage instances; placeholders as above
    writes: tuple[str, ...]
    doc: str


SPECS: dict[str, StageSpec] = {
    s.name: s
    for s in [
        StageSpec("world", 1, ("world",), (), ("scenes.parquet", "renders.npy", "alt_texts.parquet", "eval_captions.parquet"),
                  "generate the synthetic world: scenes, image renders, alt-texts, eval captions"),
        StageSpec("ingest", 2, ("ingest",), ("{ingest_input}",),
                  ("corpus.parquet", "eval.parquet", "images.parquet", "quarantine.parquet", "catalog.duckdb",
                   "(corpora: texts/, quarantine/, images/ shard=<id> partitions, shards.parquet)"),
                  "normalise the source (the world, or a real corpus shard by shard) into Parquet, one row per "
                  "text, + a DuckDB catalog; bad rows quarantined with a reason"),
        StageSpec("positives", 1, ("positives",), ("ingest", "{ingest_input}"),
                  ("texts.parquet", "failures.parquet", "(model backends: generations.parquet)"),
                  "extra texts per image: recaptions (sees the image) and paraphrases (sees only the alt-text)"),
        StageSpec("dedup", 2, ("dedup",), ("positives", "ingest"),
                  ("texts.parquet", "removed.parquet", "matches.parquet", "eval.parquet", "summary.json", "summary.md",
                   "report.json"),
                  "contamination audit of the training texts against the eval split (exact after normalisation, "
                  "near-duplicate: MinHash LSH + exact Jaccard, opt-in embeddings), then the removal policy"),
        StageSpec("views", 1, ("views",), ("dedup",), ("good_views.parquet", "texts.parquet", "tokenizer.json", "meta.json"),
                  "good views (texts of one image), texts for bad views / next-token, the shared tokenizer"),
        StageSpec("train", 1, ("seed", "train.models.{model}"), ("{train_input}",), ("model.safetensors", "model.json", "tokenizer.json"),
                  "train one model: text JEPA (good/bad views), causal LM (next-token) or image JEPA (renders); "
                  "torchrun when nproc > 1, resumable checkpoints in OUT_DIR/checkpoints/train-<model>/<key>"),
        StageSpec("embed", 1, ("embed",), ("train:{model}", "{eval_input}"), ("features.npz", "ids.parquet"),
                  "per-layer embeddings of the eval captions (text models) or eval images (image model)"),
        StageSpec("evaluate", 2, ("evaluate",), ("embed:*",), ("scores.json", "table.md", "alignment.png"),
                  "mutual kNN (PRH) of every text model with the image encoder, bootstrap CIs, the rotation "
                  "(Procrustes fit on half the eval pairs: held-out R@1, residual), table and plot"),
        StageSpec("curve", 1, ("evaluate.image_model", "evaluate.k", "evaluate.clamp_quantile", "evaluate.layers"),
                  ("train:{model}", "{eval_input}", "embed:{image}"), ("curve.json",),
                  "alignment along one training run: mutual kNN at every log-spaced snapshot (train.models.*.snapshots)"),
    ]
}


@dataclass(frozen=True)
class StageInstance:
    """One stage applied to one thing, in one flow: `train:good` (pipeline),
    `features:qwen@wit` (compare), `ablation` (ablate)."""

    stage: str
    model: str | None = None
    set: str | None = None  # compare: the eval set
    modality: str | None = None  # compare: text | vision
    flow: str = "pipeline"

    @property
    def id(self) -> str:
        if self.set is not None:
            return f"{self.stage}:{self.model}@{self.set}" if self.model else f"{self.stage}:{self.set}"
        return f"{self.stage}:{self.model}" if self.model else self.stage

    def spec(self) -> StageSpec:
        return FLOW_SPECS[self.flow][self.stage]

    def reads(self) -> list[str]:
        return [r.format(model=self.model, set=self.set, modality=self.modality) for r in self.spec().reads]

    def inputs(self, cfg: PipelineConfig) -> list[str]:
        """The upstream instance ids (pipeline stages)."""
        out = []
        for i in self.spec().inputs:
            if i == "{ingest_input}":
                if cfg.ingest.source == "world":  # a real corpus is read from its files
                    out.append("world")
            elif i == "{train_input}":
                kind = cfg.train.models[self.model].kind
                out.append("world" if kind == "image_jepa" else "views")
            elif i == "{eval_input}":
                kind = cfg.train.models[self.model].kind
                out.append("world" if kind == "image_jepa" else "ingest")
            elif i == "embed:*":
                out.extend(f"embed:{m}" for m in evaluated_models(cfg))
            else:
                out.append(i.format(model=self.model, image=cfg.evaluate.image_model))
        return out

    def config_slice(self, cfg) -> dict:
        return {r: to_plain(get_path(cfg, r)) for r in self.reads()}


def evaluated_models(cfg: PipelineConfig) -> list[str]:
    return [cfg.evaluate.image_model, *cfg.evaluate.text_models]


def instances(cfg: PipelineConfig) -> list[StageInstance]:
    """Every stage instance of the recipe, in execution order."""
    out = [StageInstance(s) for s in ORDER[:5]]
    models = evaluated_models(cfg)
    out += [StageInstance("train", m) for m in models]
    out += [StageInstance("embed", m) for m in models]
    out.append(StageInstance("evaluate"))
    out += [StageInstance("curve", m) for m in curve_models(cfg)]
    return out


def curve_models(cfg: PipelineConfig) -> list[str]:
    """Text models evaluated along their run (they save snapshots)."""
    return [m for m in cfg.evaluate.text_models if cfg.train.models[m].snapshots > 0]


def cache_key(inst, cfg, input_digests: dict[str, str]) -> str:
    spec = inst.spec()
    return stable_hash({
        "stage": inst.id, "version": spec.version, "config": inst.config_slice(cfg), "inputs": input_digests,
    })


# ---- run plan ------------------------------------------------------------------------

RUN, FORCE, CACHED_ONLY, SKIP = "run", "force", "cached-only", "skip"


def _matches(selector: str, inst: StageInstance) -> bool:
    return selector in (inst.stage, inst.id)


def check_selector(selector: str, cfg: PipelineConfig) -> None:
    known = {i.stage for i in instances(cfg)} | {i.id for i in instances(cfg)}
    if selector not in known:
        raise ConfigError(f"unknown stage {selector!r}; stages: {', '.join(ORDER)} (or e.g. train:{cfg.evaluate.text_models[0]})")


def plan(cfg: PipelineConfig, only: str | None = None, from_: str | None = None, force: list[str] | None = None) -> dict[str, str]:
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
        by_id = {i.id: i for i in insts}
        needed: set[str] = set()
        todo = [i.id for i in insts if _matches(only, i)]
        while todo:
            for up in by_id[todo.pop()].inputs(cfg):
                if up not in needed:
                    needed.add(up)
                    todo.append(up)
        for i in insts:
            modes[i.id] = FORCE if _matches(only, i) else (CACHED_ONLY if i.id in needed else SKIP)
    if from_:
        # the selected instances and everything that (transitively) reads their output
        dirty = {i.id for i in insts if _matches(from_, i)}
        for i in insts:  # execution order is a topological order
            if i.id in dirty or any(u in dirty for u in i.inputs(cfg)):
                dirty.add(i.id)
                modes[i.id] = FORCE
    for s in force:
        for i in insts:
            if _matches(s, i) and modes[i.id] != SKIP:
                modes[i.id] = FORCE
    return modes


# ---- the comparison flow (`platonic compare`) -------------------------------------------

COMPARE_SPECS: dict[str, StageSpec] = {
    s.name: s
    for s in [
        StageSpec("evalset", 1, ("eval_sets.{set}",), (), ("captions.parquet", "images.parquet"),
                  "an eval set materialised: every caption (grouped by image) + PNG bytes"),
        StageSpec("features", 1, ("{modality}_models.{model}",), ("evalset:{set}",), ("features.npz",),
                  "per-layer features of one eval set with one model"),
        StageSpec("compare", 1, ("k", "clamp_quantile", "layers", "bootstrap", "retrieval"), ("evalset:*", "features:*"),
                  ("scores.json", "table.md"), "mutual kNN of every text x vision model pair per eval set; retrieval"),
    ]
}


# ---- the ablation grid (`platonic ablate`): its cells are pipeline stage instances ---------

ABLATE_SPECS: dict[str, StageSpec] = {
    s.name: s
    for s in [
        StageSpec("ablation", 3, ("seeds", "rows", "columns", "efficiency", "scaling", "confidence"),
                  ("evaluate:*", "curve:*", "embed:*"), ("cells.json", "summary.json", "table.md", "curves.png", "scaling.png"),
                  "the grid summarised: mean ± CI over seeds per cell, retrieval, text-text rotations, "
                  "sample efficiency, the scaling-law fit checked on a held-out run"),
    ]
}

# ---- the contamination audit (`platonic audit`) -------------------------------------------

AUDIT_SPECS: dict[str, StageSpec] = {
    "audit": StageSpec("audit", 1, ("levels", "near", "embed"), ("corpus", "eval"),
                       ("eval.parquet", "matches.parquet", "summary.json", "summary.md"),
                       "contamination audit of any corpus against eval sets: exact, near-duplicate, embedding"),
}


FLOW_SPECS = {"pipeline": SPECS, "compare": COMPARE_SPECS, "ablate": ABLATE_SPECS, "audit": AUDIT_SPECS}
