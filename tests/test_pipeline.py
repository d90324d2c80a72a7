"""End to end: the real Prefect flow on the tiny recipe, MLflow on SQLite, real artifacts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from platonic.core.config import load_config
from platonic.core.stages import SPECS

pytestmark = pytest.mark.e2e  # real flows (reruns in a copy of the session's tiny run)

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"


def forbid(monkeypatch, *stages: str, why: str) -> None:
    """Make these stages' bodies fail if they run (a cache hit never calls them)."""

    def boom(call):
        raise AssertionError(f"{why}: {call.inst.id}")

    for name in stages:
        monkeypatch.setitem(SPECS, name, dataclasses.replace(SPECS[name], compute=boom))


def run_flow(out_dir: Path, sets: list[str] = (), **kw) -> dict:
    from platonic.flows.pipeline import pipeline

    cfg = load_config(TINY, [f"out_dir={out_dir}", *sets])
    return pipeline(cfg.model_dump(mode="json"), **kw)


def stage_runs(results: dict) -> dict[str, dict]:
    """stage instance -> tags of its nested MLflow run under this flow run."""
    c = MlflowClient(results["tracking_uri"])
    parent = c.get_run(results["run_id"])
    kids = c.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{results['run_id']}'"
    )
    return {r.data.tags["platonic.stage_instance"]: r for r in kids}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, tiny_run, tiny_copy):
    """(out, results): the session's first run of the tiny recipe (its results; its own
    MLflow runs, read only) and a copy of its store that these tests rerun and change."""
    return tiny_copy(tmp_path_factory.mktemp("pipe") / "out"), tiny_run[1]


def test_full_run_writes_results_and_lineage(first_run):
    out, res = first_run
    assert set(res["models"]) == {"good", "ntp", "bad"}
    for m in res["models"].values():
        assert 0.0 <= m["ci95"][0] <= m["mutual_knn"] <= m["ci95"][1] <= 1.0
        assert m["train_run_id"] and m["embed_run_id"]
    on_disk = json.loads((Path(res["output_dir"]) / "results.json").read_text())
    assert on_disk["models"] == res["models"]
    # every score stands next to the oracles of the world, scored the same way
    assert set(res["ceilings"]) == {"attributes", "learned", "render"}
    assert all(res["chance"] < v <= 1 for v in res["ceilings"].values())
    for m in res["models"].values():
        assert m["fraction_of_ceiling"] == pytest.approx(m["mutual_knn"] / res["ceilings"]["learned"])
        assert len(m["per_layer_best"]) == 2 and max(m["per_layer_best"]) == pytest.approx(m["mutual_knn"])
    runs = stage_runs(res)
    expected = {
        "world",
        "ingest",
        "positives",
        "dedup",
        "views",
        "ceiling",
        "evaluate",
        *(f"{s}:{m}" for s in ("train", "embed") for m in ("image", "good", "ntp", "bad")),
    }
    assert set(runs) == expected
    assert all(r.data.tags["platonic.cache_hit"] == "false" for r in runs.values())
    # inputs are logged as MLflow datasets carrying the upstream digest
    train_good = runs["train:good"]
    digests = {d.dataset.name: d.dataset.digest for d in train_good.inputs.dataset_inputs}
    assert digests["views"] == res["stages"]["views"]["digest"][:36]
    # ...and searchable: which runs read this views artifact?
    c = MlflowClient(res["tracking_uri"])
    readers = c.search_runs([train_good.info.experiment_id], filter_string=f"datasets.digest = '{digests['views']}'")
    assert {r.data.tags["platonic.stage_instance"] for r in readers} == {"train:good", "train:ntp", "train:bad"}
    # ...and its producer, by the same digest (one length everywhere MLflow sees one)
    (producer,) = c.search_runs(
        [train_good.info.experiment_id], filter_string=f"tags.`platonic.digest` = '{digests['views']}'"
    )
    assert producer.info.run_id == res["stages"]["views"]["run_id"]
    # each stage run's description links its inputs' runs (clickable in the MLflow UI)
    note = train_good.data.tags["mlflow.note.content"]
    assert f"#/experiments/{train_good.info.experiment_id}/runs/{res['stages']['views']['run_id']}" in note
    # checkpoints are safetensors, logged to MLflow
    assert "outputs/model.safetensors" in [f.path for f in c.list_artifacts(train_good.info.run_id, "outputs")]
    # lineage walks from the evaluation back to the world
    from platonic.tasks.lineage import trace

    tree = trace(res["run_id"], str(out))
    assert tree["stage"] == "evaluate"

    def stages(n):
        yield n["stage"]
        for u in n.get("upstream", []):
            yield from stages(u)

    assert {"world", "ingest", "positives", "dedup", "views", "train:good", "embed:good"} <= set(stages(tree))


