"""Fault injection on real flows (tiny recipe): a run killed with SIGKILL at a stage boundary
resumes to the same results; a corrupted cached artifact of every kind is detected and
rebuilt, never fed downstream; a copied out_dir reads its own files.

    pytest -m faults        (also part of the default run)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY, artifact, cli_table, executed, platonic_cli, quiet_env, run_tiny, scores
from mlflow.tracking import MlflowClient

from platonic.core.artifacts import Manifest, verify
from platonic.core.config import load_config

pytestmark = [pytest.mark.faults, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reference(tiny_run) -> dict:
    """The tiny recipe's results, from the session's run of it (the same recipe, run once)."""
    return tiny_run[1]


# one file per artifact kind: safetensors weights, Parquet tables, .npy renders, .npz
# features, JSON scores
CORRUPTIONS = [
    ("train:good", "model.safetensors"),
    ("views", "good_views.parquet"),
    ("world", "renders.npy"),
    ("embed:image", "features.npz"),
    ("ceiling", "ceiling.json"),
]


def test_corrupt_cached_artifacts_are_detected_and_rebuilt(tiny_copy, reference, tmp_path):
    out = tiny_copy(tmp_path / "out")
    for instance, name in CORRUPTIONS:
        path = artifact(out, instance) / name
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # one flipped byte, same size
        path.write_bytes(bytes(data))
        assert verify(Manifest.read(path.parent)) == f"{name} changed after it was committed (sha256 differs)"
        again = run_tiny(out)
        assert instance in executed(again), f"corrupt {instance}/{name} was used as a cache hit"
        assert scores(again) == scores(reference), instance
        assert verify(Manifest.read(artifact(out, instance))) is None


def test_missing_and_added_files_fail_verification(tiny_copy, tmp_path):
    out = tiny_copy(tmp_path / "out")
    folder = artifact(out, "views")
    (folder / "stray.txt").write_text("x")
    assert verify(Manifest.read(folder)) == "stray.txt was added after it was committed"
    (folder / "stray.txt").unlink()
    (folder / "meta.json").unlink()
    assert verify(Manifest.read(folder)) == "meta.json is missing"
    assert "views" in executed(run_tiny(out))


def test_copied_out_dir_reads_its_own_files(reference, tmp_path):
    src = tmp_path / "src"
    run_tiny(src)
    dst = tmp_path / "dst"
    shutil.copytree(src, dst)
    shutil.rmtree(src / "artifacts")  # were the copy to read the original's files, this breaks it
    for m in (dst / "artifacts").rglob("manifest.json"):
        assert not Path(json.loads(m.read_text())["uri"]).is_absolute(), m
        assert Manifest.read(m.parent).path == m.parent.resolve()
    again = run_tiny(dst)
    assert executed(again) == set()
    assert scores(again) == scores(reference)
    # MLflow's artifact locations moved with it: the rerun's results are logged into the copy
    c = MlflowClient(again["tracking_uri"])
    assert c.get_run(again["run_id"]).info.artifact_uri.startswith((dst / "mlartifacts").resolve().as_uri())
    assert not list((src / "mlartifacts").rglob(f"*{again['run_id']}*"))


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


def test_a_failed_stage_is_one_error_line_on_the_terminal_and_its_traceback_in_the_log(tmp_path):
    """`platonic run` whose ingest fills a 4 MB disk: the terminal shows Prefect's one-line
    state changes and one `error:` line that names the full log (no traceback; it was 167
    lines with 8 tracebacks); the log under the store holds the tracebacks."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        p = platonic_cli("run", str(TINY), "--set", f"out_dir={disk / 'out'}", cwd=tmp_path, env=quiet_env(tmp_path))
        assert p.returncode == 1, p.stderr[-3000:]
        assert "Traceback" not in p.stderr and "During handling" not in p.stderr, p.stderr[-3000:]
        (error,) = [line for line in p.stderr.splitlines() if line.startswith("error:")]
        assert "no space left on device" in error
        log = Path(error.split("; full log: ")[1])
        assert log.parent == disk / "out" / "logs"
        text = log.read_text()
        assert "Traceback" in text and "DiskFullError" in text
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _read_only_prefix(folder: Path) -> list[str]:
    """What runs a child that cannot write `folder` once its write bits are gone: nothing for
    a user; for root (who ignores mode bits) `setpriv` without CAP_DAC_OVERRIDE, so root's
    children obey them as a user's do. Skips where that cannot be had."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot make a folder read-only to a child")
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    if subprocess.run([*prefix, "sh", "-c", f'test -w "{folder}"']).returncode == 0:
        pytest.skip("setpriv could not drop CAP_DAC_OVERRIDE here")
    return prefix


def test_a_read_only_store_is_read_by_read_commands_and_refused_by_a_run_in_one_line(tiny_copy, tmp_path):
    """Issue 43: a shared results folder, read-only, every stage cached. `platonic run` (every
    stage a hit, or --only evaluate) failed at `mlflow.db.lock` with Prefect's traceback, and
    `platonic lineage` with a traceback too. Reading works (the MLflow store opens for reading
    without its lock); a run, which records itself in the store, is refused before anything
    starts: one `error:` line saying what to do, exit 2; nothing in the store changes. So is
    every other command that records itself there (ablate, compare, match, caption, audit,
    ingest): before, they failed at their first write, each its own way."""
    out = tiny_copy(tmp_path / "out")
    # the pipeline's run (the session's store holds other flows' runs too: caption, ...)
    results = {r.parent.name: json.loads(r.read_text()) for r in (out / "runs").glob("*/results.json")}
    run_id = next(k for k, r in results.items() if "evaluate" in r.get("stages", {}) and "models" in r)

    def listing() -> dict[str, tuple[int, int]]:
        return {str(f.relative_to(out)): (f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(out.rglob("*"))}

    before = listing()
    for f in [out, *out.rglob("*")]:
        f.chmod(f.stat().st_mode & ~0o222)
    try:
        prefix = _read_only_prefix(out)
        env = quiet_env(tmp_path)

        def cli(*args: str) -> subprocess.CompletedProcess:
            cmd = [*prefix, sys.executable, "-m", "platonic.flows.cli", *args]
            return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

        for extra in ([], ["--only", "evaluate"]):
            p = cli("run", str(TINY), *extra, "--set", f"out_dir={out}")
            lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
            assert p.returncode == 2, p.stderr
            assert len(lines) == 1 and lines[0].startswith(f"error: out_dir {out}: the store is read-only"), p.stderr
            assert "cp -a" in lines[0] and "platonic lineage" in lines[0], lines[0]
            assert p.stdout == ""
            assert not (tmp_path / "prefect-home" / "prefect.db").exists()  # no Prefect server started
        p = cli("lineage", run_id, "--out-dir", str(out))
        assert p.returncode == 0, p.stderr
        assert "evaluate  run" in p.stdout and "train:good  run" in p.stdout, p.stdout
        # every other command that records itself in the store: the same line (one child, cli_table)
        commands = [
            ["ablate", str(ROOT / "configs" / "table7.yaml"), "--quick", "--base-set", f"out_dir={out}"],
            ["compare", str(ROOT / "configs" / "compare_tiny.yaml"), "--set", f"out_dir={out}"],
            ["match", str(ROOT / "configs" / "match_world.yaml"), "--set", f"out_dir={out}"],
            ["caption", str(ROOT / "configs" / "caption_tiny.yaml"), "--set", f"out_dir={out}"],
            ["audit", "--corpus", str(out / "artifacts"), "--eval", "wit_1024", "--out-dir", str(out)],
            ["ingest", str(TINY), "--format", "jsonl", "--out-dir", str(out)],
        ]
        said = cli_table([[args[0], args] for args in commands], tmp_path, env, prefix=tuple(prefix))
        for args in commands:
            r = said[args[0]]
            lines = [ln for ln in r["stderr"].splitlines() if ln.strip()]
            assert len(lines) == 1 and r["code"] == 2, (args[0], r)  # one line, exit 2
            error = lines[0]
            assert error.startswith(f"error: out_dir {out}: the store is read-only"), (args[0], error)
            assert f"cp -a {out} COPY && platonic {args[0]} " in error, error
        assert listing() == before
    finally:
        for f in [out, *out.rglob("*")]:
            f.chmod(f.stat().st_mode | 0o200)


def test_only_over_a_corrupt_cached_artifact_is_one_line_naming_it_and_the_fix(tiny_copy, tmp_path):
    """Issue 43: `--only evaluate` over a corrupt cached `model.safetensors` printed 110 lines
    of Prefect traceback before its error line, exit 1. The cache is verified before anything
    starts (the size+mtime fast path, then the digest of a file that moved): one `error:`
    line names the artifact, what changed and the `--force` that rebuilds it; exit 2; no
    Prefect server starts and no MLflow run is opened."""
    out = tiny_copy(tmp_path / "out")
    folder = artifact(out, "train:good")
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    runs_before = sorted(p.name for p in (out / "runs").iterdir())
    p = platonic_cli(
        "run", str(TINY), "--only", "evaluate", "--set", f"out_dir={out}", cwd=tmp_path, env=quiet_env(tmp_path)
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, p.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    line = lines[0]
    assert str(folder.resolve()) in line and "model.safetensors changed after it was committed" in line, line
    assert "--force train:good" in line and str(TINY) in line, line
    assert p.stdout == ""
    assert not (tmp_path / "prefect-home" / "prefect.db").exists()  # no Prefect server started
    assert sorted(p.name for p in (out / "runs").iterdir()) == runs_before
