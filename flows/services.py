"""Where the services live, set once by the app before anything connects to them.

Embedded defaults (a laptop): Prefect's temporary local server, MLflow on SQLite under
out_dir, telemetry off. A recipe's `services` section names a served stack's endpoints; each
is a fallback for its standard variable (PREFECT_API_URL, MLFLOW_TRACKING_URI,
MLFLOW_S3_ENDPOINT_URL): the environment wins, so one recipe runs on a laptop and on the
lab's servers unchanged. The library (platonic.core) never touches the environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

from platonic.core.config import ConfigError, ServicesConfig

QUIET = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_CLI_PROMPT": "false",
    "DO_NOT_TRACK": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "TOKENIZERS_PARALLELISM": "false",
}


def embedded_defaults() -> None:
    """Prefect's temporary local server and quiet telemetry, unless the user set otherwise."""
    for k, v in QUIET.items():
        os.environ.setdefault(k, v)


def health_status(url: str, timeout: float = 0.5) -> int | None:
    """The HTTP status of the Prefect API health check at `url`; None when nothing answers
    (milliseconds when nothing listens: the connection is refused)."""
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=timeout).status_code
    except httpx.HTTPError:
        return None


def healthy(url: str, timeout: float = 0.5) -> bool:
    """Whether a Prefect API answers its health check at `url`."""
    return health_status(url, timeout) == 200


def server_answers(url: str, timeout: float = 2.0) -> bool:
    """Whether anything answers at `url`, whatever the status (a served stack's auth, or an
    API that keeps its health check elsewhere, still answers)."""
    return health_status(url, timeout) is not None


def lost_prefect_server(error: BaseException) -> str | None:
    """The URL of the Prefect server this process reported to, if `error` is a failed
    connection (httpx transport error) and nothing answers at that URL any more; None
    otherwise (a stage's own error, or a server that is still up)."""
    import httpx

    url = os.environ.get("PREFECT_API_URL")
    if url and isinstance(error, httpx.TransportError) and not server_answers(url):
        return url
    return None


