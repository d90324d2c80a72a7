"""The comparison table as one Prefect flow: eval sets -> features (every model x set) -> grid.

Every step is cached by content like the pipeline's stages; one MLflow parent run per flow run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml
from prefect import flow, runtime

from platonic_core.config import CompareConfig, stable_hash
from platonic_core.stages import RUN
from tasks import tracking
from tasks.compare import compare, evalset, features
from tasks.stage import RunContext


@flow(name="compare", log_prints=True)
def compare_flow(config: dict) -> dict:
    cfg = CompareConfig.model_validate(config)
    out_dir = Path(cfg.out_dir).resolve()
    c = tracking.client(out_dir)
    exp = tracking.experiment_id(c, cfg.experiment, out_dir)
    parent = c.create_run(exp, run_name=f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}", tags={
        "platonic.recipe": cfg.name, "platonic.config_digest": stable_hash(cfg),
        "prefect.flow_run_id": str(runtime.flow_run.id or "")}).info.run_id
    ctx = RunContext(out_dir, exp, parent, tracking.tracking_uri(out_dir))
    try:
        tracking.log_text(c, parent, yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), "config.yaml")
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
        results = {"run_id": parent, "experiment": cfg.experiment, "experiment_id": exp, "recipe": cfg.name,
                   "tracking_uri": ctx.tracking_uri, "output_dir": str(out), "compare_run_id": grid.producer_run_id,
                   **scores}
        (out / "results.json").write_text(json.dumps(results, indent=1))
        (out / "table.md").write_text((grid.path / "table.md").read_text())
        c.log_artifact(parent, str(out / "results.json"))
        c.log_artifact(parent, str(out / "table.md"))
        c.set_terminated(parent, "FINISHED")
        return results
    except BaseException:
        c.set_terminated(parent, "FAILED")
        raise
