"""What every flow does around its stages: one MLflow parent run per flow run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from prefect import runtime

from platonic.core.config import stable_hash
from platonic.tasks import tracking
from platonic.tasks.stage import RunContext


@contextmanager
def parent_run(out_dir: str, experiment: str, name: str, config: dict, tags: dict[str, str]) -> Iterator[RunContext]:
    """Open the parent run (tags: Prefect flow-run id, git commit, config digest; the config
    as `config.yaml`), yield the context stage tasks log under, and close the run FINISHED,
    or FAILED if the flow raised."""
    out = Path(out_dir).resolve()
    c = tracking.client(out)
    exp = tracking.experiment_id(c, experiment, out)
    tags = {"platonic.recipe": name, "platonic.config_digest": stable_hash(config),
            "prefect.flow_run_id": str(runtime.flow_run.id or ""), **tags}
    if commit := tracking.git_commit():
        tags["mlflow.source.git.commit"] = commit
    run_id = c.create_run(exp, run_name=f"{name}-{time.strftime('%Y%m%d-%H%M%S')}", tags=tags).info.run_id
    try:
        tracking.log_text(c, run_id, yaml.safe_dump(config, sort_keys=False), "config.yaml")
        yield RunContext(out, exp, run_id, tracking.tracking_uri(out))
        c.set_terminated(run_id, "FINISHED")
    except BaseException:
        c.set_terminated(run_id, "FAILED")
        raise
