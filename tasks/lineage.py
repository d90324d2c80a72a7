"""Where a number came from: walk MLflow stage runs back to the source.

Each stage run carries `platonic.upstream_runs` (input stage -> the run that produced that
input). A flow's parent run names the producer of each stage it took from the cache
(`platonic.reused.<instance>`; stores written before that hold a light cache-hit child run
pointing at its producer through `platonic.producer_run_id`, read the same way). The walk
starts at an evaluate run (or at a flow's parent run: a pipeline's evaluate stage, an
ablation's summary stage, a caption flow's report, run or reused; or at one model's
evaluation run, nested under its evaluate stage run).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from platonic.core.artifacts import MANIFEST, ArtifactStore, Manifest
from platonic.core.config import ModelConfig

from . import tracking
from .run_ids import LineageError  # defined where MLflow is not imported: the CLI's checks raise it too


def _node(c, run_id: str) -> dict:
    try:
        r = c.get_run(run_id)
    except MlflowException as e:
        raise LineageError(f"no MLflow run {run_id!r} in {c.tracking_uri}") from e
    t = r.data.tags
    # a cache hit's run is light (tags only): its config and inputs are its producer's
    source = r
    if t.get(tracking.CACHE_HIT_TAG) == "true" and t.get(tracking.PRODUCER_TAG):
        try:
            source = c.get_run(t[tracking.PRODUCER_TAG])
        except MlflowException:
            pass  # the producer's run was deleted: the node shows what the hit recorded
    return {
        "stage": t.get(tracking.INSTANCE_TAG, "?"),
        "run_id": run_id,
        "cache_key": t.get(tracking.CACHE_KEY_TAG),
        "digest": t.get(tracking.DIGEST_TAG),
        "cache_hit": t.get(tracking.CACHE_HIT_TAG) == "true",
        "producer_run_id": t.get(tracking.PRODUCER_TAG),
        "config": dict(sorted(source.data.params.items())),
        "inputs": [
            {"name": d.dataset.name, "digest": d.dataset.digest}
            for d in (source.inputs.dataset_inputs if source.inputs else [])
        ],
        "upstream_runs": json.loads(t.get(tracking.UPSTREAM_RUNS_TAG, "{}")),
    }


def trace(run_id: str, out_dir: str) -> dict:
    """A tree: {stage, run_id, cache_key, digest, config, upstream: [...]}."""
    c = tracking.client(out_dir)
    try:
        run = c.get_run(run_id)
    except MlflowException as e:
        raise LineageError(f"no MLflow run {run_id!r} in {c.tracking_uri}") from e
    start_reused = False
    if (scored := _scored_by(c, run)) is not None:
        # a per-model evaluation run (`evaluate:good`, the one a model card cites): its numbers
        # are its evaluate stage run's, so that run is its one upstream
        node = _node(c, run_id)
        # by its model, not its name: a different evaluation's name says how it differs
        node["stage"] = f"evaluate:{run.data.tags.get(tracking.MODEL_TAG, '?')}"
        del node["upstream_runs"]
        return {**node, "upstream": [trace(scored, out_dir)]}
    if tracking.STAGE_TAG not in run.data.tags:
        # a flow's parent run: start from its summary stage (an ablation's `ablation`, whose
        # inputs are every cell; a match's `match`, a caption flow's report), else from its evaluate child
        for stage in ("ablation", "match", "caption_report", "evaluate"):
            kids = c.search_runs(
                [run.info.experiment_id],
                filter_string=(
                    f"tags.`{tracking.PARENT_TAG}` = '{run_id}' and tags.`{tracking.STAGE_TAG}` = '{stage}'"
                ),
            )
            if kids:
                run_id = kids[0].info.run_id
                break
            if reused := next((v for k, v in run.data.tags.items() if _reused_stage(k) == stage), None):
                run_id, start_reused = reused, True  # taken from the cache: its producer's run
                break
        else:
            raise LineageError(f"run {run_id} has no evaluate stage run (was evaluate skipped?)")
    seen: dict[str, dict] = {}

    def walk(rid: str) -> dict:
        node = _node(c, rid)
        if node["cache_hit"] and node["producer_run_id"]:
            node["produced_by"] = node["producer_run_id"]
        elif rid == run_id and start_reused:  # the flow run reused this stage's artifact
            node.update(cache_hit=True, producer_run_id=rid, produced_by=rid)
        if rid in seen:
            return {"stage": node["stage"], "run_id": rid, "see_above": True}
        seen[rid] = node
        node["upstream"] = [walk(u) for u in node.pop("upstream_runs").values() if u]
        return node

    return walk(run_id)


def _scored_by(c: MlflowClient, run) -> str | None:
    """The stage run a run is nested under when it is a per-model run of a stage (one of an
    evaluate stage's evaluation runs), else None (a stage run, a flow's parent run)."""
    t = run.data.tags
    if tracking.STAGE_TAG in t or not (parent := t.get(tracking.PARENT_TAG)):
        return None
    try:
        return parent if tracking.STAGE_TAG in c.get_run(parent).data.tags else None
    except MlflowException:
        return None


def _reused_stage(tag: str) -> str | None:
    """The stage of a parent's `platonic.reused.<instance>` tag (`train:good` -> train)."""
    if not tag.startswith(tracking.REUSED_TAG):
        return None
    return tag.removeprefix(tracking.REUSED_TAG).split(":", 1)[0]


