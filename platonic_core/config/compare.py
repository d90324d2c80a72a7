"""The comparison recipe (`platonic compare`, CompareConfig): external models x eval sets.
EvalSetConfig and FeatureModelConfig are also the caption recipe's (caption.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .recipe import ExperimentName, Section


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
    batch_size: int = Field(32, ge=1, le=65_536)


class RetrievalConfig(Section):
    """Flickr protocol: fit one map text -> image on the pairs of eval set `fit` (every
    caption with its image), then rank on eval set `eval` (all its captions)."""

    fit: str
    eval: str
    maps: list[Literal["procrustes", "lstsq"]] = ["procrustes", "lstsq"]


class CompareConfig(Section):
    name: str = "compare"
    out_dir: str = ".platonic"
    experiment: ExperimentName = "platonic-compare"
    eval_sets: dict[str, EvalSetConfig]
    text_models: dict[str, FeatureModelConfig]
    vision_models: dict[str, FeatureModelConfig]
    k: int = Field(10, ge=1, le=10_000)
    clamp_quantile: float = Field(0.95, gt=0, le=1)
    # mean: each sample's quantile of |x|, averaged (the published PRH numbers); exact: the
    # global sorted quantile (platonic-rep --precise); none: L2 normalisation only
    clamp: Literal["mean", "exact", "none"] = "mean"
    layers: Literal["best", "last"] = "best"
    bootstrap: int = Field(1000, ge=0, le=100_000)
    retrieval: list[RetrievalConfig] = []

    @model_validator(mode="after")
    def _check_sets(self) -> CompareConfig:
        for r in self.retrieval:
            for s in (r.fit, r.eval):
                if s not in self.eval_sets:
                    raise ValueError(f"retrieval refers to eval set {s!r}, not in eval_sets {sorted(self.eval_sets)}")
        return self
