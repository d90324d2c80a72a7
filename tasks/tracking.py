"""MLflow: where it lives, and the few calls every stage makes.

Default store: SQLite at `<out_dir>/mlflow.db`, artifacts under `<out_dir>/mlartifacts`.
`MLFLOW_TRACKING_URI` (and the S3 variables, for a served stack) override it. All calls go
through an explicit `MlflowClient` with run ids, never the fluent "active run" stack, so
stage tasks may run on any thread or worker. Telemetry is switched off by the app
(`platonic.flows.services`), not here: importing this module changes no environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag
from mlflow.tracking import MlflowClient

# tag names, once (MLflow's own, then ours)
PARENT_TAG = "mlflow.parentRunId"
GIT_COMMIT_TAG = "mlflow.source.git.commit"
PREFECT_FLOW_RUN_TAG = "prefect.flow_run_id"
FLOW_TAG = "platonic.flow"  # pipeline | compare | ablate | audit | ingest
RECIPE_TAG = "platonic.recipe"
CONFIG_DIGEST_TAG = "platonic.config_digest"
STAGE_TAG = "platonic.stage"
INSTANCE_TAG = "platonic.stage_instance"
STAGE_VERSION_TAG = "platonic.stage_version"
CACHE_KEY_TAG = "platonic.cache_key"
CACHE_HIT_TAG = "platonic.cache_hit"
PRODUCER_TAG = "platonic.producer_run_id"
DIGEST_TAG = "platonic.digest"
UPSTREAM_TAG = "platonic.upstream"  # input -> its cache key (JSON)
UPSTREAM_RUNS_TAG = "platonic.upstream_runs"  # input -> the run that produced it (JSON)


def tracking_uri(out_dir: str | Path) -> str:
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{Path(out_dir).resolve() / 'mlflow.db'}"


def client(out_dir: str | Path) -> MlflowClient:
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=tracking_uri(out_dir))


def experiment_id(c: MlflowClient, name: str, out_dir: str | Path) -> str:
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = None
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        location = (Path(out_dir).resolve() / "mlartifacts").as_uri()
    try:
        return c.create_experiment(name, artifact_location=location)
    except Exception:  # created concurrently by another process
        return c.get_experiment_by_name(name).experiment_id


def flatten(d: Any, prefix: str = "") -> dict[str, str]:
    """Nested config -> {"a.b.c": "value"} for MLflow params (values as JSON/str, ≤ 6000 chars)."""
    out: dict[str, str] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    value = d if isinstance(d, str) else json.dumps(d)
    out[prefix.rstrip(".")] = value[:6000]
    return out


def log_params(c: MlflowClient, run_id: str, params: dict[str, str]) -> None:
    items = [Param(k[:250], v) for k, v in params.items()]
    for s in range(0, len(items), 100):
        c.log_batch(run_id, params=items[s : s + 100])


def log_metrics(c: MlflowClient, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    ts = int(time.time() * 1000)
    items = [Metric(k, float(v), ts, step) for k, v in metrics.items() if isinstance(v, (int, float))]
    for s in range(0, len(items), 500):
        c.log_batch(run_id, metrics=items[s : s + 500])


def set_tags(c: MlflowClient, run_id: str, tags: dict[str, str]) -> None:
    c.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])


def log_input(c: MlflowClient, run_id: str, name: str, digest: str, uri: str, schema: dict, counts: dict) -> None:
    """An upstream artifact as an MLflow dataset input: searchable by `datasets.digest`."""
    ds = Dataset(
        name=name,
        digest=digest[:36],
        source_type="local" if "://" not in uri else uri.split("://")[0],
        source=json.dumps({"uri": uri}),
        schema=json.dumps(schema)[:60000],
        profile=json.dumps(counts),
    )
    c.log_inputs(run_id, datasets=[DatasetInput(ds, tags=[InputTag("mlflow.data.context", "upstream")])])


def log_text(c: MlflowClient, run_id: str, text: str, artifact_file: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / Path(artifact_file).name
        p.write_text(text)
        sub = str(Path(artifact_file).parent) if Path(artifact_file).parent != Path(".") else None
        c.log_artifact(run_id, str(p), sub)


def git_commit() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None
