"""The store a command uses and the Prefect server it reports to (issue 34 items 5, 6; issue 33
item 2 and its classes "writes where the user did not mean" and "a second `platonic server`
at once"). Real processes, real sockets, a real `prefect server start --background`."""

from __future__ import annotations

import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"


def env_without_servers(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A child's environment: no Prefect API or store named, Prefect's home a folder of this
    test (so nothing of the machine's ~/.prefect is read or written)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "PLATONIC_OUT_DIR"))}
    return {**env, "PREFECT_HOME": str(tmp_path / "user-prefect-home"), "OMP_NUM_THREADS": "1", **extra}


def platonic(*args: str, cwd: Path, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "platonic.flows.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# ---- which store: refused where a command would write where the user did not mean ----------


@pytest.mark.parametrize(
    "given,why",
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("FILE", "is a file, not a folder"),
        ("FILE/out", "is a file, not a folder"),
        ("/", "shared folder"),
        ("/tmp", "shared folder"),
        ("~", "is the home folder"),
        ("/etc/platonic", "system folder"),
        ("/usr", "system folder"),
        ("FOREIGN", "holds other files (e.g. notes.txt) and no store"),
    ],
)
def test_a_store_where_the_user_did_not_mean_is_one_line_naming_it(tmp_path, given, why):
    from platonic.core.config import ConfigError
    from platonic.flows import store

    (tmp_path / "FILE").write_text("not a folder")
    (tmp_path / "FOREIGN").mkdir()
    (tmp_path / "FOREIGN" / "notes.txt").write_text("the user's")
    path = given.replace("FILE", str(tmp_path / "FILE")).replace("FOREIGN", str(tmp_path / "FOREIGN"))
    with pytest.raises(ConfigError, match=re.escape(why)) as e:
        store.check(path)
    assert "\n" not in str(e.value) and str(e.value).startswith("out_dir ")


def test_a_new_or_empty_folder_or_an_existing_store_is_taken(tmp_path, monkeypatch):
    from platonic.flows import store

    (tmp_path / "empty").mkdir()
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "mlflow.db").write_bytes(b"")
    (tmp_path / "old" / "notes.txt").write_text("beside a store: the user's business")
    for name in ("new/deeper", "empty", "old"):
        assert store.check(tmp_path / name) == tmp_path / name
    monkeypatch.setenv("HOME", str(tmp_path))
    assert store.check("~/prh/.platonic") == tmp_path / "prh" / ".platonic"  # not a folder named `~`


def test_the_store_is_the_option_then_the_variable_then_the_recipe(monkeypatch):
    from platonic.core.config import load_config
    from platonic.flows import store

    monkeypatch.delenv(store.ENV, raising=False)
    assert load_config(TINY, store.out_dir_sets([])).out_dir == ".platonic"
    monkeypatch.setenv(store.ENV, "/data/prh")
    assert load_config(TINY, store.out_dir_sets([])).out_dir == "/data/prh"
    assert load_config(TINY, store.out_dir_sets(["out_dir=/data/set"])).out_dir == "/data/set"
    assert load_config(TINY, store.out_dir_sets(["out_dir=/data/set"], "/data/opt")).out_dir == "/data/opt"
    assert store.chosen(None) == "/data/prh" and store.chosen("x") == "x"


@pytest.mark.parametrize(
    "args", [["table", "table7"], ["forecast", "table7", "--model", "good"], ["lineage", "0" * 32]]
)
def test_reading_a_mistyped_store_writes_nothing_there(tmp_path, monkeypatch, args):
    """Before: `--out-dir .platonc` created .platonc/mlflow.db and then found no run in it."""
    from typer.testing import CliRunner

    from platonic.flows.cli import app

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, [*args, "--out-dir", ".platonc"])
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [
        f"error: out_dir .platonc: no store at {tmp_path / '.platonc'} (a run writes one; or pass --out-dir)"
    ]
    assert not (tmp_path / ".platonc").exists()


