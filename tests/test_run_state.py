"""Clean state around runs (issue 19): the MLflow store's first initialisation, `--only` on an
empty cache, the temporary Prefect server of a killed run, and MLflow runs a crash left
RUNNING. Each test checks the mechanism with real processes and a real SQLite store."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest
from conftest import platonic_cli, quiet_env

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"


# ---- the MLflow store: initialised once, under a lock -------------------------------------


def _open_store(out_dir: str, barrier, results) -> None:
    from platonic.tasks import tracking

    barrier.wait()  # both processes open the fresh store at the same moment
    try:
        tracking.client(out_dir).search_experiments(max_results=1)
        results.put("ok")
    except Exception as e:  # the race: "table _alembic_tmp_... already exists" and the like
        results.put(f"{type(e).__name__}: {e}"[:300])


@pytest.mark.e2e
def test_two_processes_initialise_one_fresh_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_open_store, args=(str(tmp_path / "out"), barrier, results)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [results.get(timeout=5) for _ in procs] == ["ok", "ok"]
    assert _tables(tmp_path / "out" / "mlflow.db", "_alembic_tmp_%") == []


def _tables(db: Path, like: str) -> list[str]:
    with sqlite3.connect(db) as con:
        return [r[0] for r in con.execute("select name from sqlite_master where type='table' and name like ?", (like,))]


def _store_contents(db: Path) -> dict:
    """What a store holds besides its times: its schema (every table and index) and rows. A
    statement is compared as the set of its comma-separated parts: MLflow's own migrations
    write a table's CHECK constraints in an order that varies between processes."""
    with closing(sqlite3.connect(db)) as con:
        found = con.execute("select type, name, sql from sqlite_master where name not like 'sqlite_%'")
        schema = sorted((kind, name, sorted((sql or "").split(","))) for kind, name, sql in found)
        rows = {t: sorted(con.execute(f'select * from "{t}"')) for (kind, t, _) in schema if kind == "table"}
    rows["experiments"] = [r[:4] + r[6:] for r in rows["experiments"]]  # without creation/update times
    return {"schema": schema, "rows": rows}


def test_a_new_store_is_a_copy_of_the_one_mlflow_makes(tmp_path, monkeypatch):
    """A new out_dir's store is a copy of an empty store MLflow made once, kept in the user's
    cache (3.2 s of migrations at every new store before): its schema, revision and rows are
    what MLflow makes in the same folder (the Default experiment's artifact location under the
    working folder, not where the template was made); a template that is not whole is made again."""
    from mlflow.tracking import MlflowClient

    from platonic.tasks import tracking

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    made_by_mlflow = tmp_path / "mlflow-made.db"
    MlflowClient(f"sqlite:///{made_by_mlflow}").search_experiments()
    assert not (tmp_path / "cache").exists()  # nothing cached yet

    for name in ("a", "b"):
        c = tracking.client(tmp_path / name)
        assert c.get_experiment("0").artifact_location == str(tmp_path / "mlruns" / "0")
        assert _store_contents(tmp_path / name / "mlflow.db") == _store_contents(made_by_mlflow)
    (template,) = (tmp_path / "cache" / "platonic").glob("mlflow-*-empty.db")
    made = template.stat().st_mtime_ns
    run = c.create_run(tracking.experiment_id(c, "copied", tmp_path / "b"))  # a store to write to
    tracking.log_metrics(c, run.info.run_id, {"x": 1.0})
    assert c.get_run(run.info.run_id).data.metrics == {"x": 1.0}
    assert template.stat().st_mtime_ns == made  # "b" was a copy; the template is never written

    template.write_bytes(template.read_bytes()[:4096])  # cut short: made again
    tracking.client(tmp_path / "c")
    assert _store_contents(tmp_path / "c" / "mlflow.db") == _store_contents(made_by_mlflow)


