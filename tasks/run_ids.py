"""What can be told of an MLflow run id before MLflow is imported: the store's tracking URI,
whether a tracking server answers there, and whether the id has the form of a run id at all.
`platonic lineage` and `platonic export` check their RUN_ID here first, so a mistyped one
answers at once, with the error a lookup gives; `platonic run` probes the server before
Prefect starts. Imports no MLflow (tracking.py and lineage.py take these names from here)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from platonic.core.config import ConfigError

# MLflow's own form of a run id (mlflow.utils.validation._RUN_ID_REGEX): an id it refuses
# before any lookup, whatever the store; tests/test_cli_mistakes.py checks that the two agree
RUN_ID = re.compile(r"^[a-zA-Z0-9][\w\-]{0,255}$")


class LineageError(RuntimeError):
    pass


def tracking_uri(out_dir: str | Path) -> str:
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{Path(out_dir).resolve() / 'mlflow.db'}"


class TrackingServerDown(ConfigError):
    """MLFLOW_TRACKING_URI names a server that does not answer: one line naming the URI."""


def probe_server(uri: str, timeout: float = 3.0) -> None:
    """For an http(s) tracking URI: raise TrackingServerDown unless something answers there
    (any status: a server behind authentication answers too). MLflow's client would retry a
    dead server silently for about five minutes (MLFLOW_HTTP_REQUEST_MAX_RETRIES = 7 with
    backoff) before its first error. Other URIs (SQLite, files) are not probed."""
    if not uri.startswith(("http://", "https://")):
        return
    import httpx

    try:
        httpx.get(f"{uri.rstrip('/')}/health", timeout=timeout)
    except httpx.HTTPError as e:
        shown = re.sub(r"//[^/@]*@", "//***@", uri)  # credentials in the URI are not printed
        raise TrackingServerDown(
            f"MLFLOW_TRACKING_URI={shown}: no server answers there ({type(e).__name__}); "
            "start the MLflow server, or unset MLFLOW_TRACKING_URI to use the SQLite store under out_dir"
        ) from None


def check_run_id(run_id: str, out_dir: str | Path) -> None:
    """LineageError, the one a lookup raises ("no MLflow run ..."), for an id that MLflow
    refuses before looking it up; nothing for any other id (which only a lookup can tell)."""
    if RUN_ID.match(run_id) is None:
        raise LineageError(f"no MLflow run {run_id!r} in {tracking_uri(out_dir)}")
