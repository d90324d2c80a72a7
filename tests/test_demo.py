"""The README's first command, as a user runs it: `platonic demo --json` in a fresh folder.

This is the scientific acceptance test of the backbone: on the demo's default seed the
ordering good-view JEPA > next-token > bad-view JEPA must come out of real training runs.
Other world seeds are checked by the `slow` test below (not in the default run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.e2e  # CLI subprocesses running real flows and training


def run_demo(tmp_path, *sets: str) -> tuple[dict, float]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PREFECT_API_URL", None)  # the embedded temporary server, as on a laptop
    args = [sys.executable, "-m", "platonic.flows.cli", "demo", "--json"]
    for s in sets:
        args += ["--set", s]
    t0 = time.perf_counter()
    p = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env)
    wall = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout), wall


def assert_ordering(res: dict) -> None:
    s = {m: v["mutual_knn"] for m, v in res["models"].items()}
    print(
        json.dumps({m: [round(v["mutual_knn"], 4), [round(x, 4) for x in v["ci95"]]] for m, v in res["models"].items()})
    )
    assert s["good"] > s["ntp"] > s["bad"] > res["chance"], s


def test_demo_default_seed(tmp_path):
    res, wall = run_demo(tmp_path)
    print(f"demo wall time {wall:.0f}s")
    assert (tmp_path / ".platonic" / "mlflow.db").is_file()
    assert (tmp_path / ".platonic" / "runs" / res["run_id"] / "results.json").is_file()
    assert_ordering(res)


@pytest.mark.slow
@pytest.mark.parametrize("world_seed", [1, 2])
def test_demo_other_world_seeds(tmp_path, world_seed):
    res, _ = run_demo(tmp_path, f"world.seed={world_seed}", f"seed={world_seed}")
    assert_ordering(res)
