"""What can be told of an MLflow run id before MLflow is imported: the store's tracking URI,
and whether the id has the form of a run id at all. `platonic lineage` and `platonic export`
check their RUN_ID here first, so a mistyped one answers at once, with the error a lookup
gives. Imports no MLflow (tracking.py and lineage.py take these names from here)."""

from __future__ import annotations

import os
import re
from pathlib import Path

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


def check_run_id(run_id: str, out_dir: str | Path) -> None:
    """LineageError, the one a lookup raises ("no MLflow run ..."), for an id that MLflow
    refuses before looking it up; nothing for any other id (which only a lookup can tell)."""
    if RUN_ID.match(run_id) is None:
        raise LineageError(f"no MLflow run {run_id!r} in {tracking_uri(out_dir)}")
