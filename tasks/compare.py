"""Prefect tasks of the comparison flow, through the same stage contract as the pipeline."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic.core.compare import compare_grid, embed_model, materialize_evalset
from platonic.core.stages import StageInstance

from .stage import execute


@task(name="evalset", cache_policy=NO_CACHE, task_run_name="evalset:{name}")
def evalset(cfg, name, mode, ctx):
    """Materialise one eval set (first caption per image, PNG bytes)."""
    return execute(StageInstance("evalset", set=name, flow="compare"), cfg, {}, mode, ctx,
                   lambda out, run_id: (materialize_evalset(cfg.eval_sets[name], out), {}))


@task(name="features", cache_policy=NO_CACHE, task_run_name="features:{model}@{set_name}")
def features(cfg, model, modality, set_name, evalset_m, mode, ctx):
    """Per-layer features of one eval set with one model."""
    mcfg = (cfg.text_models if modality == "text" else cfg.vision_models)[model]
    inst = StageInstance("features", model=model, set=set_name, modality=modality, flow="compare")
    return execute(inst, cfg, {evalset_m.stage: evalset_m}, mode, ctx,
                   lambda out, run_id: (embed_model(mcfg, modality, evalset_m.path, out), {}))


@task(name="compare", cache_policy=NO_CACHE)
def compare(cfg, feature_ms, evalset_ms, mode, ctx):
    """Mutual kNN for every text x vision pair per eval set (and retrieval): scores.json, table.md."""

    def compute(out, run_id):
        keyed = {tuple(k.split(":", 1)[1].split("@")): m.path for k, m in feature_ms.items()}
        result = compare_grid(keyed, cfg, out, {k.split(":", 1)[1]: m.path for k, m in evalset_ms.items()})
        metrics = {f"mutual_knn/{e}/{t}/{v}": s["mutual_knn"] for e, ts in result["scores"].items()
                   for t, vs in ts.items() for v, s in vs.items()}
        return {"cells": len(metrics)}, metrics

    return execute(StageInstance("compare", flow="compare"), cfg, {**evalset_ms, **feature_ms}, mode, ctx, compute,
                   log_files=("scores.json", "table.md"))