def test_half_migrated_store_recovers(tmp_path, monkeypatch):
    """A first migration killed inside a batch step leaves `_alembic_tmp_metrics` behind and
    alembic_version short of head: every later open used to fail ("table
    _alembic_tmp_metrics already exists")."""
    import sqlalchemy
    from alembic import command
    from mlflow.store.db.utils import _get_alembic_config, _get_latest_schema_revision, _get_schema_version
    from mlflow.store.tracking.dbmodels.initial_models import Base as InitialBase

    from platonic.tasks import tracking

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "out"
    out.mkdir()
    uri = tracking.tracking_uri(out)
    engine = sqlalchemy.create_engine(uri)
    InitialBase.metadata.create_all(engine)
    config = _get_alembic_config(uri)
    with engine.begin() as connection:  # up to the revision before the metrics batch step
        config.attributes["connection"] = connection
        command.upgrade(config, "90e64c465722")
    with sqlite3.connect(out / "mlflow.db") as con:  # what the interrupted batch step left
        con.execute('CREATE TABLE _alembic_tmp_metrics ("key" VARCHAR(250), value FLOAT)')

    c = tracking.client(out)
    run = c.create_run(tracking.experiment_id(c, "recovered", out))
    tracking.log_metrics(c, run.info.run_id, {"x": 1.0})
    assert c.get_run(run.info.run_id).data.metrics == {"x": 1.0}
    assert _tables(out / "mlflow.db", "_alembic_tmp_%") == []
    assert _get_schema_version(engine) == _get_latest_schema_revision()


# ---- `--only S` with nothing cached: one line, no server, no MLflow run --------------------


@pytest.mark.e2e
def test_only_on_an_empty_cache_is_one_line_and_starts_nothing(tmp_path):
    p = platonic_cli(
        "run", str(TINY), "--only", "evaluate", "--set", "out_dir=out", cwd=tmp_path, env=quiet_env(tmp_path)
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 1, p.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "world" in lines[0] and f"platonic run {TINY} --set out_dir=out" in lines[0], lines[0]
    assert p.stdout == ""
    assert not (tmp_path / "out" / "mlflow.db").exists()  # no MLflow run written
    assert not (tmp_path / "prefect-home" / "prefect.db").exists()  # no Prefect server started


class _AnyFile(dict):
    """A manifest's per-file digests, for whichever files a key asks about."""

    def __contains__(self, name: object) -> bool:
        return True

    def __missing__(self, name: str) -> str:
        return "0" * 64


class _Store:
    """An artifact store holding an artifact for every instance but `lacking` (and an
    incomplete one, failed shards, for `incomplete`)."""

    def __init__(self, lacking: set[str], incomplete: set[str] = frozenset()):
        self.lacking, self.incomplete = lacking, incomplete

    def lookup(self, stage: str, key: str):
        from platonic.core.artifacts import Manifest

        if stage in self.lacking:
            return None
        counts = {"shards_failed": 1} if stage in self.incomplete else {}
        return Manifest(stage, 1, key, "/nowhere", key * 4, counts, {}, {}, {}, {}, files=_AnyFile())


def test_uncached_names_exactly_the_missing_upstream():
    from platonic.core.config import load_config
    from platonic.core.stages import closure, plan, uncached

    cfg = load_config(TINY)
    only = plan(cfg, "evaluate")
    assert uncached(cfg, only, _Store({"train:good"})) == ["train:good", "embed:good"]
    assert uncached(cfg, only, _Store(set(), incomplete={"ingest"}))[:2] == ["ingest", "positives"]
    upstream = [i.id for i in closure(cfg, ["evaluate"]) if i.id != "evaluate"]
    assert uncached(cfg, only, _Store({"world"})) == upstream
    # --force of an upstream stage: it executes, and what reads it is keyed on its new output
    assert uncached(cfg, plan(cfg, "evaluate", force=["train:good"]), _Store({"train:good"})) == []
    assert uncached(cfg, plan(cfg), _Store({"world"})) == []  # no --only: nothing comes from the cache alone


# ---- kill -9 of `platonic run`: its temporary Prefect server goes with it ------------------


def _children(pid: int) -> list[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(d.name))
    return kids


def _cmdline(pid: int) -> list[str]:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for a reaper, and holds nothing)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _server_port(cli: int) -> tuple[int, int] | None:
    """(pid, port) of the uvicorn child of `cli` once it answers on its port."""
    for kid in _children(cli):
        cmd = _cmdline(kid)
        if "uvicorn" in cmd and "--port" in cmd:
            port = int(cmd[cmd.index("--port") + 1])
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return kid, port
    return None


