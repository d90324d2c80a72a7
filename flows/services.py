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

from platonic.core.config import ServicesConfig

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


# where `platonic server` listens, and where a flow command looks for it
LOCAL_SERVER = "http://127.0.0.1:4200/api"


def local_server_up(url: str = LOCAL_SERVER, timeout: float = 0.5) -> bool:
    """Whether a Prefect API answers its health check at `url` (milliseconds when nothing
    listens: the connection is refused)."""
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def choose_prefect_server() -> str:
    """The Prefect server this process's flows report to, chosen before the first flow starts:
    PREFECT_API_URL (the environment or the recipe's `services`); else a running `platonic
    server` on this machine (a warm rerun: no server start); else Prefect's temporary server,
    tied to this process so it stops with it even when the process is killed (SIGKILL,
    SIGTERM: no atexit runs) through a watchdog (platonic.flows.watchdog)."""
    return use_local_server() or tie_temporary_server()


def use_local_server() -> str | None:
    """PREFECT_API_URL, or a running `platonic server`'s URL (then exported as PREFECT_API_URL);
    None if neither. Call it before Prefect is imported: Prefect reads its settings once, at
    import (the CLI imports Prefect only when a flow starts)."""
    if url := os.environ.get("PREFECT_API_URL"):
        return url
    if "prefect" not in sys.modules and local_server_up():
        os.environ["PREFECT_API_URL"] = LOCAL_SERVER
        return LOCAL_SERVER
    return None


def tie_temporary_server() -> str:
    """The API URL a Prefect profile sets, else "temporary": the temporary server Prefect will
    start, each of its processes under a watchdog. It imports Prefect's server module
    (seconds), which the flow would import anyway."""
    from prefect.settings import PREFECT_API_URL

    if url := PREFECT_API_URL.value():
        return url
    from prefect.server.api.server import SubprocessASGIServer

    from .watchdog import watch

    class TiedServer(SubprocessASGIServer):
        """Prefect's temporary server (the instance Prefect's clients start and stop), each of
        its processes (a retry on another port is a new one) under a watchdog."""

        def __init__(self, port: int | None = None):
            super().__init__(port)
            self.watchdogs: list[subprocess.Popen] = getattr(self, "watchdogs", [])

        def _run_uvicorn_command(self) -> subprocess.Popen:
            proc = super()._run_uvicorn_command()
            self.watchdogs.append(watch(proc.pid, ["uvicorn", "--port", str(self.port)]))
            return proc

        def stop(self) -> None:
            super().stop()
            for w in self.watchdogs:  # the server is stopped: their work is done
                w.kill()
                w.wait()
            self.watchdogs.clear()

    TiedServer()  # registers itself as Prefect's default temporary server, unless one is there
    return "temporary"


def apply(services: ServicesConfig) -> dict[str, str]:
    """Export the recipe's endpoints where the environment sets none, then the embedded
    defaults; returns the endpoint variables in effect."""
    for var, value in services.variables().items():
        if value and not os.environ.get(var):
            os.environ[var] = value
    embedded_defaults()
    return {v: os.environ[v] for v in services.variables() if os.environ.get(v)}
