"""The README's first command, as a user runs it: `platonic demo --json` in a fresh folder.

This is the scientific acceptance test of the backbone: on the demo's default seed the
ordering good-view JEPA > next-token > bad-view JEPA must come out of real training runs.
Other world seeds are checked by the `slow` test below (not in the default run).
"""

from __future__ import annotations

import json

import pytest
from conftest import DemoProcess

pytestmark = pytest.mark.e2e  # CLI subprocesses running real flows and training


def assert_ordering(res: dict) -> None:
    s = {m: v["mutual_knn"] for m, v in res["models"].items()}
    print(
        json.dumps({m: [round(v["mutual_knn"], 4), [round(x, 4) for x in v["ci95"]]] for m, v in res["models"].items()})
    )
    assert s["good"] > s["ntp"] > s["bad"] > res["chance"], s


def test_demo_default_seed(demo_run):
    res, wall = demo_run.result(timeout=1800)  # counted from its start; on one CPU beside other tests
    print(f"demo wall time {wall:.0f}s")
    assert (demo_run.folder / ".platonic" / "mlflow.db").is_file()
    assert (demo_run.folder / ".platonic" / "runs" / res["run_id"] / "results.json").is_file()
    assert_ordering(res)


@pytest.mark.slow
@pytest.mark.parametrize("world_seed", [1, 2])
def test_demo_other_world_seeds(tmp_path, world_seed):
    res, _ = DemoProcess(tmp_path, (f"world.seed={world_seed}", f"seed={world_seed}")).result(timeout=900)
    assert_ordering(res)