@pytest.mark.e2e
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_kill_9_of_a_run_takes_its_temporary_server_with_it(tmp_path):
    cli = subprocess.Popen(
        [sys.executable, "-m", "platonic.flows.cli", "run", str(TINY), "--set", "out_dir=out"],
        cwd=tmp_path,
        env=quiet_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    kids: list[int] = []
    port = None
    try:
        deadline = time.monotonic() + 240
        while (found := _server_port(cli.pid)) is None:
            assert cli.poll() is None, "the run ended before its server was up"
            assert time.monotonic() < deadline, "no temporary server came up"
            time.sleep(0.5)
        port = found[1]
        kids = _children(cli.pid)
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (left := _leftovers(kids, port)):
            time.sleep(0.5)
        assert not _leftovers(kids, port), f"left running: {[_cmdline(p) for p in left]}"
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        for pid in _leftovers(kids, port):  # what the code under test failed to stop
            os.kill(pid, signal.SIGKILL)


def _leftovers(kids: list[int], port: int | None) -> list[int]:
    """Processes the killed run started, or serving its port, still running."""
    mark = str(port)
    on_port = [
        int(d.name)
        for d in Path("/proc").iterdir()
        if port and d.name.isdigit() and "uvicorn" in _cmdline(int(d.name)) and mark in _cmdline(int(d.name))
    ]
    return sorted({p for p in [*kids, *on_port] if _running(p)})


# ---- runs a crash left RUNNING are marked KILLED by the next run ---------------------------

_DIE_IN_A_STAGE = """
import dataclasses, os, signal, sys
from platonic.core.config import load_config
from platonic.core.contract import StageInstance
from platonic.core.stages import RUN, SPECS
from platonic.tasks.executor import execute
from platonic.tasks.runs import parent_run

def die(call):
    os.kill(os.getpid(), signal.SIGKILL)

SPECS["world"] = dataclasses.replace(SPECS["world"], compute=die)
cfg = load_config(sys.argv[1], ["out_dir=" + sys.argv[2]])
with parent_run(cfg.out_dir, "crash", "crash", {}, {}) as ctx:
    execute(StageInstance("world"), cfg, {}, RUN, ctx)
"""


def test_runs_of_a_killed_process_are_marked_killed_by_the_next_run(tmp_path, monkeypatch):
    from platonic.tasks import tracking
    from platonic.tasks.runs import parent_run

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-c", _DIE_IN_A_STAGE, str(TINY), str(out)],
        env=quiet_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == -signal.SIGKILL, p.stderr
    c = tracking.client(out)
    exp = tracking.experiment_id(c, "crash", out)
    crashed = c.search_runs([exp])
    assert len(crashed) == 2 and {r.info.status for r in crashed} == {"RUNNING"}  # the parent and the world stage
    # a run of a process on another host, and one of a live process here: not ours to judge
    elsewhere = c.create_run(exp, tags={tracking.HOST_TAG: "another-host", tracking.PID_TAG: "1"})
    alive = c.create_run(exp, tags=tracking.owner_tags())

    with parent_run(out, "next", "next", {}, {}):
        pass

    status = {r.info.run_id: r.info.status for r in c.search_runs([exp])}
    assert {status[r.info.run_id] for r in crashed} == {"KILLED"}
    assert status[elsewhere.info.run_id] == "RUNNING"
    assert status[alive.info.run_id] == "RUNNING"


# ---- a Prefect server that goes away mid-run --------------------------------------------------


def _port_held_closed() -> socket.socket:
    """A TCP socket bound to a free port of 127.0.0.1 and not listening: a connection to it
    is refused, and no other process can take the port while the socket is held."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s


def _serve_on(sock: socket.socket, status: int):
    """The held socket starts answering every GET with `status` (same port, never released)."""
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(sock.getsockname(), Answer, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.server_activate()  # listen() on the held socket
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_prefect_server_gone_mid_run_is_one_error_and_an_exit_without_the_event_drain(monkeypatch, capsys):
    """A failed connection to a server that no longer answers: one `error:` line saying what
    happened and that the finished stages are cached, then an exit that skips Prefect's drain
    of undelivered events (minutes against a dead server). A server that still answers, or a
    stage's own error, keeps the usual `the run failed` line."""
    import httpx
    import typer

    from platonic.flows import cli

    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(os, "_exit", fake_exit)
    held = _port_held_closed()  # a port nothing listens on, for the whole test
    dead = f"http://127.0.0.1:{held.getsockname()[1]}/api"
    monkeypatch.setenv("PREFECT_API_URL", dead)
    with pytest.raises(SystemExit), cli._reported_errors():
        raise httpx.ConnectError("[Errno 111] Connection refused")
    assert exits == [1]
    held.close()
    err = capsys.readouterr().err
    assert f"error: the Prefect server at {dead} stopped answering during the run (ConnectError" in err
    assert "Every stage that finished is cached: rerun the command" in err

    alive = _serve_on(_port_held_closed(), 401)  # a served stack's server without our credentials still answers
    try:
        monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{alive.server_address[1]}/api")
        for error in (httpx.ReadTimeout("slow"), ValueError("a stage's own error")):
            with pytest.raises(typer.Exit) as e, cli._reported_errors():
                raise error
            assert e.value.exit_code == 1
            assert f"error: the run failed: {type(error).__name__}" in capsys.readouterr().err
    finally:
        alive.shutdown()
    assert exits == [1]


def test_the_prefect_server_watch_says_when_the_server_goes_and_comes_back():
    """The watch's state, probed for real against one port this test holds throughout (no
    other process can take it), stepped by hand: no sleep, no deadline."""
    from platonic.flows.services import ServerWatch

    sock = _port_held_closed()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/api"
    watch = ServerWatch(url)
    assert (
        watch.poll()
        == f"warning: the Prefect server at {url} stopped answering: the run goes on, its record there is incomplete"
    )
    assert watch.poll() is None  # said once
    server = _serve_on(sock, 200)
    try:
        assert watch.poll() == f"warning: the Prefect server at {url} answers again"
        assert watch.poll() is None
    finally:
        server.shutdown()
        server.server_close()


def test_the_watch_thread_prints_what_the_watch_says(capfd):
    """The thread around `ServerWatch`: a scripted probe (down, down, up), then the thread is
    stopped; what it printed is read after it has stopped, so nothing races."""
    import threading

    from platonic.flows.services import watch_prefect_server

    script, done = [False, False, True], threading.Event()

    def probe(url: str) -> bool:
        if not script:  # a call after the script: the previous poll has printed what it had to
            done.set()
        return script.pop(0) if script else True

    url = "http://127.0.0.1:9/watch-thread-test"
    stop = watch_prefect_server(url, every=0.001, probe=probe)
    assert done.wait(60), "the watch thread never probed three times"
    stop.set()
    err = capfd.readouterr().err
    assert err.count("stopped answering") == 1 and err.count("answers again") == 1, err
    again = watch_prefect_server(url, every=60, probe=lambda u: True)
    again.set()
    assert again is not stop  # a stopped watch is started anew, not handed back stopped


# ---- Ctrl-C, and services that do not answer (issue 33 items 5 and 6) -------------------------


def test_ctrl_c_asks_a_polling_loop_to_stop_raises_elsewhere_and_a_second_exits_at_once(monkeypatch, capsys):
    import typer

    from platonic.core import interrupt
    from platonic.flows import ctrl_c
    from platonic.flows.commands.common import _reported_errors

    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(os, "_exit", fake_exit)
    interrupt.clear()
    try:
        with interrupt.polled():  # the training loop: it stops at its next safe point
            ctrl_c.on_signal(signal.SIGINT, None)
            assert interrupt.stop_requested() and exits == []
            with pytest.raises(SystemExit):  # a second Ctrl-C: out at once
                ctrl_c.on_signal(signal.SIGINT, None)
        assert exits == [130]
        interrupt.clear()
        with pytest.raises(KeyboardInterrupt):  # nothing polls: it stops where it is
            ctrl_c.on_signal(signal.SIGINT, None)
        err = capsys.readouterr().err
        assert "interrupted: stopping the run (Ctrl-C again to exit at once)" in err
        assert "error: interrupted twice: exiting now" in err
        # the command's end: one error line, exit 130, without Prefect's event drain (os._exit)
        with pytest.raises(SystemExit), _reported_errors():
            raise interrupt.Interrupted("train:good stopped at step 11 of 40; a rerun resumes from X")
        assert exits == [130, 130]
        (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert line.startswith("error: interrupted: train:good stopped at step 11 of 40; a rerun resumes from X;")
        with pytest.raises(typer.Exit) as e, _reported_errors():  # other errors: as before
            raise ValueError("a stage's own error")
        assert e.value.exit_code == 1
    finally:
        interrupt.clear()


def test_sigterm_is_handled_as_ctrl_c_and_exits_143(monkeypatch, capsys):
    """Issue 43 (row 43.7): SIGTERM (a scheduler, a container stop) does what Ctrl-C does:
    the first asks the run to stop, a second (SIGTERM or SIGINT) exits at once; the command
    ends with one `error: terminated:` line and exit 143 (128 + SIGTERM)."""
    from platonic.core import interrupt
    from platonic.flows import ctrl_c
    from platonic.flows.commands.common import _reported_errors

    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(os, "_exit", fake_exit)
    try:
        with ctrl_c.handled():
            assert signal.getsignal(signal.SIGTERM) is signal.getsignal(signal.SIGINT)
            with interrupt.polled():
                os.kill(os.getpid(), signal.SIGTERM)  # through the installed handler
                assert interrupt.stop_requested() and exits == []
                with pytest.raises(SystemExit):  # a second signal, either kind: out at once
                    ctrl_c.on_signal(signal.SIGINT, None)
            assert exits == [143]
        err = capsys.readouterr().err
        assert "terminated (SIGTERM): stopping the run" in err and "error: terminated twice: exiting now" in err
        with pytest.raises(SystemExit), _reported_errors():
            os.kill(os.getpid(), signal.SIGTERM)  # nothing polls: it stops where it is
            time.sleep(5)
        assert exits == [143, 143]
        (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
        assert line.startswith("error: terminated: the MLflow runs it opened are marked KILLED")
        with pytest.raises(SystemExit), _reported_errors():  # a new command: Ctrl-C is 130 again
            raise interrupt.Interrupted("train:good stopped at step 11 of 40; a rerun resumes from X")
        assert exits == [143, 143, 130]
    finally:
        interrupt.clear()


def test_a_flow_body_keeps_the_command_s_sigterm_handler_over_prefect_s(monkeypatch):
    """Prefect's flow engine installs its own SIGTERM handler for a flow run (it raises
    TerminationSignal, marks the runs crashed and kills the process again: exit 143, no line,
    runs FAILED). Under a command's `handled()`, a flow body puts the command's back."""
    from platonic.flows import ctrl_c

    def prefect_bridge(signum, frame):  # stands in for prefect's _prefect_sigterm_handler
        raise AssertionError("not ours")

    with ctrl_c.handled():
        signal.signal(signal.SIGTERM, prefect_bridge)
        with ctrl_c.over_prefect():
            assert signal.getsignal(signal.SIGTERM) is ctrl_c.on_signal
        assert signal.getsignal(signal.SIGTERM) is prefect_bridge
    signal.signal(signal.SIGTERM, prefect_bridge)
    try:
        with ctrl_c.over_prefect():  # no command handles signals (a deployment run): Prefect's stays
            assert signal.getsignal(signal.SIGTERM) is prefect_bridge
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_a_run_stopped_by_ctrl_c_closes_its_runs_killed_and_a_failed_one_failed(tmp_path, monkeypatch):
    """Through the real executor and MlflowClient: a stage that raises Interrupted (or
    KeyboardInterrupt) leaves its run and the parent run KILLED; any other error, FAILED."""
    import dataclasses

    from platonic.core import interrupt
    from platonic.core.config import load_config
    from platonic.core.contract import StageInstance
    from platonic.core.stages.dag import RUN
    from platonic.core.stages.registry import SPECS
    from platonic.tasks import tracking
    from platonic.tasks.executor import execute
    from platonic.tasks.runs import parent_run

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "out"
    cfg = load_config(TINY, [f"out_dir={out}"])
    for error, status in ((interrupt.Interrupted("stopped"), "KILLED"), (RuntimeError("broken"), "FAILED")):

        def stage(call, error=error):
            raise error

        monkeypatch.setitem(SPECS, "world", dataclasses.replace(SPECS["world"], compute=stage))
        with pytest.raises(type(error)), parent_run(out, status, status, {}, {}) as ctx:
            execute(StageInstance("world"), cfg, {}, RUN, ctx)
        c = tracking.client(out)
        runs = c.search_runs([tracking.experiment_id(c, status, out)])
        assert len(runs) == 2 and {r.info.status for r in runs} == {status}, status


def test_a_dead_mlflow_tracking_uri_is_one_line_within_seconds(tmp_path):
    """MLFLOW_TRACKING_URI at a port nothing listens on: MLflow's client retried silently
    for about five minutes (measured: 292 s) before its first error. Now one line naming the
    URI, before any Prefect server starts."""
    held = _port_held_closed()
    uri = f"http://127.0.0.1:{held.getsockname()[1]}"
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            [sys.executable, "-m", "platonic.flows.cli", "run", str(TINY), "--set", "out_dir=out"],
            cwd=tmp_path,
            env={**quiet_env(tmp_path), "MLFLOW_TRACKING_URI": uri},
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        held.close()
    # the store line (`store: PATH`) comes first, then the one error line
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("store: ")]
    assert p.returncode == 2, p.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"error: MLFLOW_TRACKING_URI={uri}: no server answers"), lines
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "prefect-home" / "prefect.db").exists()  # no Prefect server started