def test_second_run_executes_no_stage_body(first_run, monkeypatch):
    out, res = first_run

    forbid(monkeypatch, *SPECS, why="a stage body ran on a cache hit")
    again = run_flow(out)
    assert again["models"] == res["models"]
    # a hit logs no child run (no clutter); the parent names each reused stage's producer run
    assert stage_runs(again) == {}
    parent = MlflowClient(again["tracking_uri"]).get_run(again["run_id"]).data.tags
    runs = {k.removeprefix("platonic.reused."): v for k, v in parent.items() if k.startswith("platonic.reused.")}
    assert runs == {name: s["run_id"] for name, s in res["stages"].items()}
    # one query answers "which run produced this input", for the rerun and the first run alike
    from platonic.tasks.lineage import stage_producers, trace

    c = MlflowClient(again["tracking_uri"])
    (flow_run,) = c.search_runs(
        [again["experiment_id"]], f"tags.`platonic.reused.train:good` = '{res['models']['good']['train_run_id']}'"
    )
    assert flow_run.info.run_id == again["run_id"]
    assert stage_producers(c, again["run_id"]) == {i: s["run_id"] for i, s in res["stages"].items()}
    assert stage_producers(c, res["run_id"]) == {i: s["run_id"] for i, s in res["stages"].items()}
    # lineage of the rerun starts at the evaluate run it reused
    tree = trace(again["run_id"], str(out))
    assert tree["run_id"] == res["evaluate_run_id"] and tree["produced_by"] == res["evaluate_run_id"]
    assert tree["config"]["evaluate.k"] == "5" and tree["upstream"]
    # Prefect shows the reuse: every stage task run ended Cached; the flow run is named after the recipe
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    flow_run_id = MlflowClient(again["tracking_uri"]).get_run(again["run_id"]).data.tags["prefect.flow_run_id"]
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(flow_run_id)
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    assert flow_run.name.startswith("tiny-")
    assert {t.name: t.state.name for t in task_runs} == {name: "Cached" for name in runs}
    # ...and publishes the results table on the flow run
    (table,) = [a for a in artifacts if a.key == "results"]
    assert table.type == "markdown" and "mutual" in table.data
    # lineage of a rerun reads each hit's config and inputs from its producer
    from platonic.tasks.lineage import trace

    tree = trace(again["run_id"], str(out))
    assert tree["produced_by"] == res["stages"]["evaluate"]["run_id"]
    assert tree["config"]["evaluate.k"] == "5" and tree["inputs"]


def test_changing_one_field_reexecutes_exactly_its_readers(first_run, monkeypatch):
    out, res = first_run

    forbid(monkeypatch, "train", why="trained")
    # evaluate.k is read by the evaluate and ceiling stages only
    r = run_flow(out, ["evaluate.k=3"])
    executed = {n for n, run in stage_runs(r).items() if run.data.tags["platonic.cache_hit"] == "false"}
    assert executed == {"ceiling", "evaluate"}
    assert r["k"] == 3


def test_training_field_reruns_that_model_and_downstream(first_run):
    out, res = first_run
    r = run_flow(out, ["train.models.ntp.steps=4"])
    executed = {n for n, run in stage_runs(r).items() if run.data.tags["platonic.cache_hit"] == "false"}
    assert executed == {"train:ntp", "embed:ntp", "evaluate"}
    assert r["models"]["good"] == {**res["models"]["good"]}


def test_only_evaluate_uses_cache_and_forces_evaluate(first_run):
    out, res = first_run
    r = run_flow(out, only="evaluate")
    runs = stage_runs(r)
    assert set(runs) == {"evaluate"} and runs["evaluate"].data.tags["platonic.cache_hit"] == "false"
    parent = MlflowClient(r["tracking_uri"]).get_run(r["run_id"]).data.tags
    assert parent["platonic.reused.world"] == res["stages"]["world"]["run_id"]  # the others: reused, named there
    assert r["models"] == res["models"]


def test_world_seed_changes_world_and_downstream(first_run):
    out, res = first_run
    r = run_flow(out, ["world.seed=7"])
    assert r["stages"]["world"]["digest"] != res["stages"]["world"]["digest"]
    executed = {n for n, run in stage_runs(r).items() if run.data.tags["platonic.cache_hit"] == "false"}
    assert "world" in executed and "evaluate" in executed


def test_only_without_cache_is_a_clear_error(tmp_path, prefect_harness):
    from platonic.core.contract import UpstreamNotCached

    with pytest.raises(UpstreamNotCached, match="run the pipeline without --only"):
        run_flow(tmp_path, only="evaluate")


# a bad recipe, override or stage name (one `error:` line, exit 2): tests/test_cli_mistakes.py


def test_python_api_runs_a_recipe_as_the_cli_does(first_run):
    from platonic.core.contract import UpstreamNotCached
    from platonic.flows.api import run

    out, res = first_run
    again = run(TINY, sets=[f"out_dir={out}"], only="evaluate")
    assert again["models"]["good"]["mutual_knn"] == res["models"]["good"]["mutual_knn"]
    assert "world" not in stage_runs(again)  # a cache hit: no child run
    assert MlflowClient(again["tracking_uri"]).get_run(again["run_id"]).data.tags["platonic.reused.world"]
    with pytest.raises(UpstreamNotCached, match="build them first: platonic run"):
        run(TINY, sets=[f"out_dir={out / 'empty'}"], only="evaluate")