def stage_producers(c, parent_run_id: str) -> dict[str, str]:
    """A flow run's stage instances -> the run that produced each one's artifact: its own
    child runs (executed now) and the runs its `platonic.reused.*` tags name (cache hits).
    The question "which run produced this input" as one call."""
    parent = c.get_run(parent_run_id)
    kids = c.search_runs(
        [parent.info.experiment_id], f"tags.`{tracking.PARENT_TAG}` = '{parent_run_id}'", max_results=5000
    )
    tags = parent.data.tags
    out = {k.removeprefix(tracking.REUSED_TAG).replace("/", "@"): v for k, v in tags.items() if _reused_stage(k)}
    for r in kids:
        if (inst := r.data.tags.get(tracking.INSTANCE_TAG)) and r.data.tags.get(tracking.CACHE_HIT_TAG) != "true":
            out[inst] = r.info.run_id
    return out


def print_lineage(tree: dict) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.tree import Tree

    def label(n: dict) -> str:
        if n.get("see_above"):
            return f"[bold]{n['stage']}[/] run {n['run_id']} (see above)"
        hit = f" cache hit of run {n['produced_by']}" if n.get("produced_by") else ""
        groups: dict[str, list[str]] = {}  # config section -> "field=value" (relative)
        for k, v in n["config"].items():
            parts = k.split(".")
            depth = 3 if k.startswith("train.models.") else 1  # older runs: train.models.<m>.*; now model.*
            root = ".".join(parts[:depth]) if len(parts) > depth else ""
            groups.setdefault(root, []).append(f"{k.removeprefix(root + '.') if root else k}={v}")
        cfg = escape("; ".join(f"{r}: {', '.join(f)}" if r else ", ".join(f) for r, f in groups.items()))
        return (
            f"[bold]{n['stage']}[/]  run {n['run_id']}{hit}\n"
            f"  cache key {n['cache_key']}  digest {(n['digest'] or '')[:16]}\n  config: {cfg}"
        )

    def add(t: Tree, n: dict) -> None:
        sub = t.add(label(n))
        for u in n.get("upstream", []):
            add(sub, u)

    root = Tree(label(tree))
    for u in tree.get("upstream", []):
        add(root, u)
    Console(width=160).print(root)


def train_artifact(run_id: str, out_dir: str) -> tuple[Path, ModelConfig]:
    """The train artifact a train stage run produced (or, for a cache hit, reused) in
    out_dir's store, and the model config it was trained with (from its manifest)."""
    c = tracking.client(out_dir)
    try:
        tags = c.get_run(run_id).data.tags
    except MlflowException as e:
        raise LineageError(f"no MLflow run {run_id!r} in {c.tracking_uri}") from e
    instance = tags.get(tracking.INSTANCE_TAG, "")
    if not instance.startswith("train:"):
        raise LineageError(f"run {run_id} is not a train stage run (it is {instance or 'a flow run'})")
    folder = ArtifactStore.of(out_dir).folder(instance, tags[tracking.CACHE_KEY_TAG])
    if not (folder / MANIFEST).is_file():
        raise LineageError(f"run {run_id}'s artifact is not in this store ({folder})")
    manifest = Manifest.read(folder)
    return folder, ModelConfig.model_validate(manifest.config[f"train.models.{instance.split(':', 1)[1]}"])


