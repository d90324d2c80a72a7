"""Where the services live, set once by the app before anything connects to them.

Embedded defaults (a laptop): Prefect's temporary local server, MLflow on SQLite under
out_dir, telemetry off. A recipe's `services` section names a served stack's endpoints; each
is a fallback for its standard variable (PREFECT_API_URL, MLFLOW_TRACKING_URI,
MLFLOW_S3_ENDPOINT_URL): the environment wins, so one recipe runs on a laptop and on the
lab's servers unchanged. The library (platonic.core) never touches the environment.
"""

from __future__ import annotations

import os

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


def apply(services: ServicesConfig) -> dict[str, str]:
    """Export the recipe's endpoints where the environment sets none, then the embedded
    defaults; returns the endpoint variables in effect."""
    for var, value in services.variables().items():
        if value and not os.environ.get(var):
            os.environ[var] = value
    embedded_defaults()
    return {v: os.environ[v] for v in services.variables() if os.environ.get(v)}
