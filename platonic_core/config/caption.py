"""The caption recipe (`platonic caption`, CaptionConfig): captioning through one map, an
image encoder -> one linear map -> a decoder trained on text only (platonic_core/caption/)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .compare import EvalSetConfig, FeatureModelConfig
from .recipe import ExperimentName, Section, Seed, Threads


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
      `references − 1` more complete recaptions, and one more recaption whose text embedding
      the decoder reads (never among the references), and the eval scenes' true attributes.
    - karpathy: Karpathy JSONs (dataset_coco.json / dataset_flickr30k.json): `pairs` (the
      map's image-caption pairs, e.g. Flickr30k train: each image with its first caption),
      `texts` (the decoder's captions, text only, e.g. COCO train: every caption), `eval`
      (e.g. COCO test: images with all their captions as references; the decoder reads the
      first's text embedding, scored against the others).
    """

    source: Literal["world", "karpathy"] = "world"
    references: int = Field(5, ge=1, le=1000)
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
    feature is never exactly a caption's embedding, and the decoder learns to tolerate that.
    Training runs to convergence on a held-out split of the decoder's own training captions
    (never the eval set): `heldout` of the images whose captions it reads are set aside
    (all captions of an image on one side), their loss (clean conditioning) is measured every
    `eval_every` steps, the checkpoint with the lowest is kept, and training stops after
    `patience` measurements without improvement or at `steps` (the budget). `heldout: 0`: no
    split, the last step is kept."""

    source: Literal["scratch", "hf"] = "scratch"
    id: str | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    width: int = Field(96, ge=8, le=16_384)
    layers: int = Field(2, ge=1, le=256)
    heads: int = Field(4, ge=1, le=256)
    vocab_size: int = Field(2000, ge=16, le=1_000_000)
    max_len: int = Field(48, ge=8, le=8192)  # caption tokens (start and end included)
    prefix_len: int = Field(4, ge=1, le=1024)
    noise: float = Field(0.5, ge=0)
    steps: int = Field(600, ge=1, le=1_000_000_000)  # the most steps (the budget); early stopping may end sooner
    heldout: float = Field(0.05, ge=0, lt=1)  # fraction of the decoder texts' images held out for selection
    eval_every: int = Field(100, ge=1, le=1_000_000_000)  # steps between held-out losses (and always at the last step)
    patience: int | None = Field(
        5, ge=1, le=1_000_000
    )  # held-out losses without improvement before stopping (None: never)
    batch_size: int = Field(64, ge=1, le=1_048_576)
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
    dim: int = Field(32, ge=2, le=65_536)
    points: int = Field(600, ge=16, le=1_000_000)
    disjoint: bool = True
    iterations: int = Field(20, ge=1, le=100_000)
    epsilon: float = Field(0.02, gt=0)  # Sinkhorn's entropic weight, relative to the mean cost
    sweeps: int = Field(1, ge=0, le=1000)
    flip_iterations: int = Field(3, ge=1, le=1000)


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
    by the PTB tokenizer and METEOR. Besides the maps: `text_embedding` (the decoder reads a
    true caption's own text embedding: no image; a test of the decoder), every conditioning
    also answered by the nearest training caption (retrieval baseline); the bound `human`
    (another true caption), floors `floor_shuffled` (the paired map on all pairs applied to
    shuffled eval images) and `frequent` (the most frequent decoder training caption)."""

    metrics: list[Literal["bleu", "meteor", "rouge", "cider"]] = ["bleu", "meteor", "rouge", "cider"]
    max_new_tokens: int = Field(40, ge=1, le=8192)
    num_beams: int = Field(1, ge=1, le=64)
    batch_size: int = Field(256, ge=1, le=65_536)
    examples: int = Field(8, ge=0)  # eval images shown in the report with their captions


class CaptionConfig(Section):
    """`platonic caption RECIPE`: captions through one map, on the synthetic world (`base`: the
    pipeline recipe whose world, texts and encoders are used, its cache shared) or on real
    data and models (`data.source: karpathy`, hf encoders)."""

    name: str = "caption"
    out_dir: str = ".platonic"
    experiment: ExperimentName = "caption"
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
