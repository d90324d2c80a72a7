"""MLflow as a user meets it, through the real client on the shared tiny run (issue 34):
a registered model version leads to its run, its training data and its alignment score and
back; every model's runs share one schema (compare view, `search_runs` on `tags.model`);
a cache hit logs no empty child run but stays answerable; the Hugging Face export is
hub-ready (model card, provenance, best layer, no "newly initialized" on reload)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from platonic.core.config import load_config

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"
MODELS = ("good", "ntp", "bad")


def test_a_model_version_leads_to_its_run_data_and_score_and_back(tiny_run):
    out, res = tiny_run
    c = MlflowClient(res["tracking_uri"])
    views_digest = res["stages"]["views"]["digest"][:36]
    for name in MODELS:
        train_run = res["models"][name]["train_run_id"]
        # the registry: one version of `tiny-<model>` per training run, registered from models:/<model_id>
        (version,) = [v for v in c.search_model_versions(f"name = 'tiny-{name}'") if v.run_id == train_run]
        assert version.source.startswith("models:/m-")
        model_id = version.source.removeprefix("models:/")
        # the logged model: READY, logged from the train run, and it names its registered version
        logged = c.get_logged_model(model_id)
        assert logged.source_run_id == train_run and logged.status.to_proto() == 2  # READY
        assert {"name": f"tiny-{name}", "version": str(version.version)} in [
            {**v, "version": str(v["version"])} for v in json.loads(logged.tags["mlflow.modelVersions"])
        ]
        assert logged.params["model.objective"] and logged.tags["model"] == name
        # the train run outputs it, and read the views artifact as its training data
        run = c.get_run(train_run)
        assert [o.model_id for o in run.outputs.model_outputs] == [model_id]
        assert {d.dataset.name: d.dataset.digest for d in run.inputs.dataset_inputs}["views"] == views_digest
        # the model's metrics: its training counts on that data, its alignment score from its evaluation
        metrics = {m.key: m for m in logged.metrics}
        assert metrics["samples"].dataset_digest == views_digest and metrics["samples"].run_id == train_run
        score = metrics["mutual_knn"]
        assert score.value == pytest.approx(res["models"][name]["mutual_knn"])
        assert score.dataset_name == f"embed:{name}"
        assert score.dataset_digest == res["stages"][f"embed:{name}"]["digest"][:36]
        # ...and back: the evaluation run scores this logged model and names its train run
        evaluation = c.get_run(score.run_id)
        assert [i.model_id for i in evaluation.inputs.model_inputs] == [model_id]
        assert evaluation.data.tags["platonic.train_run"] == train_run
        assert evaluation.data.tags["mlflow.parentRunId"] == res["evaluate_run_id"]
        assert c.get_run(res["evaluate_run_id"]).data.tags["mlflow.parentRunId"] == res["run_id"]


def test_every_model_has_one_schema_so_the_three_compare_in_one_table(tiny_run, monkeypatch):
    import mlflow

    out, res = tiny_run
    c = MlflowClient(res["tracking_uri"])
    tiny = load_config(TINY)
    # train runs: the same param keys for every model (`model.*`), not `train.models.<name>.*`
    train = {n: c.get_run(res["models"][n]["train_run_id"]) for n in MODELS}
    keys = {n: set(r.data.params) for n, r in train.items()}
    assert keys["good"] == keys["ntp"] == keys["bad"] and {"seed", "model.steps", "model.objective"} <= keys["good"]
    assert not any(k.startswith("train.models.") for k in keys["good"])
    assert {n: r.data.params["model.objective"] for n, r in train.items()} == {
        "good": "jepa (good views)",
        "ntp": "next-token",
        "bad": "jepa (bad views)",
    }
    assert all(r.data.params["model.steps"] == str(tiny.train.models[n].steps) for n, r in train.items())
    assert {r.data.tags["model"] for r in train.values()} == set(MODELS)
    # evaluation runs: one per model, one table, the numbers results.json holds
    monkeypatch.setenv("MLFLOW_TRACKING_URI", res["tracking_uri"])  # as a user points mlflow at the store
    table = mlflow.search_runs(
        [res["experiment_id"]], filter_string=f"tags.`mlflow.parentRunId` = '{res['evaluate_run_id']}'"
    )
    good = mlflow.search_runs([res["experiment_id"]], filter_string="tags.model = 'good'")
    assert sorted(table["tags.model"]) == sorted(MODELS)
    for _, row in table.iterrows():
        r = res["models"][row["tags.model"]]
        assert row["metrics.mutual_knn"] == pytest.approx(r["mutual_knn"])
        assert (row["metrics.mutual_knn_ci_low"], row["metrics.mutual_knn_ci_high"]) == pytest.approx(tuple(r["ci95"]))
        assert row["metrics.r_at_1_t2i"] == pytest.approx(r["procrustes"]["t2i_R@1"])
        assert row["metrics.residual"] == pytest.approx(r["procrustes"]["heldout_residual"])
        assert row["metrics.fraction_of_ceiling"] == pytest.approx(r["fraction_of_ceiling"])
        assert row["metrics.best_layer"] == r["layer_a"]
        assert row["params.model.steps"] == str(tiny.train.models[row["tags.model"]].steps)
        assert row["params.evaluate.k"] == "5"
        history = c.get_metric_history(row["run_id"], "mutual_knn_per_layer")
        assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(r["per_layer_best"])
    # one model's runs across stages, by its tag
    assert {"train:good", "embed:good", "evaluate:good"} <= set(good["tags.mlflow.runName"])
    # the parent keeps its summary metrics
    parent = c.get_run(res["run_id"]).data.metrics
    assert all(parent[f"mutual_knn/{n}"] == pytest.approx(res["models"][n]["mutual_knn"]) for n in MODELS)


@pytest.mark.parametrize("name", ["good", "ntp"])
def test_the_export_is_hub_ready(tiny_run, tmp_path, name):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from platonic.core.export import export_pretrained
    from platonic.core.models import load_checkpoint
    from platonic.core.models.pooling import masked_mean
    from platonic.tasks.lineage import export_provenance, train_artifact

    out, res = tiny_run
    m = res["models"][name]
    folder, mcfg = train_artifact(m["train_run_id"], str(out))
    dest = tmp_path / "hf"
    export_pretrained(folder, mcfg, dest, export_provenance(m["train_run_id"], str(out)))
    # provenance and scores, for a program
    info = json.loads((dest / "platonic.json").read_text())
    parent = MlflowClient(res["tracking_uri"]).get_run(res["run_id"]).data.tags
    assert info["run_id"] == m["train_run_id"] and info["flow_run_id"] == res["run_id"]
    # ...and the same flow run's id in Prefect (the card cited only the MLflow parent run's)
    prefect_id = parent["prefect.flow_run_id"]
    assert info["prefect_flow_run_id"] == prefect_id and len(prefect_id) == 36 and prefect_id != res["run_id"]
    assert info["git_commit"] == parent["mlflow.source.git.commit"] and info["config_digest"] == res["config_digest"]
    assert info["best_layer"] == m["layer_a"] and info["scores"]["mutual_knn"] == pytest.approx(m["mutual_knn"])
    assert info["registered_name"] == f"tiny-{name}" and info["model_id"].startswith("m-")
    # a model card with the metadata header the hub reads
    card = (dest / "README.md").read_text()
    header = card.split("---\n")[1]
    assert "library_name: transformers" in header and "pipeline_tag: " in header and "- platonic" in header
    assert m["train_run_id"] in card and f"{m['mutual_knn']:.4f}" in card
    # what a transformers user reads: every weight loaded (no "newly initialized"), the layer in the config
    model, loading = AutoModel.from_pretrained(dest, output_loading_info=True)
    assert not any(loading[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), loading
    assert model.config.platonic_layer == m["layer_a"] and model.config.platonic_pooling == "masked_mean"
    # ...and the features at that layer are the evaluation's
    tok = AutoTokenizer.from_pretrained(dest)
    batch = tok(["a small red circle", "two blue squares at the top"], padding=True, return_tensors="pt")
    ours = load_checkpoint(folder, mcfg).layer_features(batch["input_ids"], batch["attention_mask"])
    with torch.no_grad():
        hidden = model(**batch, output_hidden_states=True).hidden_states
    torch.testing.assert_close(
        masked_mean(hidden[model.config.platonic_layer], batch["attention_mask"]), ours[m["layer_a"]]
    )
    # ...and a sentence-transformers user gets the last layer's masked mean, as the card says
    from sentence_transformers import SentenceTransformer

    texts = ["a small red circle", "two blue squares at the top"]
    st = SentenceTransformer(str(dest), device="cpu").encode(texts, convert_to_tensor=True)
    torch.testing.assert_close(st, masked_mean(hidden[-1], batch["attention_mask"]), rtol=1e-5, atol=1e-5)
    assert len(hidden) - 1 == info["last_layer"] and ("the evaluation's layer" in card)


@pytest.mark.parametrize("name", ["good", "ntp"])
def test_the_registered_model_predicts_the_exported_models_pooled_features(tiny_run, tmp_path, monkeypatch, name):
    """Issue 44 item 1: pyfunc predict of N texts is (N, D), the card's pooling (masked mean)
    at the card's layer (the evaluation's best): the features of `platonic export`'s folder."""
    import mlflow
    import torch
    from transformers import AutoModel, AutoTokenizer

    from platonic.core.export import export_pretrained
    from platonic.core.models.pooling import masked_mean
    from platonic.tasks.lineage import export_provenance, train_artifact

    out, res = tiny_run
    m = res["models"][name]
    c = MlflowClient(res["tracking_uri"])
    (version,) = [v for v in c.search_model_versions(f"name = 'tiny-{name}'") if v.run_id == m["train_run_id"]]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", res["tracking_uri"])  # as a user points mlflow at the store
    model = mlflow.pyfunc.load_model(f"models:/tiny-{name}/{version.version}")
    texts = ["a small red circle", "two blue squares at the top", "a large green triangle on the left"]
    got = model.predict(texts)
    # the exported folder, read the way its card says
    folder, mcfg = train_artifact(m["train_run_id"], str(out))
    dest = tmp_path / "hf"
    export_pretrained(folder, mcfg, dest, export_provenance(m["train_run_id"], str(out)))
    hf, tok = AutoModel.from_pretrained(dest), AutoTokenizer.from_pretrained(dest)
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = hf(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True
        ).hidden_states[hf.config.platonic_layer]
    want = masked_mean(h, batch["attention_mask"]).numpy()
    assert got.shape == (3, hf.config.hidden_size) == want.shape
    assert hf.config.platonic_layer == m["layer_a"]
    assert abs(got - want).max() < 1e-5
    # the logged model's card and platonic.json name that layer, and it ships an input example
    local = Path(mlflow.artifacts.download_artifacts(f"models:/tiny-{name}/{version.version}", dst_path=tmp_path / "m"))
    assert json.loads((local / "platonic.json").read_text())["best_layer"] == m["layer_a"]
    assert "platonic_layer" in (local / "README.md").read_text()
    example = model.metadata.load_input_example(str(local))
    assert model.predict(example).shape == (len(example), hf.config.hidden_size)
    # the transformers flavor is still there: its pipeline, as docs/architecture.md says
    pipe = mlflow.transformers.load_model(f"models:/tiny-{name}/{version.version}")
    assert pipe.task == ("feature-extraction" if name == "good" else "text-generation")