def test_run_on_a_file_is_refused_before_anything_starts(tmp_path, monkeypatch):
    """Before: the run started Prefect, then failed on mkdir with a FileExistsError."""
    from typer.testing import CliRunner

    from platonic.flows.cli import app

    (tmp_path / "results.txt").write_text("a file")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["run", str(TINY), "--out-dir", "results.txt"])
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [
        f"error: out_dir results.txt: {tmp_path / 'results.txt'} is a file, not a folder"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.txt"]


# ---- the server a command attaches to: only its store's, proven ---------------------------


class _Answer200(http.server.BaseHTTPRequestHandler):
    """A squatter: 200 to everything (a health check included), and it keeps what it is sent."""

    received: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self.received.append(self.path)
        self.send_response(200)
        self.end_headers()

    do_POST = do_PATCH = do_GET  # noqa: N815

    def log_message(self, *args) -> None:
        pass


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="the proof reads /proc (Linux)")
def test_a_squatter_on_the_recorded_port_is_never_attached_to(tmp_path):
    """Before: any HTTP 200 on 127.0.0.1:4200 was taken for `platonic server`. Now a store's
    record names port, pid and start time; a command attaches only if that process holds the
    listening socket. Here a squatter (this test process) answers 200 on the recorded port
    while the recorded pid is another process of ours: not proven, and the attach path of a
    real command (a child process) sends it nothing. The same record naming the squatter's
    own pid and start time is proven: the check is not vacuous."""
    from platonic.flows.project_server import ServerRecord, process_start, proven_url, proves

    squatter = http.server.HTTPServer(("127.0.0.1", 0), _Answer200)
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    port = squatter.server_address[1]
    sleeper = subprocess.Popen(["sleep", "60"])
    out = tmp_path / "store"
    (out / "prefect").mkdir(parents=True)
    try:
        ServerRecord(port, sleeper.pid, process_start(sleeper.pid)).write(out)
        assert proves(ServerRecord.read(out)) == f"port {port} is held by another process"
        assert proven_url(out) is None
        attach = "from platonic.flows import services; print(services.use_local_server(sys.argv[1]))"
        p = subprocess.run(
            [sys.executable, "-c", f"import sys; {attach}", str(out)],
            env=env_without_servers(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0 and p.stdout.strip() == "None", p.stderr
        assert _Answer200.received == []  # not even a health check reached it
        # a recycled pid (same pid, another start time) proves nothing either
        ServerRecord(port, os.getpid(), "1").write(out)
        assert proves(ServerRecord.read(out)) == f"pid {os.getpid()} is another process now"
        # the positive control: the record of the process that does hold the socket
        ServerRecord(port, os.getpid(), process_start(os.getpid())).write(out)
        assert proven_url(out) == f"http://127.0.0.1:{port}/api"
        assert oct(os.stat(out / "prefect" / "server.json").st_mode & 0o777) == "0o600"
    finally:
        sleeper.kill()
        sleeper.wait()
        squatter.shutdown()
        squatter.server_close()


@pytest.mark.e2e
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="the proof reads /proc (Linux)")
def test_platonic_server_is_the_stores_own_and_a_second_start_at_once_finds_it(tmp_path):
    """Two `platonic server` of one store at once: before, the second exited 1 without a word
    (Prefect's port error went to /dev/null); now it waits for the first's and says it is up.
    The server's database and pid file are in the store (not ~/.prefect, shared by every
    checkout), its port is recorded there; a command on another store does not attach to it;
    `--stop` stops it (through `prefect server stop`)."""
    from platonic.flows.project_server import process_start

    env = env_without_servers(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    cmd = [sys.executable, "-m", "platonic.flows.cli", "server", "--out-dir", str(a)]
    both = [
        subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        outs = [p.communicate(timeout=400) for p in both]
        assert [p.returncode for p in both] == [0, 0], outs
        said = sorted(o[0].strip() for o in outs)
        rec = json.loads((a / "prefect" / "server.json").read_text())
        url = f"http://127.0.0.1:{rec['port']}/api"
        assert said[0].startswith(f"Prefect server up at {url}"), said
        assert said[1].startswith(f"this store's Prefect server is already up at {url}"), said
        assert all(o[1].startswith(f"store: {a}") for o in outs), outs
        assert (a / "prefect" / "prefect.db").is_file()
        assert not (tmp_path / "user-prefect-home" / "prefect.db").exists()
        assert int((a / "prefect" / "server.pid").read_text()) == rec["pid"]

        attach = "from platonic.flows import services; print(services.use_local_server(sys.argv[1]))"
        for store, expected in ((a, url), (b, "None")):
            p = subprocess.run(
                [sys.executable, "-c", f"import sys; {attach}", str(store)],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert p.stdout.strip() == expected, p.stderr
    finally:
        stop = platonic("server", "--stop", "--out-dir", str(a), cwd=tmp_path, env=env)
    assert stop.returncode == 0 and stop.stdout.strip() == f"Prefect server at http://127.0.0.1:{rec['port']} stopped"
    assert process_start(rec["pid"]) is None  # the server process is gone (`--stop` waits for it)
    assert not (a / "prefect" / "server.json").exists()
    again = platonic("server", "--stop", "--out-dir", str(a), cwd=tmp_path, env=env)
    assert again.returncode == 0 and again.stdout.strip() == "no Prefect server of this store is running"
    with socket.socket() as s:  # the port is free again
        s.bind(("127.0.0.1", rec["port"]))


@pytest.mark.e2e
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="the proof reads /proc (Linux)")
def test_the_stores_prefect_ui_reaches_the_stores_api(tmp_path):
    """Issue 44 item 3: the UI of `platonic server`'s Prefect asks `/ui-settings` where its API
    is; it answered Prefect's default port (`http://127.0.0.1:4200/api`), not the store's. Now
    the store's port, even where the user's environment names another server's UI API."""
    import urllib.request

    elsewhere = "http://127.0.0.1:4200/api"
    env = env_without_servers(tmp_path, PREFECT_UI_API_URL=elsewhere, PREFECT_SERVER_UI_API_URL=elsewhere)
    store = tmp_path / "store"
    try:
        p = platonic("server", "--out-dir", str(store), cwd=tmp_path, env=env, timeout=400)
        assert p.returncode == 0, p.stderr[-2000:]
        port = json.loads((store / "prefect" / "server.json").read_text())["port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ui-settings", timeout=30) as r:
            settings = json.loads(r.read())
        assert settings["api_url"] == f"http://127.0.0.1:{port}/api", settings
        with urllib.request.urlopen(f"{settings['api_url']}/health", timeout=30) as r:  # and the UI reaches it
            assert r.status == 200
    finally:
        platonic("server", "--stop", "--out-dir", str(store), cwd=tmp_path, env=env)


def test_a_temporary_server_booted_beside_the_cli_is_awaited_and_its_error_raised(monkeypatch):
    """`tie_temporary_server` starts Prefect's server in a thread and returns; the flow's own
    start of the server waits in `temporary_server_ready` (Prefect's would find it "running"
    and connect before it answers), which raises the boot's own error."""
    from platonic.flows import services

    started = threading.Event()
    release = threading.Event()

    def slow_start() -> None:
        started.set()
        release.wait(5)

    booting = services._Booting(slow_start)
    booting.start()
    monkeypatch.setattr(services, "_booting", booting)
    assert started.wait(5)
    waiter = threading.Thread(target=services.temporary_server_ready)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # still booting: the flow waits
    release.set()
    waiter.join(5)
    assert not waiter.is_alive() and services._booting is None

    def failing_start() -> None:
        raise RuntimeError("Timed out while attempting to connect to ephemeral Prefect API server.")

    booting = services._Booting(failing_start)
    booting.start()
    monkeypatch.setattr(services, "_booting", booting)
    with pytest.raises(RuntimeError, match="ephemeral Prefect API server"):
        services.temporary_server_ready()
    services.temporary_server_ready()  # awaited once: nothing left to wait for
