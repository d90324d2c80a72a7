"""The served stack, for real: PostgreSQL, an S3 store, `prefect server` + a process worker,
`mlflow server` (Postgres backend, S3 artifacts proxied), all as processes on loopback
(infra/local_stack.py). Deployed from prefect.yaml, run through the worker, checked through
the MLflow REST API. Not in the default test set (needs PostgreSQL; ~3 min):

    pytest -m stack
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.stack

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "infra"))
import local_stack  # noqa: E402

STAGES = 15  # tiny.yaml: world ingest positives dedup views, train×4, embed×4, ceiling, evaluate


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stack")
    st = local_stack.up(folder)
    try:  # the servers go down even when the deploy fails
        env = {**os.environ, **st.env(), "PLATONIC_REPO": str(REPO), "PREFECT_HOME": str(folder / "prefect-home")}
        p = subprocess.run(
            [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--name", "tiny"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        yield st, env, folder
    finally:
        local_stack.down(folder)


def test_postgres_takes_only_the_generated_password(tmp_path):
    """local_stack's PostgreSQL authenticates (scram-sha-256), never `trust`: without the
    password a loopback client is refused; the password file is its owner's alone."""
    st = local_stack.Stack(tmp_path, pg_port=local_stack.free_port())
    try:
        st.start_postgres()
        assert st.pg_password_file.stat().st_mode & 0o777 == 0o600

        def psql(password: str | None) -> subprocess.CompletedProcess:
            env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
            cmd = [local_stack._bin("psql"), "-h", "127.0.0.1", "-p", str(st.pg_port), "-U", "postgres", "-w"]
            return subprocess.run(
                [*cmd, "-d", "mlflow", "-tAc", "SELECT 1"],
                env={**env, **({"PGPASSWORD": password} if password is not None else {})},
                capture_output=True,
                text=True,
                timeout=60,
            )

        assert psql(None).returncode != 0
        assert psql("wrong").returncode != 0
        ok = psql(st.pg_password_file.read_text().strip())
        assert ok.returncode == 0 and ok.stdout.strip() == "1", ok.stderr
    finally:
        local_stack.down(tmp_path)