def test_the_model_page_shows_the_training_curves_final_values(tiny_run):
    """Issue 44 item 4: the logged model is the train run's output at its last logged step,
    so the metrics MLflow links to it from its run are that step's: `train/loss` on the
    model's page is the final loss (it was the first step's), and its training counts stay."""
    out, res = tiny_run
    c = MlflowClient(res["tracking_uri"])
    for name in MODELS:
        train_run = res["models"][name]["train_run_id"]
        run = c.get_run(train_run)
        (output,) = run.outputs.model_outputs
        history = sorted(c.get_metric_history(train_run, "train/loss"), key=lambda m: m.step)
        assert len(history) > 1 and output.step == history[-1].step
        linked = {m.key: m for m in c.get_logged_model(output.model_id).metrics}
        assert linked["train/loss"].value == pytest.approx(history[-1].value) != history[0].value
        assert linked["train/loss"].value == pytest.approx(run.data.metrics["final_loss"])
        assert linked["train/loss"].step == history[-1].step
        assert {"samples", "steps"} <= set(linked)


def test_the_experiment_opens_on_its_training_runs(tiny_run, tmp_path):
    """Issue 44 item 3: MLflow's UI chose the GenAI view (traces, "Evaluations") for the study's
    experiments. It reads the experiment tag `mlflow.experimentKind`: set to model training on
    creation, and on an experiment made before, unless a kind is already chosen. Issue 43: a
    deleted experiment is refused in one line that says how to restore it."""
    from platonic.core.config import ConfigError
    from platonic.tasks.tracking import EXPERIMENT_KIND_TAG, experiment_id

    _, res = tiny_run
    tagged = MlflowClient(res["tracking_uri"]).get_experiment(res["experiment_id"]).tags
    assert tagged[EXPERIMENT_KIND_TAG] == "custom_model_development"
    c = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")  # a store of its own: the shared run's is read-only
    older = c.create_experiment("made-before", artifact_location=(tmp_path / "a").as_uri())
    chosen = c.create_experiment(
        "chosen", artifact_location=(tmp_path / "b").as_uri(), tags={EXPERIMENT_KIND_TAG: "finetuning"}
    )
    assert experiment_id(c, "made-before", tmp_path) == older and experiment_id(c, "chosen", tmp_path) == chosen
    assert c.get_experiment(older).tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    assert c.get_experiment(chosen).tags[EXPERIMENT_KIND_TAG] == "finetuning"
    # an experiment deleted in the UI (its trash) cannot take runs: one line naming the fix
    c.delete_experiment(older)
    with pytest.raises(ConfigError, match=rf"'made-before' \(id {older}\) is deleted; restore it .*--set experiment="):
        experiment_id(c, "made-before", tmp_path)