def exit_now(code: int) -> None:
    """Exit without running exit handlers. Prefect drains its undelivered events at exit,
    reconnecting about ten times per event to the server: with the server gone, a finished
    run would sit there for many minutes (measured: over three, still going). Logging is not
    shut down either: Prefect's API log handler would try the same server."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def choose_prefect_server(out_dir: str | Path) -> str:
    """The Prefect server this process's flows report to, chosen before the first flow starts:
    PREFECT_API_URL (the environment or the recipe's `services`); else the `platonic server`
    of this store (`out_dir`), if it proves to be the process its record names (a warm
    rerun: no server start; platonic.flows.project_server); else Prefect's temporary server,
    tied to this process so it stops with it even when the process is killed (SIGKILL,
    SIGTERM: no atexit runs) through a watchdog (platonic.flows.watchdog)."""
    return use_local_server(out_dir) or tie_temporary_server()


def check_prefect_home() -> None:
    """The temporary server keeps its database in PREFECT_HOME (default ~/.prefect): where
    that cannot be written (HOME read-only or missing), it never starts, and Prefect says so
    only after its startup timeout, as a connection timeout (measured: 229 s, 2,516 lines).
    Say it in one line (ConfigError) before starting it."""
    from prefect.settings import PREFECT_HOME

    home = Path(PREFECT_HOME.value()).expanduser()
    try:
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=home, prefix=".write-check-"):
            pass
    except OSError as e:
        raise ConfigError(
            f"PREFECT_HOME {home} is not writable ({e.strerror or e}); Prefect's temporary server keeps its "
            "database there: set PREFECT_HOME (or HOME) to a writable folder, or PREFECT_API_URL to a running server"
        ) from None


class ServerWatch:
    """Whether the Prefect server at `url` still answers, as a state that changes only when
    `poll` sees it change: `poll()` probes once and returns the line to say, or None when
    nothing changed. The thread of `watch_prefect_server` calls it every few seconds; tests
    call it directly, so what it says does not depend on timing."""

    def __init__(self, url: str, probe: Callable[[str], bool] = server_answers):
        self.url, self.probe, self.up = url, probe, True

    def poll(self) -> str | None:
        if self.probe(self.url) == self.up:
            return None
        self.up = not self.up
        what = "answers again" if self.up else "stopped answering: the run goes on, its record there is incomplete"
        return f"warning: the Prefect server at {self.url} {what}"


_WATCHED: dict[str, threading.Event] = {}


def watch_prefect_server(
    url: str, every: float = 10.0, probe: Callable[[str], bool] = server_answers
) -> threading.Event:
    """A daemon thread that says on stderr, once, when the Prefect server at `url` stops
    answering, and once when it is back (`ServerWatch`). A run goes on without it (its stages
    do not need the server), but Prefect's client retries its last reports for about 2.5
    minutes before the run ends with an error: this says why at the time it happens. One
    thread per URL and process, however many runs it starts; setting the returned event stops
    it (a later call for the same URL starts a new one)."""
    if url in _WATCHED and not _WATCHED[url].is_set():
        return _WATCHED[url]
    stop = _WATCHED[url] = threading.Event()
    watch = ServerWatch(url, probe)

    def loop() -> None:
        while not stop.wait(every):
            if said := watch.poll():
                print(said, file=sys.stderr, flush=True)

    threading.Thread(target=loop, name="prefect-server-watch", daemon=True).start()
    return stop


def use_local_server(out_dir: str | Path) -> str | None:
    """PREFECT_API_URL, or the URL of this store's running `platonic server` (then exported
    as PREFECT_API_URL) if its record proves it and it answers, watched
    (`watch_prefect_server`); None if neither: a server of another store, or anything else
    on a port, is never reported to. Call it before Prefect is imported: Prefect reads its
    settings once, at import (the CLI imports Prefect only when a flow starts)."""
    from .project_server import proven_url

    url = os.environ.get("PREFECT_API_URL")
    if not url and "prefect" not in sys.modules and (found := proven_url(Path(out_dir))) and healthy(found):
        url = os.environ["PREFECT_API_URL"] = found
    if url:
        watch_prefect_server(url)
    return url or None


def tie_temporary_server() -> str:
    """The API URL a Prefect profile sets, else "temporary": the temporary server Prefect will
    start, each of its processes under a watchdog, started now in a thread of its own. It
    imports Prefect's server module (seconds), which the flow would import anyway; the server
    then takes seconds to answer (~4 s here), which this process spends on what the flow would
    do first (importing it, opening the MLflow store). The flow's client starts the server as
    it begins: that start waits for this one (`temporary_server_ready`)."""
    with warnings.catch_warnings():  # a home Prefect cannot create is said below, in one line
        warnings.filterwarnings("ignore", "Failed to create the Prefect home", UserWarning)
        from prefect.settings import PREFECT_API_URL

    if url := PREFECT_API_URL.value():
        return url
    check_prefect_home()
    from prefect.server.api.server import SubprocessASGIServer

    from .watchdog import watch

    class TiedServer(SubprocessASGIServer):
        """Prefect's temporary server (the instance Prefect's clients start and stop), each of
        its processes (a retry on another port is a new one) under a watchdog."""

        def __init__(self, port: int | None = None):
            super().__init__(port)
            self.watchdogs: list[subprocess.Popen] = getattr(self, "watchdogs", [])

        def _run_uvicorn_command(self) -> subprocess.Popen:
            # in a session of its own: a Ctrl-C to the run's process group stops the run, which
            # still reports to the server how it ended; the watchdog stops the server after it
            proc = _in_own_session(super()._run_uvicorn_command)
            self.watchdogs.append(watch(proc.pid, ["uvicorn", "--port", str(self.port)]))
            return proc

        def start(self, timeout: int | None = None) -> None:
            if _booting is not None and threading.current_thread() is not _booting:
                # booting: `running` is already true, and Prefect's own start would return at
                # once and let its client connect to a port nothing answers yet
                temporary_server_ready()
            super().start(timeout)

        def stop(self) -> None:
            super().stop()
            for w in self.watchdogs:  # the server is stopped: their work is done
                w.kill()
                w.wait()
            self.watchdogs.clear()

    from prefect.logging.configuration import setup_logging

    global _booting
    server = TiedServer()  # registers itself as Prefect's default temporary server, unless one is there
    setup_logging()  # as `prefect.main` does at its import (the flow's, later): the boot's log line shows
    _booting = _Booting(server.start)
    _booting.start()
    return "temporary"


class _Booting(threading.Thread):
    """The temporary server's start (`SubprocessASGIServer.start`: its process, then polls of
    its health until it answers) in a thread of its own, its error kept for `join`."""

    def __init__(self, start: Callable[[], None]) -> None:
        super().__init__(name="prefect-server-boot", daemon=True)
        self._start_server, self.error = start, None

    def run(self) -> None:
        try:
            self._start_server()
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread by temporary_server_ready
            self.error = e


_booting: _Booting | None = None


def temporary_server_ready() -> None:
    """Wait for the start of the temporary server `tie_temporary_server` began; raise its error
    here (once: a later call returns at once)."""
    global _booting
    if _booting is not None:
        _booting.join()
        booted, _booting = _booting, None
        if booted.error is not None:
            raise booted.error


def _in_own_session(start: Callable[[], subprocess.Popen]) -> subprocess.Popen:
    """`start()`, Prefect's code that starts the server with `subprocess.Popen`, with the
    process started in a new session (its own process group)."""
    from prefect.server.api import server as module

    real = module.subprocess

    class NewSession:
        def __getattr__(self, name: str):
            return getattr(real, name)

        @staticmethod
        def Popen(*args, **kwargs) -> subprocess.Popen:  # noqa: N802 (subprocess's name)
            return real.Popen(*args, **{**kwargs, "start_new_session": True})

    module.subprocess = NewSession()
    try:
        return start()
    finally:
        module.subprocess = real


def apply(services: ServicesConfig) -> dict[str, str]:
    """Export the recipe's endpoints where the environment sets none, then the embedded
    defaults; returns the endpoint variables in effect."""
    for var, value in services.variables().items():
        if value and not os.environ.get(var):
            os.environ[var] = value
    embedded_defaults()
    return {v: os.environ[v] for v in services.variables() if os.environ.get(v)}
