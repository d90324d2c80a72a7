from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic.core.ablation import CellResult, grid_metrics, summarize
from platonic.core.artifacts import Manifest
from platonic.core.stages import RUN, StageInstance

from .stage import execute


@task(name="ablation", cache_policy=NO_CACHE)
def ablation(abl, cells, stage_ms: list[dict[str, Manifest]], ctx):
    """The grid's summary from every cell's evaluate, embed and curve artifacts."""

    def compute(out, run_id):
        results = []
        for cell, m in zip(cells, stage_ms, strict=True):
            results.append(CellResult(
                cell, m["evaluate"].path,
                {k.split(":", 1)[1]: v.path for k, v in m.items() if k.startswith("embed:")},
                {k.split(":", 1)[1]: v.path for k, v in m.items() if k.startswith("curve:")},
                {k: v.producer_run_id for k, v in m.items()},
            ))
        summary = summarize(abl, results, out)
        counts = {"cells": len(cells), "records": sum(len(cell.cfg.evaluate.text_models) for cell in cells)}
        return counts, grid_metrics(summary)

    # inputs: what the summary reads, named by cell, so MLflow shows where each came from
    inputs = {f"{cell.name}/{k}": v for cell, m in zip(cells, stage_ms, strict=True) for k, v in m.items()
              if k == "evaluate" or k.startswith(("embed:", "curve:"))}
    return execute(StageInstance("ablation", flow="ablate"), abl, inputs, RUN, ctx, compute,
                   log_files=("cells.json", "summary.json", "table.md", "curves.png", "scaling.png"))


def load_ablation_run(experiment: str, out_dir: str, run_id: str | None = None) -> tuple[str, dict, dict]:
    """(run id, cells.json, summary.json) of an ablation parent run: the latest finished one
    in `experiment` (or `run_id`), read back from MLflow."""
    import json
    import tempfile

    from . import tracking

    c = tracking.client(out_dir)
    if run_id is None:
        exp = c.get_experiment_by_name(experiment)
        if exp is None:
            raise LookupError(f"no MLflow experiment {experiment!r} at {tracking.tracking_uri(out_dir)}")
        runs = c.search_runs([exp.experiment_id], "tags.`platonic.flow` = 'ablate' and attributes.status = 'FINISHED'",
                             order_by=["attributes.start_time DESC"], max_results=1)
        if not runs:
            raise LookupError(f"experiment {experiment!r} has no finished ablation run (run `platonic ablate` first)")
        run_id = runs[0].info.run_id
    with tempfile.TemporaryDirectory() as d:
        try:
            cells = json.loads(open(c.download_artifacts(run_id, "cells.json", d)).read())
            summary = json.loads(open(c.download_artifacts(run_id, "summary.json", d)).read())
        except Exception as e:
            raise LookupError(f"run {run_id} has no ablation outputs (cells.json, summary.json): {e}") from None
    return run_id, cells, summary
