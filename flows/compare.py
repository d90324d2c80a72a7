"""The comparison table as one Prefect flow: eval sets -> features (every model x set) -> grid.

Every step is cached by content like the pipeline's stages; one MLflow parent run per flow run.
"""

from __future__ import annotations

import json

from prefect import flow

from platonic.core.config import CompareConfig
from platonic.core.stages import RUN
from platonic.tasks.compare import compare, evalset, features

from .common import parent_run


@flow(name="compare", log_prints=True)
def compare_flow(config: dict) -> dict:
    cfg = CompareConfig.model_validate(config)
    with parent_run(cfg.out_dir, cfg.experiment, cfg.name, cfg.model_dump(mode="json"), {"platonic.flow": "compare"}) as ctx:
        c, parent = ctx.client, ctx.parent_run_id
        sets = {name: evalset(cfg, name, RUN, ctx) for name in cfg.eval_sets}
        feats = {}
        for name, m in sets.items():
            for modality, models in (("text", cfg.text_models), ("vision", cfg.vision_models)):
                for model in models:
                    f = features(cfg, model, modality, name, m, RUN, ctx)
                    feats[f.stage] = f
        grid = compare(cfg, feats, {m.stage: m for m in sets.values()}, RUN, ctx)
        out = ctx.out_dir / "runs" / parent
        out.mkdir(parents=True, exist_ok=True)
        scores = json.loads((grid.path / "scores.json").read_text())
        results = {"run_id": parent, "experiment": cfg.experiment, "experiment_id": ctx.experiment_id, "recipe": cfg.name,
                   "tracking_uri": ctx.tracking_uri, "output_dir": str(out), "compare_run_id": grid.producer_run_id,
                   **scores}
        (out / "results.json").write_text(json.dumps(results, indent=1))
        (out / "table.md").write_text((grid.path / "table.md").read_text())
        c.log_artifact(parent, str(out / "results.json"))
        c.log_artifact(parent, str(out / "table.md"))
        return results