def prefect(env, *args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "prefect", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def start_run(env, *sets: str) -> str:
    """`prefect deployment run 'pipeline/tiny'` without waiting: the flow run id."""
    p = prefect(env, "deployment", "run", "pipeline/tiny", "--param", f"sets={json.dumps(list(sets))}")
    assert p.returncode == 0, p.stdout + p.stderr
    return next(line.split("UUID:")[1].strip() for line in p.stdout.splitlines() if "UUID:" in line)


def state_and_message(env, run_id: str) -> tuple[str, str]:
    """A flow run's state type and its message (a crash's or a failure's reason)."""
    r = httpx.get(f"{env['PREFECT_API_URL']}/flow_runs/{run_id}", timeout=10)
    r.raise_for_status()
    state = r.json()["state"]
    return state["type"], state.get("message") or ""


def flow_state(env, run_id: str) -> str:
    return state_and_message(env, run_id)[0]


def wait_state(env, run_id: str, timeout: float = 300) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = flow_state(env, run_id)
        if s in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return s
        time.sleep(1)
    raise AssertionError(f"flow run {run_id} still {s} after {timeout}s")


class Mlflow:
    """The MLflow REST API, as any client would use it."""

    def __init__(self, uri: str):
        self.uri = uri

    def post(self, path: str, body: dict) -> dict:
        r = httpx.post(f"{self.uri}/api/2.0/mlflow/{path}", json=body, timeout=30)
        r.raise_for_status()
        return r.json()

    def get(self, endpoint: str, **params) -> dict:
        r = httpx.get(f"{self.uri}/api/2.0/mlflow/{endpoint}", params=params, timeout=30)
        r.raise_for_status()
        return r.json()

    def runs(self, filter_: str) -> list[dict]:
        r = httpx.get(
            f"{self.uri}/api/2.0/mlflow/experiments/get-by-name",
            params={"experiment_name": "platonic-tiny"},
            timeout=30,
        )
        if r.status_code == 404:  # the first run has not created it yet
            return []
        exp = r.json()["experiment"]["experiment_id"]
        return self.post("runs/search", {"experiment_ids": [exp], "filter": filter_, "max_results": 1000}).get(
            "runs", []
        )

    def parents_of_flow_run(self, flow_run_id: str) -> list[dict]:
        """The flow run's MLflow parent run, or none where it died before opening one."""
        return self.runs(f"tags.`prefect.flow_run_id` = '{flow_run_id}'")

    def parent_of_flow_run(self, flow_run_id: str) -> dict:
        runs = self.parents_of_flow_run(flow_run_id)
        assert len(runs) == 1, runs
        return runs[0]

    def children(self, parent: dict) -> list[dict]:
        return self.runs(f"tags.`mlflow.parentRunId` = '{parent['info']['run_id']}'")


def tags(run: dict) -> dict:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


@pytest.fixture(scope="module")
def submitted(stack) -> dict[str, str]:
    """The flow runs of the three tests below, submitted at once (the worker runs four at a
    time): each test waits for its own, and the tier waits for the slowest of them instead of
    their sum. {name: flow run id}:
    - pipeline: embeddings fan out as Dask task runs inside the worker's flow run
    - refused: a set outside the deployment's allow list
    - concurrent-1, concurrent-2: two seeds into one store at once"""
    _, env, folder = stack
    runs = {
        "pipeline": (f"out_dir={folder / 'out-a'}", "fanout.engine=dask", "fanout.workers=2"),
        "refused": (f"out_dir={folder / 'out-x'}", "services.mlflow_tracking_uri=http://127.0.0.1:9"),
        **{f"concurrent-{s}": (f"out_dir={folder / 'out-b'}", f"seed={s}", f"world.seed={s}") for s in (1, 2)},
    }
    with ThreadPoolExecutor(len(runs)) as pool:
        ids = {name: pool.submit(start_run, env, *sets) for name, sets in runs.items()}
        return {name: i.result() for name, i in ids.items()}


def test_the_pipeline_runs_through_the_worker_and_mlflow_holds_every_run_metric_and_artifact(
    stack, submitted, monkeypatch, tmp_path
):
    st, env, folder = stack
    run_id = submitted["pipeline"]
    assert wait_state(env, run_id) == "COMPLETED"
    ml = Mlflow(env["MLFLOW_TRACKING_URI"])
    parent = ml.parent_of_flow_run(run_id)
    assert parent["info"]["status"] == "FINISHED"
    kids = ml.children(parent)
    by_stage = {tags(k)["platonic.stage_instance"]: k for k in kids}
    assert len(by_stage) == STAGES and all(k["info"]["status"] == "FINISHED" for k in kids), sorted(by_stage)
    train = by_stage["train:good"]
    hist = ml.get("metrics/get-history", run_id=train["info"]["run_id"], metric_key="train/loss")["metrics"]
    assert len(hist) >= 1 and all(m["value"] == m["value"] for m in hist)
    arts = ml.get("artifacts/list", run_id=train["info"]["run_id"], path="outputs")["files"]
    assert "outputs/model.safetensors" in {a["path"] for a in arts}
    # the artifact comes back through the server's proxy, byte for byte, and lives in S3
    r = httpx.get(
        f"{env['MLFLOW_TRACKING_URI']}/get-artifact",
        params={"path": "outputs/model.safetensors", "run_uuid": train["info"]["run_id"]},
        timeout=30,
    )
    r.raise_for_status()
    local = Path(
        json.loads(next((folder / "out-a" / "runs").glob("*/results.json")).read_text())["stages"]["train:good"]["uri"]
    )
    assert r.content == (local / "model.safetensors").read_bytes()
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{st.s3_port}",
        aws_access_key_id="platonic",
        aws_secret_access_key="platonic-secret",
        region_name="us-east-1",
    )
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=local_stack.BUCKET).get("Contents", [])]
    assert any(k.endswith(f"{train['info']['run_id']}/artifacts/outputs/model.safetensors") for k in keys), keys[:5]
    # the registered encoder through the proxy: the evaluation wrote its layer into the model's
    # platonic.json, and its pyfunc pools there, one vector per text (issue 44 item 1)
    import mlflow
    from mlflow.tracking import MlflowClient

    for k, v in env.items():  # the client's credentials, as a user exports them
        if k.startswith(("MLFLOW_", "AWS_")):
            monkeypatch.setenv(k, v)
    res = json.loads(next((folder / "out-a" / "runs").glob("*/results.json")).read_text())
    c = MlflowClient(env["MLFLOW_TRACKING_URI"])
    (version,) = [v for v in c.search_model_versions("name = 'tiny-good'") if v.run_id == train["info"]["run_id"]]
    model = Path(mlflow.artifacts.download_artifacts(f"models:/tiny-good/{version.version}", dst_path=tmp_path))
    assert json.loads((model / "platonic.json").read_text())["best_layer"] == res["models"]["good"]["layer_a"]
    assert mlflow.pyfunc.load_model(str(model)).predict(["a small red circle", "two blue squares"]).shape == (2, 16)


