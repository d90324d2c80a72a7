"""The ablation grid as one Prefect flow: every cell is the pipeline on a derived recipe.

    platonic ablate configs/table7.yaml [--quick] [--set seeds=[0,1,2,3]] [--base-set world.seed=1]

Cells run one after the other (2 CPU cores train one model at a time best); stages shared by
cells are content-addressed, so each is computed once and logged once per flow run. The
summary stage (`ablation`) reads every cell's artifacts; its table, plots and cells.json
(every score with the MLflow runs behind it) go to the parent run and to `<out>/runs/<run id>/`.
"""

from __future__ import annotations

import json

from prefect import flow

from platonic.core.ablation import Cell, grid_metrics
from platonic.core.config import AblationConfig
from platonic.core.contract import StageInstance
from platonic.core.stages.ablation import ABLATE_SPECS, ABLATION_INPUTS
from platonic.core.stages.dag import RUN, plan
from platonic.core.stages.pipeline import instances
from platonic.tasks import tracking
from platonic.tasks.executor import run_instance, run_instances
from platonic.tasks.runs import parent_run, publish, recipe_run_name, run_header

from . import ctrl_c


@flow(name="ablate", flow_run_name=recipe_run_name, log_prints=True)
def ablate(recipe: dict, cells: list[dict]) -> dict:
    abl = AblationConfig.model_validate(recipe)
    grid = [Cell.from_dict(d) for d in cells]
    base = grid[0].cfg
    with (
        ctrl_c.over_prefect(),
        parent_run(
            base.out_dir,
            abl.experiment,
            abl.name,
            {"ablation": recipe, "cells": cells},
            {tracking.FLOW_TAG: "ablate", "platonic.cells": str(len(grid))},
        ) as ctx,
    ):
        # inputs of the summary: what it reads of each cell, named by cell, so MLflow shows
        # where each came from
        inputs, runs = {}, {}
        for i, cell in enumerate(grid):
            print(f"cell {i + 1}/{len(grid)}: {cell.name}")
            done = run_instances(cell.cfg, instances(cell.cfg), plan(cell.cfg), ctx)
            inputs |= {f"{cell.name}/{k}": v for k, v in done.items() if k.startswith(ABLATION_INPUTS)}
            runs[cell.name] = {k: v.producer_run_id for k, v in done.items()}  # every score names its runs
        summary_m = run_instance(
            StageInstance("ablation", flow="ablate"), abl, inputs, RUN, ctx, context={"cells": grid, "runs": runs}
        )
        summary = json.loads((summary_m.path / "summary.json").read_text())
        tracking.log_metrics(ctx.client, ctx.parent_run_id, grid_metrics(summary))
        results = {
            **run_header(ctx, abl.experiment),
            "ablation_run_id": summary_m.producer_run_id,
            "cells": len(grid),
            "summary": summary,
        }
        publish(
            ctx,
            {k: v for k, v in results.items() if k != "summary"},  # the summary: summary.json
            {n: summary_m.path / n for n in ABLATE_SPECS["ablation"].writes},
        )
        return results
