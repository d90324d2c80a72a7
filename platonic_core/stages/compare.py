"""The comparison flow's stages (`platonic compare`): an eval set per set, features per
(model, set), then the comparison of every text x vision pair."""

from __future__ import annotations

from typing import Any

from ..contract import StageCall, StageInstance, StageSpec


def evalset(call: StageCall):
    from ..compare import materialize_evalset

    return materialize_evalset(call.cfg.eval_sets[call.inst.set], call.out), {}


def features(call: StageCall):
    from ..compare import embed_model

    i = call.inst
    mcfg = (call.cfg.text_models if i.modality == "text" else call.cfg.vision_models)[i.model]
    return embed_model(mcfg, i.modality, call.input("evalset"), call.out), {}


def compare(call: StageCall):
    from ..compare import compare_grid

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
            3,  # 3: BCa bootstrap intervals (scipy)
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


def compare_instances(cfg: Any) -> list[StageInstance]:
    """Every stage instance of a compare recipe, in execution order."""
    out = [StageInstance("evalset", set=name, flow="compare") for name in cfg.eval_sets]
    for name in cfg.eval_sets:
        for modality, models in (("text", cfg.text_models), ("vision", cfg.vision_models)):
            out += [StageInstance("features", model=m, set=name, modality=modality, flow="compare") for m in models]
    return [*out, StageInstance("compare", flow="compare")]
