"""MLflow: where it lives, and the few calls every stage makes.

Default store: SQLite at `<out_dir>/mlflow.db`, artifacts under `<out_dir>/mlartifacts`.
`MLFLOW_TRACKING_URI` (and the S3 variables, for a served stack) override it. All calls go
through an explicit `MlflowClient` with run ids, never the fluent "active run" stack, so
stage tasks may run on any thread or worker. Telemetry is switched off by the app
(`platonic.flows.services`), not here: importing this module changes no environment.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock
from mlflow.entities import Dataset, DatasetInput, InputTag, LoggedModelStatus, Metric, Param, RunTag, ViewType
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from platonic.core.config import ConfigError
from platonic.core.durable import unwritable
from platonic.core.processes import pid_alive

# defined where MLflow is not imported, so the CLI's checks run before it
from .run_ids import probe_server, tracking_uri

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
DIGEST_TAG = "platonic.digest"  # mlflow_digest of the artifact
NOTE_TAG = "mlflow.note.content"  # the run's description in the MLflow UI (markdown)
UPSTREAM_TAG = "platonic.upstream"  # input -> its cache key (JSON)
UPSTREAM_RUNS_TAG = "platonic.upstream_runs"  # input -> the run that produced it (JSON)
# on a flow's parent run, one per stage instance it took from the cache: the run that
# produced that artifact (`platonic.reused.train:good`); a hit logs no child run of its own
REUSED_TAG = "platonic.reused."
# the model a run is about (train, embed and evaluation runs of one model): `tags.model = 'good'`
MODEL_TAG = "model"
TRAIN_RUN_TAG = "platonic.train_run"  # an evaluation run: the train run of its model
MODEL_ID_TAG = "platonic.model_id"  # an evaluation run: the logged model it scores
# an evaluation run that repeats one the logged model already shows (same params, same
# features): the run holding the metrics on the model's page; its own are not linked again
MODEL_METRICS_RUN_TAG = "platonic.model_metrics_run"
# MLflow's runs table reads its Source column from these two tags (the fluent API sets them
# from the script; runs created through a client have neither, and the column was empty)
SOURCE_NAME_TAG = "mlflow.source.name"
SOURCE_TYPE_TAG = "mlflow.source.type"
# the process that owns a run while it is RUNNING: a later run on the same host marks the
# run KILLED once that process is gone (a crash or kill -9 never closes its runs)
HOST_TAG = "platonic.host"
PID_TAG = "platonic.pid"
PID_START_TAG = "platonic.pid_start"  # the process's start time (Linux): a reused pid is not the owner


_ready: set[str] = set()  # stores this process has opened (MLflow caches the store per URI)


def client(out_dir: str | Path) -> MlflowClient:
    """A client of out_dir's store (or MLFLOW_TRACKING_URI's), the store opened safely."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    uri = tracking_uri(out_dir)
    if uri not in _ready:
        _open_store(uri)
        _ready.add(uri)
    return MlflowClient(tracking_uri=uri)


def _open_store(uri: str) -> None:
    """Open a SQLite store once per process, under a file lock beside the database: MLflow
    creates and migrates a fresh database on first open, and two processes migrating at once
    break it for good (`table _alembic_tmp_metrics already exists`). Under the lock, a
    migration a crash interrupted is finished first. A served store migrates itself; it must
    answer first (`probe_server`)."""
    probe_server(uri)
    if not uri.startswith("sqlite:///"):
        return
    db = Path(uri.removeprefix("sqlite:///"))
    if db.is_file() and any(unwritable(p) for p in (db.parent, f"{db}.lock", db)):
        # a read-only store (a shared results folder, issue 43): read it as it is. Nothing of
        # ours can migrate or relocate it, so the lock that orders those has nothing to order;
        # a write (a run) fails on SQLite's own "readonly database" (`platonic run` refuses first).
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
        return
    with FileLock(f"{db}.lock"):
        if db.is_file():
            _finish_interrupted_migration(uri, db)
            _relocate(db)
        else:
            _new_store(db)
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)  # creates/migrates what is not current