def test_python_api_takes_the_store_from_any_folder_and_says_which(first_run, tmp_path, monkeypatch, capsys):
    """Issue 34 item 6: from another folder, `run(..., only="evaluate")` looked in that folder's
    .platonic (UpstreamNotCached; without `only`, a silent full retrain). The store is now
    `out_dir=`, else $PLATONIC_OUT_DIR, else the recipe's; each run says which on stderr, and
    the error names the store it looked in."""
    from platonic.core.contract import UpstreamNotCached
    from platonic.flows.api import run

    out, res = first_run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("PLATONIC_OUT_DIR", raising=False)
    with pytest.raises(UpstreamNotCached, match=f"in the store {elsewhere / '.platonic'} "):
        run(TINY, only="evaluate")
    again = run(TINY, only="evaluate", out_dir=out)
    assert again["models"]["good"]["mutual_knn"] == res["models"]["good"]["mutual_knn"]
    assert f"store: {out}\n" in capsys.readouterr().err
    monkeypatch.setenv("PLATONIC_OUT_DIR", str(out))
    again = run(TINY, only="evaluate")
    assert again["models"]["good"]["mutual_knn"] == res["models"]["good"]["mutual_knn"]
    assert f"store: {out}\n" in capsys.readouterr().err
    assert not (elsewhere / ".platonic").exists()


def test_the_prefect_graph_draws_the_stage_dag(first_run):
    """Issue 34 item 4: each stage's task run lists exactly its upstream instances' task runs
    (`platonic stages`' inputs) as `wait_for`, and nothing else as an input, read back through
    Prefect's client: before, Prefect guessed edges by walking the arguments (the run context
    linked every stage to every earlier one; the recipe to the world)."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from platonic.core.stages import instances, upstream

    out, res = first_run
    cfg = load_config(TINY, [f"out_dir={out}"])
    expected = {i.id: set(upstream(cfg, i).values()) for i in instances(cfg)}
    assert sum(map(len, expected.values())) > 20  # a DAG, not dots
    flow_run_id = MlflowClient(res["tracking_uri"]).get_run(res["run_id"]).data.tags["prefect.flow_run_id"]
    with get_client(sync_client=True) as client:
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    name = {t.id: t.name for t in task_runs}
    assert sorted(name.values()) == sorted(expected)
    for t in task_runs:
        edges = {k: {name[r.id] for r in v} for k, v in t.task_inputs.items() if v}
        assert edges == ({"wait_for": expected[t.name]} if expected[t.name] else {}), t.name


def test_export_writes_a_folder_automodel_reloads_with_identical_embeddings(first_run, tmp_path):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from platonic.core.config import load_config as load
    from platonic.core.export import export_pretrained
    from platonic.core.models import load_checkpoint
    from platonic.core.models.pooling import masked_mean
    from platonic.tasks.lineage import train_artifact

    out, res = first_run
    folder, mcfg = train_artifact(res["models"]["good"]["train_run_id"], str(out))
    assert mcfg == load(TINY).train.models["good"]
    export_pretrained(folder, mcfg, tmp_path / "hf")
    model, tok = AutoModel.from_pretrained(tmp_path / "hf"), AutoTokenizer.from_pretrained(tmp_path / "hf")
    batch = tok(["a small red circle", "two blue squares at the top"], padding=True, return_tensors="pt")
    ours = load_checkpoint(folder, mcfg).layer_features(batch["input_ids"], batch["attention_mask"])
    with torch.no_grad():
        theirs = model(**batch, output_hidden_states=True).hidden_states
    for a, h in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, masked_mean(h, batch["attention_mask"]))
    with pytest.raises(ValueError, match="not empty"):
        export_pretrained(folder, mcfg, tmp_path / "hf")


def test_trained_text_encoders_are_logged_and_registered_mlflow_models(first_run):
    from transformers import AutoModel

    out, res = first_run
    c = MlflowClient(res["tracking_uri"])
    exp = c.get_run(res["run_id"]).info.experiment_id
    logged = {m.name: m for m in c.search_logged_models([exp])}
    assert set(logged) == {"tiny-good", "tiny-ntp", "tiny-bad"}  # text models; the image encoder is not one
    for name, m in logged.items():
        train_run = res["models"][name.removeprefix("tiny-")]["train_run_id"]
        assert m.source_run_id == train_run and m.status.to_proto() == 2  # READY
        # one version per training run (a store where a model retrains holds more versions)
        (version,) = [v for v in c.search_model_versions(f"name = '{name}'") if v.run_id == train_run]
        assert m.model_id in version.source
    folder = Path(c.get_logged_model(logged["tiny-good"].model_id).artifact_location.removeprefix("file://"))
    assert (folder / "MLmodel").is_file() and "transformers" in (folder / "MLmodel").read_text()
    assert type(AutoModel.from_pretrained(folder / "model")).__name__ == "BertModel"
