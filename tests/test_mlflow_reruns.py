"""MLflow after a rerun, as a user meets it through the real client (issue 44 items 4, 6): the
logged model's page lists each evaluation once, a different evaluation says how it differs,
a rerun's parent run says what it ran, every run names its Source, and the logged model
carries a license file and a card that say what is known. Reruns happen in a copy of the
session's tiny store (tiny_copy), never in the shared one."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from platonic.core.config import load_config
from platonic.tasks.tracking import client

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


def test_an_identical_re_evaluation_adds_nothing_to_the_model_page(tiny_run, tiny_copy, tmp_path):
    """`--force evaluate` with nothing changed: each model's page still lists each evaluation
    metric once (it listed them twice, both from `evaluate:good`), and the per-layer curve is
    not among them (one unlabeled row per layer); the rerun's run keeps its numbers, its
    per-layer curve at step = layer, and names the run whose metrics the page shows."""
    out = tiny_copy(tmp_path / "out")
    _, first = tiny_run
    c = client(out)
    before = evaluation_runs(c, first)
    again = run_flow(out, force=["evaluate"])
    assert again["evaluate_run_id"] != first["evaluate_run_id"]  # it did run again
    after = evaluation_runs(c, again)
    for name in MODELS:
        model_id = before[name].data.tags["platonic.model_id"]
        page = model_page(c, model_id)
        counts = Counter(key for key, _ in page)
        assert counts["mutual_knn"] == 1 and set(counts.values()) == {1}, counts
        assert "mutual_knn_per_layer" not in counts
        linked = {m.key: m.run_id for m in c.get_logged_model(model_id).metrics if m.key == "mutual_knn"}
        assert linked["mutual_knn"] == before[name].info.run_id
        rerun = after[name]
        assert rerun.data.tags["platonic.model_metrics_run"] == before[name].info.run_id
        assert rerun.data.metrics["mutual_knn"] == pytest.approx(first["models"][name]["mutual_knn"])
        history = sorted(c.get_metric_history(rerun.info.run_id, "mutual_knn_per_layer"), key=lambda m: m.step)
        assert [m.step for m in history] == list(range(len(first["models"][name]["per_layer_best"])))


def test_a_different_evaluation_is_on_the_model_page_named_by_what_differs(tiny_run, tiny_copy, tmp_path):
    """evaluate.k changed: a second evaluation of the same logged models, linked to them,
    and the page tells the two apart by their runs' names (both were `evaluate:good`)."""
    out = tiny_copy(tmp_path / "out")
    _, first = tiny_run
    c = client(out)
    before = evaluation_runs(c, first)
    again = run_flow(out, ["evaluate.k=3"])
    after = evaluation_runs(c, again)
    for name in MODELS:
        model_id = before[name].data.tags["platonic.model_id"]
        shown = sorted(run for key, run in model_page(c, model_id) if key == "mutual_knn")
        assert shown == [f"evaluate:{name}", f"evaluate:{name} evaluate.k=3"]
        assert "platonic.model_metrics_run" not in after[name].data.tags
        assert after[name].data.params["evaluate.k"] == "3"
    # lineage still names the stage by its model
    from platonic.tasks.lineage import trace

    assert trace(after["good"].info.run_id, str(out))["stage"] == "evaluate:good"


def test_a_rerun_parent_says_what_it_ran(tiny_run, tiny_copy, tmp_path):
    """A full run's parent is named after its recipe and time; an all-cached rerun and an
    `--only` rerun say so in their names (they were named like a full run)."""
    out = tiny_copy(tmp_path / "out")
    _, first = tiny_run
    c = client(out)
    full = c.get_run(first["run_id"]).info.run_name
    assert re.fullmatch(r"tiny-\d{8}-\d{6}", full)
    cached = c.get_run(run_flow(out)["run_id"]).info.run_name
    assert re.fullmatch(rf"tiny-\d{{8}}-\d{{6}} \(all {len(first['stages'])} stages cached\)", cached)
    only = c.get_run(run_flow(out, only="evaluate")["run_id"]).info.run_name
    assert re.fullmatch(r"tiny-\d{8}-\d{6} \(only evaluate\)", only)


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


def test_the_logged_model_says_its_license_and_training_data(tiny_run, tmp_path, monkeypatch):
    """LICENSE.txt in the logged model is not MLflow's placeholder ("could not be found for the
    '' repository"): it says no license is declared. The card's header names the license
    (other, linked to that file) and the training data; a from-scratch model has no base_model.
    The card's code loads the folder it names (it said "DIR")."""
    import mlflow

    _, res = tiny_run
    monkeypatch.setenv("MLFLOW_TRACKING_URI", res["tracking_uri"])
    local = Path(mlflow.artifacts.download_artifacts("models:/tiny-good/1", dst_path=tmp_path / "m"))
    text = (local / "LICENSE.txt").read_text()
    assert "No license is declared" in text and "could not be found" not in text
    card = (local / "README.md").read_text()
    header = card.split("---\n")[1]
    assert "license: other" in header and "license_link: LICENSE.txt" in header
    assert "datasets:\n- synthetic-world-seed0" in header and "base_model" not in header
    assert '"DIR"' not in card and 'folder = "path/to/model"  # replace' in card
    assert 'mlflow.pyfunc.load_model("models:/tiny-good/' in card
    info = json.loads((local / "platonic.json").read_text())
    assert info["datasets"] == ["synthetic-world-seed0"]


def test_the_exported_cards_code_runs_as_printed(tiny_run, tmp_path):
    """The export's card: its Python block, run as printed, loads the exported folder and gives
    one vector per text at the evaluation's layer."""
    import numpy as np

    from platonic.core.export import export_pretrained
    from platonic.tasks.lineage import export_provenance, train_artifact

    out, res = tiny_run
    run_id = res["models"]["good"]["train_run_id"]
    folder, mcfg = train_artifact(run_id, str(out))
    dest = tmp_path / "hf"
    export_pretrained(folder, mcfg, dest, export_provenance(run_id, str(out)))
    card = (dest / "README.md").read_text()
    assert (dest / "LICENSE.txt").read_text().startswith("No license is declared")
    (code,) = re.findall(r"```python\n(.*?)```", card, re.S)
    scope: dict = {}
    exec(code, scope)  # noqa: S102 - the card's own example, as a user would paste it
    assert scope["layer"] == res["models"]["good"]["layer_a"]
    assert np.asarray(scope["features"]).shape == (1, scope["model"].config.hidden_size)