def _empty_store_template() -> Path | None:
    """An empty SQLite store that MLflow itself created and migrated, kept once per MLflow
    version in the user's cache (`$XDG_CACHE_HOME/platonic`, else ~/.cache/platonic): a new
    store is a copy of it instead of a new run of MLflow's ~50 migrations (3.2 s on a 2-core
    VM, at every new out_dir: each demo, each test's store). None where the cache cannot be
    written; then MLflow creates the store as before."""
    import mlflow
    from mlflow.store.db.utils import _get_latest_schema_revision

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "platonic"
    template = cache / f"mlflow-{mlflow.__version__}-empty.db"
    try:
        with closing(sqlite3.connect(f"file:{template}?mode=ro", uri=True)) as con:
            (revision,) = con.execute("select version_num from alembic_version").fetchone()
        if revision == _get_latest_schema_revision():
            return template
    except (sqlite3.Error, TypeError, ValueError):
        pass  # none yet, or not whole: made again below
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as scratch:
            made = Path(scratch) / "empty.db"
            MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments(max_results=1)  # created, migrated
            os.replace(made, template)  # whole or absent, for a process making it at the same time
        return template
    except OSError:
        return None


def _new_store(db: Path) -> None:
    """A new store at `db` (under its lock): a copy of the empty template, with what the copy
    carries of where the template was made set as MLflow sets it for a store opened here: the
    Default experiment's artifact location (`mlruns/0` under the working folder) and times."""
    template = _empty_store_template()
    if template is None:
        return
    staged = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    try:
        staged.write_bytes(template.read_bytes())
        now = int(time.time() * 1000)
        with closing(sqlite3.connect(staged)) as con, con:
            con.execute(
                "update experiments set artifact_location = ?, creation_time = ?, last_update_time = ? "
                "where experiment_id = 0",
                (os.path.abspath(os.path.join("mlruns", "0")), now, now),
            )
        os.replace(staged, db)
    finally:
        staged.unlink(missing_ok=True)


def _relocate(db: Path) -> None:
    """An out_dir copied or moved elsewhere: the store's artifact locations (experiments,
    runs, logged models) still name the old out_dir's `mlartifacts`. Point those under it at
    this out_dir's, so new artifacts land in the copy and old ones are read from it."""
    here = (db.parent / "mlartifacts").as_uri()
    with closing(sqlite3.connect(db)) as con, con:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
        if "experiments" not in tables:
            return
        old = {
            loc.split("/mlartifacts")[0] + "/mlartifacts"
            for (loc,) in con.execute("select artifact_location from experiments")
            if loc and loc.startswith("file://") and "/mlartifacts" in loc
        } - {here}
        columns = {"experiments": "artifact_location", "runs": "artifact_uri", "logged_models": "artifact_location"}
        for prefix in old:
            for table, col in columns.items():
                if table in tables:
                    con.execute(
                        f"update {table} set {col} = ? || substr({col}, ?) where substr({col}, 1, ?) = ?",
                        (here, len(prefix) + 1, len(prefix), prefix),
                    )


def _finish_interrupted_migration(uri: str, db: Path) -> None:
    """A migration step on SQLite copies a table into `_alembic_tmp_<table>`, drops the
    original and renames the copy; a crash in between leaves the copy, and every later
    migration stops on it. While the original is still there the copy is a leftover: drop
    it and migrate to the latest schema (holding the store's lock)."""
    with closing(sqlite3.connect(db)) as con, con:
        names = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
        leftovers = sorted(n for n in names if n.startswith("_alembic_tmp_"))
        if not leftovers:
            return
        lost = [n for n in leftovers if n.removeprefix("_alembic_tmp_") not in names]
        if lost:
            raise RuntimeError(
                f"{db}: an interrupted MLflow migration left {', '.join(lost)} without its original table; "
                "restore the database from a backup (or move it away to start a new store)"
            )
        for n in leftovers:
            con.execute(f'DROP TABLE "{n}"')
    import sqlalchemy
    from mlflow.store.db.utils import _get_latest_schema_revision, _get_schema_version, _upgrade_db

    engine = sqlalchemy.create_engine(uri)
    try:
        if _get_schema_version(engine) != _get_latest_schema_revision():
            _upgrade_db(engine)
    finally:
        engine.dispose()


# what MLflow's UI (3.x) reads to choose an experiment's view; without it, it infers one and
# opened the study's experiments on GenAI traces and "Evaluations" instead of their runs
EXPERIMENT_KIND_TAG, TRAINING_KIND = "mlflow.experimentKind", "custom_model_development"