def test_a_deployment_run_refuses_an_override_outside_the_allow_list(stack, submitted):
    """Through the real API and worker: the flow knows it runs for a deployment and refuses a
    set that would redirect tracking (docs/operations.md, what a deployment run accepts)."""
    _, env, folder = stack
    run_id = submitted["refused"]
    assert wait_state(env, run_id) == "FAILED"
    r = httpx.get(f"{env['PREFECT_API_URL']}/flow_runs/{run_id}", timeout=10)
    assert "services.mlflow_tracking_uri" in r.json()["state"]["message"], r.json()["state"]
    assert not (folder / "out-x").exists()  # refused before anything ran


def test_two_concurrent_flow_runs_both_complete_with_nothing_lost(stack, submitted):
    _, env, folder = stack
    ids = [submitted["concurrent-1"], submitted["concurrent-2"]]
    assert [wait_state(env, i) for i in ids] == ["COMPLETED", "COMPLETED"]
    ml = Mlflow(env["MLFLOW_TRACKING_URI"])
    for i in ids:
        kids = ml.children(ml.parent_of_flow_run(i))
        assert len(kids) == STAGES and all(k["info"]["status"] == "FINISHED" for k in kids)
        assert all(tags(k)["platonic.cache_hit"] == "false" for k in kids)  # different seeds: nothing shared
    results = sorted((folder / "out-b" / "runs").glob("*/results.json"))
    assert len(results) == 2 and all(len(json.loads(p.read_text())["models"]) == 3 for p in results)


LOAD_SEEDS = range(10, 18)  # eight runs at once, a world and training seed each


def set_crashed(env, run_id: str, message: str) -> None:
    """What an operator does for a run whose worker died before it could report: mark it
    crashed (the Prefect UI's "Mark as crashed"; the API call it makes)."""
    r = httpx.post(
        f"{env['PREFECT_API_URL']}/flow_runs/{run_id}/set_state",
        json={"state": {"type": "CRASHED", "message": message}, "force": True},
        timeout=10,
    )
    r.raise_for_status()


