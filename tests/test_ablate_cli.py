"""`platonic ablate configs/table7.yaml --quick`, then `platonic table` and `platonic forecast`,
as a user runs them from a fresh folder (subprocesses, the embedded Prefect server and the
default MLflow store under the output folder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_table

pytestmark = pytest.mark.e2e  # CLI subprocesses running real flows

REPO = Path(__file__).resolve().parents[1]


def user_env() -> dict[str, str]:
    """A user's environment: the embedded Prefect server (no session server's URL)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PREFECT_API_URL", None)
    return env


def platonic(cwd: Path, *args: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "platonic.flows.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=user_env(),
    )


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    d = tmp_path_factory.mktemp("ablate")
    # --quick plus a smaller world and shorter runs of narrower models: the mechanics, not
    # the numbers, are under test here, and CI time is shared (the quick grid alone takes
    # ~5.5 min; this one ~1 min of flow). Kept: 256 eval scenes and 32 steps, so that the two
    # seeds' scores still differ by several steps of mutual kNN's 1/2560 (a tie would be a
    # zero-width interval); the scaling cells are 2, 4, 8 and 16 steps, four distinct budgets
    models = ("good", "bad", "ntp", "image")
    shrink = [
        "world.n_train=800",
        "world.n_eval=256",
        "evaluate.bootstrap=50",
        *(f"train.models.{m}.steps={24 if m == 'image' else 32}" for m in models),
        *(f"train.models.{m}.{k}=32" for m in models for k in ("batch_size", "width")),
    ]
    p = platonic(
        d,
        "ablate",
        str(REPO / "configs" / "table7.yaml"),
        "--quick",
        "--json",
        "--set",
        "seeds=[0, 1]",  # two seeds give every interval; a third is CI time
        "--set",  # two rows: a disjoint pair (the rotation) and the scaling row; rows' own
        # `set` (another world) is covered by tests/test_ablation.py and the dose recipes
        "rows={paraphrase: {label: alt-text + text-only paraphrase, good_sources: [alt, paraphrase], "
        "text_sources: [alt, paraphrase]}, recaptions: {label: two recaptions, good_sources: [recap], "
        "text_sources: [recap]}}",
        *(a for s in shrink for a in ("--base-set", s)),
    )
    assert p.returncode == 0, p.stderr[-4000:]
    return d, json.loads(p.stdout)


def test_grid_is_complete_with_seed_intervals(quick):
    d, res = quick
    table = res["summary"]["table"]["mutual_knn"]
    assert set(table) == {"paraphrase", "recaptions"}
    for row in table.values():
        assert set(row) == {"good", "bad", "ntp"}
        for cell in row.values():
            assert cell["n"] == 2 and cell["ci"][0] < cell["mean"] < cell["ci"][1]
    out = Path(res["output_dir"])
    for f in ("cells.json", "summary.json", "table.md", "curves.png", "scaling.png"):
        assert (out / f).stat().st_size > 0, f
    cells = json.loads((out / "cells.json").read_text())
    # every score names the runs behind it
    assert all(r["runs"]["evaluate"] and r["runs"][f"train:{r['column']}"] for r in cells["records"])


def test_shared_stages_were_computed_once(quick):
    d, res = quick
    store = d / ".platonic" / "artifacts"
    n = {s: len(list((store / s).glob("*/manifest.json"))) for s in ("world", "ingest", "positives", "dedup", "views")}
    assert n == {"world": 1, "ingest": 1, "positives": 1, "dedup": 1, "views": 2}, n  # views: one per row
    assert len(list((store / "train" / "image").glob("*/manifest.json"))) == 2  # one per seed


def test_efficiency_rotation_and_scaling_are_reported(quick):
    _, res = quick
    s = res["summary"]
    for row in s["efficiency"]["rows"].values():
        assert len(row["per_seed"]) == 2
        assert row["seeds_reached"] + row["seeds_by_first_checkpoint"] + row["seeds_not_reached"] == 2
    disjoint = [r for r in s["rotations"] if r["disjoint_sources"]]
    assert {r["column"] for r in disjoint} == {"good", "bad", "ntp"}  # paraphrase <-> recaptions
    sc = s["scaling"]
    assert sc["heldout_runs"] == 2 and sc["fitted_runs"] == 8 and sc["samples"] not in sc["fitted_budgets"]
    assert sc["interval"][0] < sc["prediction"] < sc["interval"][1]


@pytest.fixture(scope="module")
def answers(quick):
    """The read commands over the grid as a user types them in its folder, in one child process
    (conftest.cli_table: a process per command is seconds of imports each)."""
    d, res = quick
    cases = [
        ["table --json", ["table", "table7", "--json"]],
        ["table", ["table", "table7"]],
        ["forecast good", ["forecast", "table7", "--model", "good", "--json"]],
        ["forecast bad", ["forecast", "table7", "--model", "bad"]],
        ["table missing", ["table", "no_such_experiment"]],
        ["lineage", ["lineage", res["run_id"], "--json"]],
    ]
    return cli_table(cases, d, user_env())


def test_table_reads_the_grid_back_from_mlflow(quick, answers):
    _, res = quick
    p = answers["table --json"]
    assert p["code"] == 0, p["stderr"][-2000:]
    back = json.loads(p["stdout"])
    assert back["run_id"] == res["run_id"]
    assert back["table"]["mutual_knn"] == res["summary"]["table"]["mutual_knn"]
    p = answers["table"]
    assert "two recaptions" in p["stdout"] and "good views" in p["stdout"] and p["code"] == 0


def test_forecast_predicts_the_held_out_budget(quick, answers):
    _, res = quick
    p = answers["forecast good"]
    assert p["code"] == 0, p["stderr"][-2000:]
    f = json.loads(p["stdout"])
    assert f["row"] == "recaptions" and len(f["actual"]) == 2 and f["samples"] not in f["fitted_budgets"]
    assert f["prediction"] == pytest.approx(res["summary"]["scaling"]["prediction"])
    p = answers["forecast bad"]
    assert p["code"] == 2 and "scaling" in p["stderr"]  # one budget only: a clear error
    p = answers["table missing"]
    assert p["code"] == 1 and "no MLflow experiment" in p["stderr"]


def test_lineage_of_the_ablation_reaches_every_cell_and_the_world(answers):
    p = answers["lineage"]
    assert p["code"] == 0, p["stderr"][-2000:]
    tree = json.loads(p["stdout"])
    assert tree["stage"] == "ablation"
    stages = set()

    def walk(n):
        stages.add(n["stage"])
        for u in n.get("upstream", []):
            walk(u)

    walk(tree)
    assert {"world", "views", "train:good", "train:image", "curve:ntp", "evaluate"} <= stages