def test_the_tracking_probe_names_the_uri_without_its_credentials():
    from platonic.tasks.run_ids import TrackingServerDown, probe_server

    held = _port_held_closed()
    port = held.getsockname()[1]
    try:
        with pytest.raises(TrackingServerDown) as e:
            probe_server(f"http://user:s3cret@127.0.0.1:{port}")
    finally:
        held.close()
    assert str(e.value).startswith(f"MLFLOW_TRACKING_URI=http://***@127.0.0.1:{port}: no server answers there")
    assert "s3cret" not in str(e.value)
    probe_server("sqlite:////nowhere/mlflow.db")  # a local store is not probed


def test_an_unwritable_prefect_home_is_one_line_before_the_temporary_server_starts(tmp_path):
    """HOME where nothing can be written (here: below a regular file, which even root cannot
    create folders in): Prefect's temporary server cannot create its database, and Prefect
    said so only after its startup timeout, as a connection timeout (measured: 229 s, 2,516
    lines). Now one line naming PREFECT_HOME."""
    # a fresh store has no `platonic server` of its own, so the run starts a temporary one
    (tmp_path / "file").write_text("not a folder")
    home = tmp_path / "file" / "home"
    env = {k: v for k, v in quiet_env(tmp_path).items() if k != "PREFECT_HOME"}
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "platonic.flows.cli", "run", str(TINY), "--set", f"out_dir={tmp_path / 'out'}"],
        cwd=tmp_path,
        env={**env, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    # the store line (`store: PATH`) comes first, then the one error line
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("store: ")]
    assert p.returncode == 2, p.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"error: PREFECT_HOME {home}/.prefect is not writable"), lines
    assert time.monotonic() - t0 < 90
