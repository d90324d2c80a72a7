"""`platonic audit`: one stage, so no Prefect flow (its temporary server would take longer to
start than a small audit takes); the same stage contract and MLflow layout as the pipeline:
a parent run per invocation, the audit as its nested stage run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from platonic.core.config import AuditConfig, stable_hash
from platonic.core.stages import FORCE, RUN
from platonic.tasks import tracking
from platonic.tasks.audit import audit
from platonic.tasks.stage import RunContext


def audit_flow(config: dict, force: bool = False) -> dict:
    cfg = AuditConfig.model_validate(config)
    started = time.time()
    out_dir = Path(cfg.out_dir).resolve()
    c = tracking.client(out_dir)
    exp = tracking.experiment_id(c, cfg.experiment, out_dir)
    tags = {"platonic.recipe": cfg.name, "platonic.config_digest": stable_hash(cfg)}
    if commit := tracking.git_commit():
        tags["mlflow.source.git.commit"] = commit
    parent = c.create_run(exp, run_name=f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}", tags=tags).info.run_id
    ctx = RunContext(out_dir, exp, parent, tracking.tracking_uri(out_dir))
    try:
        tracking.log_params(c, parent, tracking.flatten(cfg.model_dump(mode="json")))
        tracking.log_text(c, parent, yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), "config.yaml")
        m = audit(cfg, FORCE if force else RUN, ctx)
        out = ctx.out_dir / "runs" / parent
        out.mkdir(parents=True, exist_ok=True)
        summary = json.loads((m.path / "summary.json").read_text())
        results = {"run_id": parent, "experiment": cfg.experiment, "experiment_id": exp, "tracking_uri": ctx.tracking_uri,
                   "output_dir": str(out), "artifact": m.uri, "audit_run_id": m.producer_run_id,
                   "cache_hit": m.created_at < started, **summary}
        for f in ("summary.md", "matches.parquet"):
            (out / f).write_bytes((m.path / f).read_bytes())
        (out / "results.json").write_text(json.dumps(results, indent=1))
        c.log_artifact(parent, str(out / "results.json"))
        c.log_artifact(parent, str(out / "summary.md"))
        c.set_terminated(parent, "FINISHED")
        return results
    except BaseException:
        c.set_terminated(parent, "FAILED")
        raise