def test_lineage_accepts_every_run_id_the_model_card_cites(tiny_run, tmp_path):
    """Issue 44 item 2: `platonic lineage` of the card's runs (the model's evaluation run, its
    train run, the flow run), through the CLI; the evaluation run's tree starts at that run
    and goes through its evaluate stage run back to the world."""
    import subprocess
    import sys

    out, res = tiny_run

    def platonic(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "platonic.flows.cli", *args, "--out-dir", str(out)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)

    p = platonic("export", res["models"]["good"]["train_run_id"], str(tmp_path / "hf"))
    assert p.returncode == 0, p.stderr[-2000:]
    card = (tmp_path / "hf" / "README.md").read_text()
    cited = dict(
        line.strip("| ").split(" | ") for line in card.splitlines() if line.startswith("| ") and "_id |" in line
    )
    cited = {k: v.strip("`") for k, v in cited.items() if k in ("run_id", "evaluation_run_id", "flow_run_id")}
    assert set(cited) == {"run_id", "evaluation_run_id", "flow_run_id"}

    def stages(n):
        yield n["stage"]
        for u in n.get("upstream", []):
            yield from stages(u)

    for field, run_id in cited.items():
        p = platonic("lineage", run_id, "--json")
        assert p.returncode == 0, (field, p.stderr[-2000:])
        tree = json.loads(p.stdout)
        assert tree["run_id"] == run_id or field == "flow_run_id"
        assert {"world", "train:good"} <= set(stages(tree)), field
    p = platonic("lineage", cited["evaluation_run_id"], "--json")
    tree = json.loads(p.stdout)
    assert tree["stage"] == "evaluate:good" and tree["config"]["evaluate.k"] == "5"
    assert [u["run_id"] for u in tree["upstream"]] == [res["evaluate_run_id"]]
    p = platonic("lineage", cited["evaluation_run_id"])  # the tree as text
    assert p.returncode == 0 and "evaluate:good" in p.stdout and "evaluate " in p.stdout


@pytest.mark.parametrize("env", [None, "sqlite:////elsewhere/mlflow.db"])
def test_model_logging_leaves_the_tracking_uri_and_its_variable_as_they_were(env, monkeypatch, tmp_path):
    """mlflow.set_tracking_uri writes MLFLOW_TRACKING_URI (and deletes it when set back to
    None): the served stack's variable must survive a model being logged."""
    import os

    import mlflow

    from platonic.tasks import tracking

    if env is None:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    else:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", env)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with tracking._fluent_store(store):
        assert mlflow.get_tracking_uri() == store
    assert os.environ.get("MLFLOW_TRACKING_URI") == env
