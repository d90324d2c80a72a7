"""The ablation grid as one Prefect flow: every cell is the pipeline on a derived recipe.

    platonic ablate configs/table7.yaml [--quick] [--set seeds=[0,1,2,3]] [--base-set world.seed=1]

Cells run one after the other (2 CPU cores train one model at a time best); stages shared by
cells are content-addressed, so each is computed once and logged once per flow run. The
summary stage reads every cell's artifacts; its table, plots and cells.json (every score
with the MLflow runs behind it) go to the parent run and to `<out>/runs/<run id>/`.
"""

from __future__ import annotations

import json

from prefect import flow

from platonic.core.ablation import Cell, grid_metrics
from platonic.core.config import AblationConfig
from platonic.core.stages import plan
from platonic.tasks import tracking
from platonic.tasks.ablation import ablation

from .common import parent_run
from .pipeline import run_stages

OUTPUTS = ("cells.json", "summary.json", "table.md", "curves.png", "scaling.png")


@flow(name="ablate", log_prints=True)
def ablate(recipe: dict, cells: list[dict]) -> dict:
    abl = AblationConfig.model_validate(recipe)
    grid = [Cell.from_dict(d) for d in cells]
    base = grid[0].cfg
    with parent_run(base.out_dir, abl.experiment, abl.name, {"ablation": recipe, "cells": cells},
                    {"platonic.flow": "ablate", "platonic.cells": str(len(grid))}) as ctx:
        stage_ms = []
        for i, cell in enumerate(grid):
            print(f"cell {i + 1}/{len(grid)}: {cell.name}")
            stage_ms.append(run_stages(cell.cfg, plan(cell.cfg), ctx))
        summary_m = ablation(abl, grid, stage_ms, ctx)
        out = ctx.out_dir / "runs" / ctx.parent_run_id
        out.mkdir(parents=True, exist_ok=True)
        for name in OUTPUTS:
            if (summary_m.path / name).exists():
                (out / name).write_bytes((summary_m.path / name).read_bytes())
                ctx.client.log_artifact(ctx.parent_run_id, str(out / name))
        summary = json.loads((out / "summary.json").read_text())
        tracking.log_metrics(ctx.client, ctx.parent_run_id, grid_metrics(summary))
        return {"run_id": ctx.parent_run_id, "experiment": abl.experiment, "experiment_id": ctx.experiment_id,
                "tracking_uri": ctx.tracking_uri, "output_dir": str(out), "ablation_run_id": summary_m.producer_run_id,
                "cells": len(grid), "summary": summary}
