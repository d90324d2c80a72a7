"""Pair-free classification's stages (`platonic match`).

    [base pipeline: world, ..., train:{models}] -> match_data -> match_image, match_text:{model} -> match

World sources reuse the base recipe's pipeline instances (world and the trained models, by
their instance ids), so a recipe whose demo already ran finds them in the cache.
"""

from __future__ import annotations

import json
from typing import Any

from ..config import ConfigError, PipelineConfig
from ..contract import StageCall, StageInstance, StageSpec
from .pipeline import closure


def match_data(call: StageCall):
    from ..config import WorldConfig
    from ..match.data import materialize

    world = None
    if "world" in call.inputs:  # the world's knobs, as its manifest recorded them
        world = WorldConfig.model_validate(call.inputs["world"].config["world"])
    return materialize(call.cfg.data, call.out, world), {}


def match_image(call: StageCall):
    import numpy as np

    from ..cpus import set_torch_threads
    from ..features import save_features
    from ..match.data import load_images
    from ..match.features import image_features

    set_torch_threads(call.cfg.threads)
    if call.cfg.image_model.source == "classifier":  # class prototypes: the rows match_data recorded
        import pyarrow.parquet as pq

        from ..realdata.prototypes import classifier_prototypes

        rows = pq.read_table(call.input("data") / "labels.parquet", columns=["image"])["image"].to_numpy()
        feats = classifier_prototypes(call.cfg.image_model.id or "efficientnet_lite0")[rows]
        save_features([feats], call.out / "features.npz")
        return {"images": len(feats), "dim": int(feats.shape[1])}, {}
    images = load_images(call.input("data"))
    model = call.inputs["model"].path if "model" in call.inputs else None
    feats = image_features(call.cfg.image_model, images, not isinstance(images, np.ndarray), model)
    save_features([feats], call.out / "features.npz")
    return {"images": len(feats), "dim": int(feats.shape[1])}, {}


def match_text(call: StageCall):
    import numpy as np

    from ..cpus import set_torch_threads
    from ..match.data import load_labels
    from ..match.features import text_class_features

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

    from ..features import load_features
    from ..match.data import load_labels
    from ..match.report import run_match

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
    } | {
        f"p_{metric}/{cs}/{model}": p["p"]
        for cs, models in result["scores"].items()
        for model, r in models.items()
        for metric, p in r["pvalues"].items()
    }
    return {"cells": sum(len(v) for v in result["scores"].values())}, metrics


def _match_model_input(m) -> dict[str, str]:
    return {"model": f"train:{m.id}"} if m.source == "world" else {}


MATCH_SPECS: dict[str, StageSpec] = {
    s.name: s
    for s in [
        StageSpec(
            "match_data",
            1,
            ("data",),
            ("labels.parquet", "classes.json", "(world, fashion_mnist: images.npy)"),
            match_data,
            "labelled images and class names: the world's single-object scenes, Fashion-MNIST (IDX), an "
            "ImageFolder (ImageNet-100) or ImageNet classes as classifier rows (prototypes)",
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
            3,
            ("match",),
            ("scores.json", "table.md", "match.png"),
            match,
            "pair-free matching per seed: k-means clusters (or prototypes as their own), kernels, the quadratic "
            "assignment; top-1/top-k against chance, the relabelling p-value and the labelled oracle, the rank of "
            "the true matching, t intervals over seeds",
            inputs=lambda cfg, i: (
                {"data": "match_data", "image": "match_image"}
                | {f"text:{m}": f"match_text:{m}" for m in cfg.text_models}
            ),
            log_files=("scores.json", "table.md", "match.png"),
        ),
    ]
}


def match_instances(cfg: Any) -> list[StageInstance]:
    """Every stage instance of a match recipe, in execution order (the base pipeline's: match_base_instances)."""
    return [
        StageInstance("match_data", flow="match"),
        StageInstance("match_image", flow="match"),
        *(StageInstance("match_text", model=m, flow="match") for m in cfg.text_models),
        StageInstance("match", flow="match"),
    ]


def match_base(cfg: Any) -> PipelineConfig | None:
    """The base pipeline recipe of a world match (its out_dir set to the match's), or None."""
    from ..config import read_recipe, validate_recipe

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