def export_provenance(run_id: str, out_dir: str) -> dict:
    """What an exported encoder says about itself, read from MLflow: its train run, the flow
    run that trained it (git commit, recipe, config digest), its logged model and registered
    versions, and its latest evaluation run's scores (`best_layer` among them)."""
    return provenance(tracking.client(out_dir), run_id)


def training_datasets(params: dict[str, str]) -> list[str]:
    """The card's `datasets`: where the flow's corpus came from, from its parent run's params
    (`ingest.source`, `ingest.paths`, `world.seed`). None of them is a hub dataset: each is
    named by its source and files (`wordnet:data.noun`, `synthetic-world-seed0`)."""
    source = params.get("ingest.source", "world")
    if source == "world":
        return [f"synthetic-world-seed{params.get('world.seed', '0')}"]
    try:
        paths = json.loads(params.get("ingest.paths", "[]"))
    except json.JSONDecodeError:
        paths = []
    return [f"{source}:{Path(p).name}" for p in paths] or [source]


def provenance(c: MlflowClient, run_id: str) -> dict:
    """export_provenance on a client: what the export and the logged model's platonic.json say."""
    try:
        run = c.get_run(run_id)
    except MlflowException as e:
        raise LineageError(f"no MLflow run {run_id!r} in {c.tracking_uri}") from e
    t = run.data.tags
    prov: dict = {
        "run_id": run_id,
        "experiment_id": run.info.experiment_id,
        "cache_key": t.get(tracking.CACHE_KEY_TAG),
        "digest": t.get(tracking.DIGEST_TAG),
    }
    if parent_id := t.get(tracking.PARENT_TAG):
        parent = c.get_run(parent_id).data
        pt = parent.tags
        prov["datasets"] = training_datasets(parent.params)
        prov |= {
            "flow_run_id": parent_id,  # the flow's MLflow (parent) run
            "prefect_flow_run_id": pt.get(tracking.PREFECT_FLOW_RUN_TAG) or None,  # the same flow run in Prefect
            "recipe": pt.get(tracking.RECIPE_TAG),
            "config_digest": pt.get(tracking.CONFIG_DIGEST_TAG),
            "git_commit": pt.get(tracking.GIT_COMMIT_TAG),
        }
    if model_id := tracking.trained_model_id(run):
        logged = c.get_logged_model(model_id)
        versions = json.loads(logged.tags.get("mlflow.modelVersions", "[]"))
        prov |= {"model_id": model_id, "registered_name": logged.name, "registered_versions": versions}
    evals = c.search_runs(
        [run.info.experiment_id],
        f"tags.`{tracking.TRAIN_RUN_TAG}` = '{run_id}' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if evals:
        metrics = {k: v for k, v in evals[0].data.metrics.items() if k != "mutual_knn_per_layer"}
        prov |= {"evaluation_run_id": evals[0].info.run_id, "scores": metrics}
        if "best_layer" in metrics:
            prov["best_layer"] = int(metrics["best_layer"])
    return {k: v for k, v in prov.items() if v is not None}


def describe_evaluated_model(c: MlflowClient, train_run_id: str) -> None:
    """After an evaluation of a train run's logged model: its platonic.json gains what the
    export's says (provenance, the latest evaluation's scores, `best_layer`) and a model card
    (README.md, the export's). Its pyfunc reads the layer there when loaded
    (tasks/encoder_model.py), so `predict` pools at the layer the card names. The weights
    are not touched; a later evaluation rewrites both files."""
    import mlflow.artifacts

    from platonic.core.export import model_card, write_extras

    prov = provenance(c, train_run_id)
    if "model_id" not in prov:
        return
    logged = c.get_logged_model(prov["model_id"])
    with tempfile.TemporaryDirectory() as tmp:
        got = mlflow.artifacts.download_artifacts(
            artifact_uri=f"{logged.artifact_location.rstrip('/')}/platonic.json",
            dst_path=tmp,
            tracking_uri=c.tracking_uri,
        )
        info = {**json.loads(Path(got).read_text()), **prov}
        out = Path(tmp) / "card"
        out.mkdir()
        write_extras(out, info, {})
        (out / "README.md").write_text(model_card(info))
        c.log_model_artifacts(prov["model_id"], str(out))