def experiment_id(c: MlflowClient, name: str, out_dir: str | Path) -> str:
    """The experiment's id, created (its artifacts under the store) if new; tagged as model
    training unless it already names a kind (a kind chosen in the UI is kept)."""
    exp = c.get_experiment_by_name(name)
    if exp is not None and exp.lifecycle_stage == "deleted":  # in the UI's trash: runs cannot be logged to it
        raise ConfigError(
            f"MLflow experiment {name!r} (id {exp.experiment_id}) is deleted; restore it "
            f"(mlflow experiments restore --experiment-id {exp.experiment_id}, tracking URI {c.tracking_uri}) "
            "or log to another: --set experiment=NAME"
        )
    if exp is not None:
        if EXPERIMENT_KIND_TAG not in exp.tags:  # made before the tag was set
            c.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)
        return exp.experiment_id
    location = None
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        location = (Path(out_dir).resolve() / "mlartifacts").as_uri()
    try:
        return c.create_experiment(name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: TRAINING_KIND})
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


def log_metrics(
    c: MlflowClient,
    run_id: str,
    metrics: dict[str, float],
    step: int = 0,
    model_id: str | None = None,
    dataset: tuple[str, str] | None = None,
) -> None:
    """Numeric values as metrics at `step`; with `model_id`, linked to that logged model (its
    page lists them), with `dataset` (name, MLflow digest), to the data they were measured on."""
    ts = int(time.time() * 1000)
    name, digest = dataset or (None, None)
    items = [
        Metric(k, float(v), ts, step, dataset_name=name, dataset_digest=digest, model_id=model_id)
        for k, v in metrics.items()
        if isinstance(v, (int, float))
    ]
    for s in range(0, len(items), 500):
        c.log_batch(run_id, metrics=items[s : s + 500])


def set_tags(c: MlflowClient, run_id: str, tags: dict[str, str]) -> None:
    c.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])


def mlflow_digest(digest: str) -> str:
    """An artifact digest as MLflow holds it: a dataset digest takes 36 characters, so every
    digest MLflow sees (dataset inputs, the `platonic.digest` tag) is the sha256's first 36
    hex digits, and `tags.platonic.digest = '<a dataset's digest>'` finds its producer."""
    return digest[:36]


def run_link(experiment_id: str, run_id: str) -> str:
    """A markdown link to a run that the MLflow UI follows (in a run's description)."""
    return f"[{run_id[:8]}](#/experiments/{experiment_id}/runs/{run_id})"


def log_input(c: MlflowClient, run_id: str, name: str, digest: str, uri: str, schema: dict, counts: dict) -> None:
    """An upstream artifact as an MLflow dataset input: searchable by `datasets.digest`."""
    ds = Dataset(
        name=name,
        digest=mlflow_digest(digest),
        source_type="local" if "://" not in uri else uri.split("://")[0],
        source=json.dumps({"uri": uri}),
        schema=json.dumps(schema)[:60000],
        profile=json.dumps(counts),
    )
    inputs = [DatasetInput(ds, tags=[InputTag("mlflow.data.context", "upstream")])]
    try:
        with _inputs_lock:
            c.log_inputs(run_id, datasets=inputs)
    except MlflowException as e:
        # MLflow's SQL store looks a dataset up, then inserts it: a run in another process (or a
        # stage beside a training) inserting the same one in between loses the insert. Once more
        # finds the row
        if not _lost_dataset_insert(e):
            raise
        c.log_inputs(run_id, datasets=inputs)


# stages beside trainings (train.parallel) log the same upstream (`world`) at the same time
_inputs_lock = threading.Lock()


def _lost_dataset_insert(e: Exception) -> bool:
    """The unique-key error of a dataset row another writer inserted first (SQLite, Postgres)."""
    text = str(e)
    return "datasets" in text and ("UNIQUE constraint failed" in text or "duplicate key" in text)


