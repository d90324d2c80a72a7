"""The comparison table as one Prefect flow: eval sets -> features (every model x set) -> grid.

Every step is a stage of `platonic.core.stages.compare` (COMPARE_SPECS), cached by content like the
pipeline's; one MLflow parent run per flow run.
"""

from __future__ import annotations

import json

from prefect import flow

from platonic.core.config import CompareConfig
from platonic.core.stages.compare import compare_instances
from platonic.core.stages.dag import RUN
from platonic.tasks import tracking
from platonic.tasks.executor import run_instances
from platonic.tasks.runs import parent_run, publish, recipe_run_name, run_header

from . import ctrl_c


@flow(name="compare", flow_run_name=recipe_run_name, log_prints=True)
def compare_flow(config: dict) -> dict:
    cfg = CompareConfig.model_validate(config)
    plain = cfg.model_dump(mode="json")
    with (
        ctrl_c.over_prefect(),
        parent_run(cfg.out_dir, cfg.experiment, cfg.name, plain, {tracking.FLOW_TAG: "compare"}) as ctx,
    ):
        insts = compare_instances(cfg)
        grid = run_instances(cfg, insts, {i.id: RUN for i in insts}, ctx)["compare"]
        scores = json.loads((grid.path / "scores.json").read_text())
        results = {
            **run_header(ctx, cfg.experiment),
            "recipe": cfg.name,
            "compare_run_id": grid.producer_run_id,
            **scores,
        }
        publish(ctx, results, {"table.md": grid.path / "table.md"})
        return results
