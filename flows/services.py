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


def tie_temporary_server() -> None:
    """Make Prefect's temporary server, if this process starts one (no PREFECT_API_URL),
    stop with this process even when it is killed (SIGKILL, SIGTERM: no atexit runs): each
    server process gets a watchdog (platonic.flows.watchdog). Call it before the first flow
    starts; it imports Prefect's server module (seconds), which that flow would import."""
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return
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


def apply(services: ServicesConfig) -> dict[str, str]:
    """Export the recipe's endpoints where the environment sets none, then the embedded
    defaults; returns the endpoint variables in effect."""
    for var, value in services.variables().items():
        if value and not os.environ.get(var):
            os.environ[var] = value
    embedded_defaults()
    return {v: os.environ[v] for v in services.variables() if os.environ.get(v)}
