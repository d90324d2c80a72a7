"""MLflow after a rerun, as a user meets it through the real client (issue 44 items 4, 6): the
logged model's page lists each evaluation once, a different evaluation says how it differs,
a rerun's parent run says what it ran, every run names its Source, and the logged model
carries a license file and a card that say what is known. Reruns happen in a copy of the
session's tiny store (tiny_copy), never in the shared one."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from platonic.core.config import load_config

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"
MODELS = ("good", "ntp", "bad")


def run_flow(out_dir: Path, sets: list[str] = (), **kw) -> dict:
    from platonic.flows.pipeline import pipeline

    cfg = load_config(TINY, [f"out_dir={out_dir}", *sets])
    return pipeline(cfg.model_dump(mode="json"), **kw)


def evaluation_runs(c: MlflowClient, res: dict) -> dict[str, object]:
    """model -> its evaluation run under this flow run's evaluate stage run."""
    exp = c.get_run(res["run_id"]).info.experiment_id
    kids = c.search_runs([exp], f"tags.`mlflow.parentRunId` = '{res['evaluate_run_id']}'")
    return {r.data.tags["model"]: r for r in kids}


def model_page(c: MlflowClient, model_id: str) -> list[tuple[str, str]]:
    """The logged model's metrics as its page lists them: (metric, the run's name), evaluations only."""
    logged = c.get_logged_model(model_id)
    return [(m.key, c.get_run(m.run_id).info.run_name) for m in logged.metrics if m.run_id != logged.source_run_id]


def test_every_run_names_its_source(tiny_run):
    """MLflow's runs table shows a Source for the parent, stage and evaluation runs: the
    `mlflow.source.name` / `mlflow.source.type` tags (empty for runs made through a client)."""
    _, res = tiny_run
    c = MlflowClient(res["tracking_uri"])
    kids = c.search_runs([res["experiment_id"]], f"tags.`mlflow.parentRunId` = '{res['run_id']}'")
    evals = c.search_runs([res["experiment_id"]], f"tags.`mlflow.parentRunId` = '{res['evaluate_run_id']}'")
    assert len(kids) == len(res["stages"]) and len(evals) == len(MODELS)
    for run in [c.get_run(res["run_id"]), *kids, *evals]:
        tags = run.data.tags
        assert (tags.get("mlflow.source.name"), tags.get("mlflow.source.type")) == ("platonic pipeline", "LOCAL")
        assert tags.get("mlflow.source.git.commit") == c.get_run(res["run_id"]).data.tags.get(
            "mlflow.source.git.commit"
        )