def test_eight_runs_a_killed_worker_and_a_restarted_mlflow_server_lose_nothing(stack):
    """Issue 43, deliver 3: the served stack under load. Eight pipeline runs of different
    seeds into one store, submitted at once to a worker that runs four at a time; once
    training is under way the worker is killed (SIGKILL to its process group: its flow runs
    die with it) and a new one started; then the MLflow server is restarted. Every run ends
    COMPLETED, or CRASHED/FAILED with its reason and then COMPLETED on resubmission, resuming
    from its finished stages; then two reruns find every stage cached. Nothing is lost: every
    finished run has a FINISHED child run per executed stage with its metrics and its inputs
    (lineage), every committed artifact verifies, and the counts add up:
    submitted = completed + retried, lost = 0. What a killed worker leaves is checked here
    too (docs/operations.md): its runs CRASHED in Prefect, their MLflow parents not FINISHED
    and none left RUNNING in the end, no results written, their finished stages reused by
    the resubmission and the rest run again."""
    from platonic.core.artifacts import Manifest, committed, verify

    st, env, folder = stack
    out = folder / "out-load"
    ml = Mlflow(env["MLFLOW_TRACKING_URI"])
    sets = {s: [f"out_dir={out}", f"seed={s}", f"world.seed={s}"] for s in LOAD_SEEDS}
    attempts = {s: [start_run(env, *sets[s])] for s in LOAD_SEEDS}
    t0 = time.time()

    def until(what: str, done, timeout: float = 600) -> None:
        deadline = time.time() + timeout
        while not done():
            assert time.time() < deadline, f"{what}: not within {timeout} s"
            time.sleep(1)

    # the worker dies while runs train
    def training() -> bool:
        for ids in attempts.values():
            try:
                kids = ml.children(ml.parent_of_flow_run(ids[-1]))
            except AssertionError:  # not started yet
                continue
            if any(tags(k)["platonic.stage"] == "train" for k in kids):
                return True
        return False

    until("training under way", training)
    st.stop("worker")
    time.sleep(3)
    crashed_by_kill, killed_parents = {}, {}  # seed -> what finished; MLflow run id -> its status then
    for s, ids in attempts.items():
        state, _ = state_and_message(env, ids[-1])
        if state in ("RUNNING", "PENDING"):  # its process died with the worker: nothing reported it
            set_crashed(env, ids[-1], "worker killed (SIGKILL)")
            state = "CRASHED"
        if state == "CRASHED":
            finished = set()
            for parent in ml.parents_of_flow_run(ids[-1]):
                finished = {
                    tags(k)["platonic.stage_instance"] for k in ml.children(parent) if k["info"]["status"] == "FINISHED"
                }
                # what the user sees: the parent the dead process left is not FINISHED
                # (docs/operations.md, "What a killed worker looks like")
                assert parent["info"]["status"] != "FINISHED", (s, parent["info"])
                killed_parents[parent["info"]["run_id"]] = parent["info"]["status"]
            crashed_by_kill[s] = finished
    assert crashed_by_kill, "the kill crashed no run: nothing was under test"
    assert any(crashed_by_kill.values()), "no killed run had finished a stage: resuming is not under test"
    st.start_worker("worker", cwd=REPO)

    # the MLflow server restarts while the others run
    until("a run under the new worker", lambda: any(flow_state(env, i[-1]) == "RUNNING" for i in attempts.values()))
    st.stop("mlflow-server")
    st.start_mlflow()

    # every run ends; a crashed or failed one is resubmitted with its reason on record
    reasons: list[str] = []
    retried = 0
    while True:
        pending = False
        for s, ids in attempts.items():
            state, message = state_and_message(env, ids[-1])
            if state in ("CRASHED", "FAILED", "CANCELLED"):
                assert message, f"seed {s}: {state} without a reason"
                assert len(ids) < 4, f"seed {s}: {state} on its third resubmission: {message}"
                reasons.append(f"seed {s}: {state}: {message[:200]}")
                ids.append(start_run(env, *sets[s]))
                retried += 1
                pending = True
            elif state != "COMPLETED":
                pending = True
        if not pending:
            break
        assert time.time() - t0 < 900, {s: flow_state(env, i[-1]) for s, i in attempts.items()}
        time.sleep(2)
    took = time.time() - t0

    # two reruns of cached stages: every stage a hit
    reruns = [start_run(env, *sets[s]) for s in list(LOAD_SEEDS)[:2]]
    assert [wait_state(env, i) for i in reruns] == ["COMPLETED", "COMPLETED"]
    for i in reruns:
        parent = ml.parent_of_flow_run(i)
        hits = {k for k in tags(parent) if k.startswith("platonic.reused.")}
        assert not ml.children(parent) and len(hits) == STAGES

    # nothing lost: each seed's last attempt finished every stage, with metrics and lineage
    for s, ids in attempts.items():
        parent = ml.parent_of_flow_run(ids[-1])
        assert parent["info"]["status"] == "FINISHED", (s, parent["info"])
        kids = ml.children(parent)
        ran = {tags(k)["platonic.stage_instance"] for k in kids}
        hits = {k.removeprefix("platonic.reused.") for k in tags(parent) if k.startswith("platonic.reused.")}
        assert len(ran) + len(hits) == STAGES and not ran & hits, (s, sorted(ran), sorted(hits))
        assert crashed_by_kill.get(s, set()) <= hits  # what finished before the kill is not redone
        assert s not in crashed_by_kill or ran  # what the kill cut short is run again
        assert all(flow_state(env, i) in ("CRASHED", "FAILED") for i in ids[:-1])  # each retry's reason stays
        for k in kids:
            assert k["info"]["status"] == "FINISHED", (s, tags(k)["platonic.stage_instance"])
            assert k["data"].get("metrics"), (s, tags(k)["platonic.stage_instance"], "no metrics")
            if tags(k)["platonic.stage"] != "world":  # the first stage reads nothing
                assert k.get("inputs", {}).get("dataset_inputs"), (s, tags(k)["platonic.stage_instance"], "no lineage")
    # a killed attempt's parent is not left RUNNING: FAILED where the dying process closed it,
    # else KILLED by the store's next run (its owner process is gone: tracking.mark_killed_runs)
    ended = {r: ml.get("runs/get", run_id=r)["run"]["info"]["status"] for r in killed_parents}
    assert set(ended.values()) <= {"KILLED", "FAILED"}, ended
    results = sorted((out / "runs").glob("*/results.json"))
    assert len(results) == len(LOAD_SEEDS) + len(reruns)
    manifests, _ = committed(out / "artifacts")
    assert manifests and all(verify(Manifest.read(m)) is None for m in manifests)  # no artifact half-written
    submitted = sum(len(i) for i in attempts.values()) + len(reruns)
    completed = len(LOAD_SEEDS) + len(reruns)
    lost = sum(flow_state(env, i[-1]) != "COMPLETED" for i in attempts.values())
    print(
        f"load: submitted {submitted} = completed {completed} + retried {retried}; lost {lost}; "
        f"crashed by the worker's kill {len(crashed_by_kill)}; artifacts verified {len(manifests)}; "
        f"{took:.0f} s to the last completion; the killed runs' MLflow parents "
        f"{sorted(set(killed_parents.values()))} -> {sorted(set(ended.values()))}"
    )
    print("\n".join(reasons))
    assert submitted == completed + retried and lost == 0
