"""Fault injection on real flows (tiny recipe): a run killed with SIGKILL at a stage boundary
resumes to the same results; a corrupted cached artifact of every kind is detected and
rebuilt, never fed downstream; a copied out_dir reads its own files.

    pytest -m faults        (also part of the default run)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from platonic.core.artifacts import Manifest, verify
from platonic.core.config import load_config

pytestmark = [pytest.mark.faults, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"


def run_flow(out_dir: Path, sets: tuple[str, ...] = ()) -> dict:
    from platonic.flows.pipeline import pipeline

    return pipeline(load_config(TINY, [f"out_dir={out_dir}", *sets]).model_dump(mode="json"))


def executed(res: dict) -> set[str]:
    """Stage instances this flow run executed (not cache hits)."""
    c = MlflowClient(res["tracking_uri"])
    parent = c.get_run(res["run_id"])
    kids = c.search_runs([parent.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{res['run_id']}'")
    return {r.data.tags["platonic.stage_instance"] for r in kids if r.data.tags["platonic.cache_hit"] == "false"}


def scores(res: dict) -> dict:
    """What a rerun must reproduce: every model's score, interval and layers, and the oracles
    (not the ids of the MLflow runs that produced them)."""
    models = {m: {k: v for k, v in row.items() if not k.endswith("_run_id")} for m, row in res["models"].items()}
    return {"models": models, "ceilings": res["ceilings"]}


def artifact(out: Path, instance: str) -> Path:
    """The one committed artifact folder of a stage instance in out_dir's store."""
    (folder,) = [m.parent for m in (out / "artifacts" / instance.replace(":", "/")).glob("*/manifest.json")]
    return folder


@pytest.fixture(scope="module")
def reference(tmp_path_factory, prefect_harness) -> dict:
    return run_flow(tmp_path_factory.mktemp("reference"))


# one file per artifact kind: safetensors weights, Parquet tables, .npy renders, .npz
# features, JSON scores
CORRUPTIONS = [
    ("train:good", "model.safetensors"),
    ("views", "good_views.parquet"),
    ("world", "renders.npy"),
    ("embed:image", "features.npz"),
    ("ceiling", "ceiling.json"),
]


def test_corrupt_cached_artifacts_are_detected_and_rebuilt(reference, tmp_path):
    out = tmp_path / "out"
    run_flow(out)
    for instance, name in CORRUPTIONS:
        path = artifact(out, instance) / name
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # one flipped byte, same size
        path.write_bytes(bytes(data))
        assert verify(Manifest.read(path.parent)) == f"{name} changed after it was committed (sha256 differs)"
        again = run_flow(out)
        assert instance in executed(again), f"corrupt {instance}/{name} was used as a cache hit"
        assert scores(again) == scores(reference), instance
        assert verify(Manifest.read(artifact(out, instance))) is None


def test_missing_and_added_files_fail_verification(reference, tmp_path):
    out = tmp_path / "out"
    run_flow(out)
    folder = artifact(out, "views")
    (folder / "stray.txt").write_text("x")
    assert verify(Manifest.read(folder)) == "stray.txt was added after it was committed"
    (folder / "stray.txt").unlink()
    (folder / "meta.json").unlink()
    assert verify(Manifest.read(folder)) == "meta.json is missing"
    assert "views" in executed(run_flow(out))


def test_copied_out_dir_reads_its_own_files(reference, tmp_path):
    src = tmp_path / "src"
    run_flow(src)
    dst = tmp_path / "dst"
    shutil.copytree(src, dst)
    shutil.rmtree(src / "artifacts")  # were the copy to read the original's files, this breaks it
    for m in (dst / "artifacts").rglob("manifest.json"):
        assert not Path(json.loads(m.read_text())["uri"]).is_absolute(), m
        assert Manifest.read(m.parent).path == m.parent.resolve()
    again = run_flow(dst)
    assert executed(again) == set()
    assert scores(again) == scores(reference)
    # MLflow's artifact locations moved with it: the rerun's results are logged into the copy
    c = MlflowClient(again["tracking_uri"])
    assert c.get_run(again["run_id"]).info.artifact_uri.startswith((dst / "mlartifacts").resolve().as_uri())
    assert not list((src / "mlartifacts").rglob(f"*{again['run_id']}*"))


def _cli_run(out: Path) -> subprocess.Popen:
    """`platonic run` on the tiny recipe as a user starts it, against the session's Prefect
    server (not a temporary one: that start is not what is tested here)."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PREFECT_API_URL": PREFECT_API_URL.value()}
    return subprocess.Popen(
        [sys.executable, "-m", "platonic.flows.cli", "run", str(TINY), "--set", f"out_dir={out}"],
        cwd=out.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: SIGKILL reaches the run and its children
    )


# in execution order, one per kind of work (generated data, resumable positives, training,
# scoring); each kill lands just after that stage's artifact is committed, while the
# next stage runs
BOUNDARIES = ["world", "positives", "train:good", "ceiling"]


def test_sigkill_at_every_stage_boundary_then_rerun_gives_the_same_results(reference, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for boundary in BOUNDARIES:
        store = out / "artifacts" / boundary.replace(":", "/")
        proc = _cli_run(out)
        deadline = time.monotonic() + 300
        try:
            while not any(store.glob("*/manifest.json")):
                assert proc.poll() is None, f"the run ended (rc {proc.returncode}) before {boundary} committed"
                assert time.monotonic() < deadline, f"{boundary} not committed within 300 s"
                time.sleep(0.02)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    again = run_flow(out)
    assert not set(BOUNDARIES) & executed(again)  # what was committed before a kill is reused
    assert scores(again) == scores(reference)
    assert scores(json.loads((Path(again["output_dir"]) / "results.json").read_text())) == scores(reference)


def test_a_disk_that_fills_during_ingest_then_grows_reruns_cleanly(tmp_path):
    """configs/tiny.yaml's world and ingest stages on a 4 MB tmpfs (the MLflow store and the
    artifacts on it): the run fails with one line saying the disk is full, naming the path,
    and leaves no manifest that is not whole; remounted at 64 MB, the rerun succeeds."""
    from platonic.core.artifacts import ArtifactStore
    from platonic.core.durable import DiskFullError
    from platonic.core.stages.dag import RUN, SKIP, instances
    from platonic.tasks.executor import run_instances
    from platonic.tasks.runs import parent_run

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        cfg = load_config(TINY, [f"out_dir={disk / 'out'}"])
        modes = {i.id: RUN if i.stage in ("world", "ingest") else SKIP for i in instances(cfg)}

        def run():
            with parent_run(cfg.out_dir, "full-disk", "full-disk", {}, {}) as ctx:
                return run_instances(cfg, instances(cfg), modes, ctx)

        with pytest.raises(DiskFullError) as e:
            run()
        assert "no space left" in str(e.value) and str(disk) in str(e.value)
        for m in (disk / "out" / "artifacts").rglob("manifest.json"):
            assert Manifest.read(m.parent)  # whatever is committed is whole
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        done = run()
        assert {"world", "ingest"} <= set(done)
        for m in done.values():
            assert verify(m) is None and ArtifactStore.of(cfg.out_dir).lookup(m.stage, m.cache_key) is not None
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