def log_text(c: MlflowClient, run_id: str, text: str, artifact_file: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / Path(artifact_file).name
        p.write_text(text)
        sub = str(Path(artifact_file).parent) if Path(artifact_file).parent != Path(".") else None
        c.log_artifact(run_id, str(p), sub)


def source_tags(flow: str) -> dict[str, str]:
    """The Source column of MLflow's runs table: the command that made the run
    (`platonic pipeline`). The UI shows a LOCAL source's name after its last `/`, so the
    name holds none (a script's path would show only its file name)."""
    return {SOURCE_NAME_TAG: f"platonic {flow}".replace("/", " "), SOURCE_TYPE_TAG: "LOCAL"}


def owner_tags() -> dict[str, str]:
    """Tags naming this process as a run's owner (HOST_TAG, PID_TAG, PID_START_TAG)."""
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    if (start := _process_start(os.getpid())) is not None:
        tags[PID_START_TAG] = start
    return tags


def _process_start(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (Linux), None where unknown."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_alive(tags: dict[str, str]) -> bool:
    """Whether the process named by a run's owner tags (on this host) is still running."""
    pid = int(tags[PID_TAG])
    if not pid_alive(pid):
        return False
    start = tags.get(PID_START_TAG)
    return start is None or _process_start(pid) in (start, None)


def mark_killed_runs(c: MlflowClient) -> list[str]:
    """Runs left RUNNING by a process of this host that is gone (a crash, kill -9) are set
    KILLED; returns their ids. Runs of other hosts, of live processes and runs without owner
    tags (older ones) are left alone."""
    host = socket.gethostname()
    experiments = [e.experiment_id for e in c.search_experiments(view_type=ViewType.ALL)]
    stale, token = [], None
    while experiments:  # every page first: terminating runs while paging would shift the pages
        page = c.search_runs(
            experiments,
            f"attributes.status = 'RUNNING' and tags.`{HOST_TAG}` = '{host}'",
            run_view_type=ViewType.ALL,
            max_results=1000,
            page_token=token,
        )
        stale += [r.info.run_id for r in page if PID_TAG in r.data.tags and not _owner_alive(r.data.tags)]
        token = page.token
        if not token:
            break
    for run_id in stale:
        c.set_terminated(run_id, "KILLED")
    return stale


def end_status(error: BaseException) -> str:
    """The status a run ends in when `error` stops it: KILLED for a stop the user asked for
    (Ctrl-C: KeyboardInterrupt, `platonic.core.interrupt.Interrupted`), FAILED otherwise."""
    return "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED"


def git_commit() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


@contextmanager
def no_model_card_warnings():
    """mlflow.transformers looks up a hub model card and license for every model it saves and
    warns when there is none: ours are trained here and have neither, so the two warnings
    per trained model only cut through the progress bars. Errors still show."""
    logger = logging.getLogger("mlflow.transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def reused_tag(instance: str) -> str:
    """The parent-run tag naming the producer of a stage instance the flow took from the
    cache (tag keys take no `@`: `features:qwen@wit` -> `platonic.reused.features:qwen/wit`)."""
    return REUSED_TAG + instance.replace("@", "/")


def model_params(mcfg: Any) -> dict[str, str]:
    """A model's config as MLflow params under `model.*` (the same keys for every model, so
    MLflow's compare view lines good, next-token and bad up), plus `model.objective`."""
    plain = mcfg.model_dump(mode="json") if hasattr(mcfg, "model_dump") else dict(mcfg)
    objective = "next-token" if plain.get("kind") == "causal_lm" else f"jepa ({plain.get('views')} views)"
    return flatten({"model": {**plain, "objective": objective}})


_fluent_lock = threading.Lock()


@contextmanager
def _fluent_store(uri: str) -> Iterator[None]:
    """MLflow's model calls (`log_model`, `register_model`) and its SQL model registry read
    the process-wide tracking URI, not a client's: point it at this store while they run
    (one at a time), then put back both the URI and `MLFLOW_TRACKING_URI`, which
    `mlflow.set_tracking_uri` also writes (or deletes, when set back to None)."""
    import mlflow.tracking._tracking_service.utils as fluent

    with _fluent_lock:
        before, env = fluent._tracking_uri, os.environ.get("MLFLOW_TRACKING_URI")
        fluent.set_tracking_uri(uri)
        try:
            yield
        finally:
            fluent.set_tracking_uri(before)
            if env is None:
                os.environ.pop("MLFLOW_TRACKING_URI", None)
            else:
                os.environ["MLFLOW_TRACKING_URI"] = env


def log_trained_model(
    c: MlflowClient, run_id: str, experiment_id: str, train_dir: Path, mcfg: Any, registered_name: str, model: str
) -> str:
    """A trained text encoder as an MLflow 3 logged model of its train run, the way MLflow
    logs one: `mlflow.transformers.log_model(name=..., run_id=...)` (the transformers flavor:
    save_pretrained model + tokenizer; `mlflow.transformers.load_model`, or AutoModel on its
    `model/` folder), through `Model.log` with tasks/encoder_model.py as the flavor module so
    that its pyfunc predicts pooled features; plus platonic.json, the projector, a signature
    and an input example. It is the run's output at the run's last step (that step's metrics
    are linked to it: the final `train/loss`). Then `mlflow.register_model("models:/<model_id>",
    registered_name)` (one version per run; the logged model's page shows it). The logged
    model is created first with the client, in the run's experiment (the fluent call would
    put it in the default one outside an active run). Returns its id."""
    import mlflow
    from mlflow.models import Model

    from platonic.core.export import pretrained_parts

    from . import encoder_model

    # this runs in a training's thread, beside the flow's other stages: pretrained_parts and
    # the flavor's save_model import transformers through import_model_stack (model_stack.py)
    net, tok, info, tensors = pretrained_parts(train_dir, mcfg)
    logged = c.create_logged_model(
        experiment_id,
        name=registered_name,
        source_run_id=run_id,
        params={k: v[:250] for k, v in model_params(mcfg).items()},
        tags={MODEL_TAG: model},
        model_type="text-encoder",
    )
    with _fluent_store(c.tracking_uri), no_model_card_warnings():
        try:
            Model.log(  # mlflow.transformers.log_model, with the pyfunc the card describes (encoder_model)
                artifact_path=None,  # deprecated for `name`, but still a positional parameter
                name=registered_name,
                flavor=encoder_model,
                transformers_model={"model": net, "tokenizer": tok},
                task="feature-extraction" if mcfg.kind == "text_jepa" else "text-generation",
                signature=encoder_model.signature(net.config.hidden_size),
                input_example=encoder_model.INPUT_EXAMPLE,
                pip_requirements=["torch", "transformers", "safetensors"],  # not inferred: it would ask torchvision
                extras=({**info, "run_id": run_id, "model_id": logged.model_id}, tensors),
                run_id=run_id,
                model_id=logged.model_id,
                step=last_step(c, run_id),
            )
        except Exception:
            c.finalize_logged_model(logged.model_id, LoggedModelStatus.FAILED)
            raise
        mlflow.register_model(f"models:/{logged.model_id}", registered_name)
    return logged.model_id


def last_step(c: MlflowClient, run_id: str) -> int:
    """The last step a run logged a metric at (its training curve's end; 0 without one).
    A model logged at step S is the run's output at S, and MLflow links the run's metrics
    of step S to it: logged at 0 (the default), the model's page showed the loss of the
    first step, not of the trained model."""
    keys = c.get_run(run_id).data.metrics
    return max((m.step for k in keys for m in c.get_metric_history(run_id, k)), default=0)


def trained_model_id(train_run: Any) -> str | None:
    """The logged model a train run (an MLflow `Run`) output (its latest), None if it logged none."""
    outputs = train_run.outputs
    models = sorted(outputs.model_outputs if outputs else [], key=lambda o: o.step)
    return models[-1].model_id if models else None


def log_model_evaluations(
    c: MlflowClient,
    experiment_id: str,
    evaluate_run_id: str,
    evaluate_params: dict[str, str],
    scores: dict[str, dict[str, Any]],
    train_runs: dict[str, str | None],
    datasets: dict[str, tuple[str, Any]],
    run_tags: dict[str, str] | None = None,
) -> dict[str, str]:
    """One evaluation run per model, nested under the evaluate stage run, all with one schema:
    tag `model`, params `model.*` (from the model's train run) + the evaluation's, metrics
    `mutual_knn`, `mutual_knn_ci_low/high`, `r_at_1_t2i`, `residual`, `fraction_of_ceiling`,
    ... and `mutual_knn_per_layer` (step = text layer). The summary metrics are linked to the
    model's logged model (`model_id`) and to the features they were measured on (`datasets`:
    model -> (input name, its manifest), also the run's dataset input); the logged model is
    the run's model input. The per-layer curve stays on the run: the model's page lists
    metrics by name without their step, so it showed one unlabeled row per layer.

    A rerun of an evaluation the model already shows (same params, same features: a
    `--force evaluate`) links nothing again, or the model's page listed every metric twice;
    it is tagged with the run that holds them (MODEL_METRICS_RUN_TAG). A different evaluation
    of the same model is linked too, and its run name says how it differs
    (`evaluate:good evaluate.k=3`), since the page names each metric's run. `run_tags`: tags
    every run of the flow carries (its Source). Returns model -> run id."""
    from mlflow.entities import LoggedModelInput

    runs = {}
    for m, s in scores.items():
        train_run = train_runs.get(m)
        train = c.get_run(train_run) if train_run else None
        model_id = trained_model_id(train) if train else None
        seen = None
        if (ds := datasets.get(m)) is not None:
            seen = (ds[0], mlflow_digest(ds[1].digest))
        params = {k: v for k, v in (train.data.params if train else {}).items() if k.startswith("model.")}
        params = {**params, **evaluate_params}
        same, differs = _linked_evaluations(c, model_id, params, seen) if model_id else (None, [])
        links = f"Model `{m}`: train run {run_link(experiment_id, train_run)}" if train_run else f"Model `{m}`"
        note = f"{links}; evaluate run {run_link(experiment_id, evaluate_run_id)}."
        if same:
            note += f" Repeats run {run_link(experiment_id, same)}, whose metrics the logged model shows."
        tags = {
            **(run_tags or {}),
            PARENT_TAG: evaluate_run_id,
            MODEL_TAG: m,
            NOTE_TAG: note,
            **({TRAIN_RUN_TAG: train_run} if train_run else {}),
            **({MODEL_ID_TAG: model_id} if model_id else {}),
            **({MODEL_METRICS_RUN_TAG: same} if same else {}),
        }
        said = [f"{k}={params[k]}" for k in differs if k in params]
        if "dataset" in differs and seen:  # other features of the same model: which ones
            said.append(f"on {seen[0]}@{seen[1][:8]}")
        name = " ".join([f"evaluate:{m}", *said])[:250]
        rid = c.create_run(experiment_id, run_name=name, tags=tags).info.run_id
        log_params(c, rid, params)
        if ds is not None:
            log_input(c, rid, ds[0], ds[1].digest, ds[1].uri, ds[1].schema, ds[1].counts)
        if model_id:
            c.log_inputs(rid, models=[LoggedModelInput(model_id)])
        log_metrics(c, rid, s["metrics"], model_id=None if same else model_id, dataset=seen)
        for layer, v in enumerate(s.get("per_layer", [])):
            log_metrics(c, rid, {"mutual_knn_per_layer": v}, step=layer, dataset=seen)
        c.set_terminated(rid, "FINISHED")
        runs[m] = rid
    return runs


def _linked_evaluations(
    c: MlflowClient, model_id: str, params: dict[str, str], dataset: tuple[str, str] | None
) -> tuple[str | None, list[str]]:
    """What the logged model's page already shows of its evaluations: (the evaluation run
    whose params and features equal these, or None; else the param keys whose values differ
    from some shown evaluation's, in order, with `dataset` for other features)."""
    logged = c.get_logged_model(model_id)
    shown: dict[str, tuple[str | None, str | None]] = {}
    for metric in logged.metrics or []:  # the train run's counts are linked too: it is no evaluation
        if metric.run_id and metric.run_id != logged.source_run_id:
            shown.setdefault(metric.run_id, (metric.dataset_name, metric.dataset_digest))
    ours = dataset or (None, None)
    differs: set[str] = set()
    for rid, data in shown.items():
        try:
            theirs = c.get_run(rid).data.params
        except MlflowException:  # a run removed from the store: nothing of it to repeat
            continue
        keys = {k for k in params if theirs.get(k) != params[k]} | ({"dataset"} if data != ours else set())
        if not keys:
            return rid, []
        differs |= keys
    return None, [k for k in params if k in differs] + (["dataset"] if "dataset" in differs else [])
