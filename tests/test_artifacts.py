"""The artifact store (platonic_core/artifacts.py): per-file digests, verification of a
cache hit, staging scratch of dead producers, locations relative to the store."""

from __future__ import annotations

import errno
import json
import logging
import os

import pytest
from conftest import dead_pid

from platonic.core.artifacts import ArtifactStore, Manifest, folder_digest, verify
from platonic.core.durable import HOST, DiskFullError, disk_full


def _commit(store: ArtifactStore, files: dict[str, bytes]) -> Manifest:
    tmp = store.staging("views", "k1")
    for name, data in files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(data)
    return store.commit(tmp, Manifest("views", 1, "k1", "", "", {}, {}, {}, {}, {}))


def test_commit_records_per_file_digests_whose_combination_is_the_folder_digest(tmp_path):
    m = _commit(ArtifactStore(tmp_path), {"a/b": b"1", "a-c": b"2", "x.bin": b"3"})
    assert set(m.files) == {"a/b", "a-c", "x.bin"} == set(m.file_stats)
    assert m.digest == folder_digest(m.path)  # the digest of old manifests is unchanged
    assert verify(m) is None


def test_verify_rehashes_a_file_whose_size_or_mtime_moved(tmp_path):
    m = _commit(ArtifactStore(tmp_path), {"model.safetensors": b"weights" * 100})
    p = m.path / "model.safetensors"
    p.write_bytes(b"weightz" + b"weights" * 99)  # same size, new mtime
    assert verify(m) == "model.safetensors changed after it was committed (sha256 differs)"
    p.write_bytes(b"weights" * 100)  # the same bytes again: rehashed, accepted
    assert verify(m) is None


def test_verify_of_a_manifest_without_file_digests_uses_the_folder_digest(tmp_path):
    m = _commit(ArtifactStore(tmp_path), {"t.bin": b"abc"})
    old = Manifest(**{**json.loads((m.path / "manifest.json").read_text()), "files": {}, "file_stats": {}})
    old.uri = str(m.path)
    assert verify(old) is None
    (m.path / "t.bin").write_bytes(b"abd")
    assert verify(old) == "its content digest differs"


def test_manifest_location_is_relative_to_the_store(tmp_path):
    store = ArtifactStore(tmp_path / "a")
    m = _commit(store, {"t": b"x"})
    assert json.loads((m.path / "manifest.json").read_text())["uri"] == "views/k1"
    (tmp_path / "a").rename(tmp_path / "b")
    moved = ArtifactStore(tmp_path / "b").lookup("views", "k1")
    assert moved.path == (tmp_path / "b" / "views" / "k1").resolve() and verify(moved) is None


def test_staging_sweeps_scratch_of_dead_producers_on_this_host_only(tmp_path):
    store = ArtifactStore(tmp_path)
    dead = dead_pid()
    parent = store.folder("views", "k0").parent
    stale = parent / f".k0.tmp-{HOST}-{dead}"
    live = parent / f".k2.tmp-{HOST}-{os.getppid()}"
    other_host = parent / f".k3.tmp-elsewhere-{dead}"
    for d in (stale, live, other_host):
        d.mkdir(parents=True)
    store.staging("views", "k1")
    assert not stale.exists()
    assert live.exists() and other_host.exists()


# ---- a full disk never leaves a half-committed artifact (issue 33, item 1) ----------------


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_commit_leaves_no_manifest_and_says_so_naming_the_path(tmp_path, monkeypatch):
    store = ArtifactStore(tmp_path)
    tmp = store.staging("views", "k1")
    (tmp / "t.bin").write_bytes(b"x")
    monkeypatch.setattr("platonic.core.durable.os.fsync", _enospc)  # the manifest's write hits a full disk
    with pytest.raises(DiskFullError) as e:
        store.commit(tmp, Manifest("views", 1, "k1", "", "", {}, {}, {}, {}, {}))
    final = store.folder("views", "k1")
    assert "no space left" in str(e.value) and str(final) in str(e.value) and "\n" not in str(e.value)
    assert not (final / "manifest.json").exists() and not final.exists()  # nothing under the final name
    assert not tmp.exists()  # the scratch is given back
    monkeypatch.undo()
    assert store.lookup("views", "k1") is None


def _world_ctx(tmp_path, monkeypatch, calls: list[str]):
    """A real executor context on tmp_path, with the world stage's body replaced by one that
    writes one small file (the cheapest stage there is)."""
    import dataclasses

    from platonic.core.config import load_config
    from platonic.core.stages import SPECS
    from platonic.tasks import tracking
    from platonic.tasks.executor import RunContext

    def compute(call):
        calls.append(call.inst.id)
        (call.out / "scenes.txt").write_text("x")
        return {"n": 1}, {}

    monkeypatch.setitem(SPECS, "world", dataclasses.replace(SPECS["world"], compute=compute))
    cfg = load_config("tiny", [f"out_dir={tmp_path}"])
    c = tracking.client(tmp_path)
    exp = tracking.experiment_id(c, "commit-test", tmp_path)
    return cfg, lambda: RunContext(tmp_path, exp, c.create_run(exp).info.run_id, tracking.tracking_uri(tmp_path))


@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_an_unreadable_manifest_is_a_cache_miss_and_the_stage_reruns_with_a_warning(tmp_path, monkeypatch, damage):
    from platonic.core.contract import StageInstance
    from platonic.core.stages import RUN
    from platonic.tasks.executor import execute

    calls: list[str] = []
    cfg, ctx = _world_ctx(tmp_path, monkeypatch, calls)
    first = execute(StageInstance("world"), cfg, {}, RUN, ctx())
    path = first.path / "manifest.json"
    text = path.read_text()
    path.write_text("" if damage == "empty" else text[: len(text) // 2])
    heard: list[str] = []
    listener = logging.Handler(logging.WARNING)
    listener.emit = lambda record: heard.append(record.getMessage())  # the platonic logger need not propagate
    logging.getLogger("platonic").addHandler(listener)
    try:
        again = execute(StageInstance("world"), cfg, {}, RUN, ctx())
    finally:
        logging.getLogger("platonic").removeHandler(listener)
    assert calls == ["world", "world"]  # re-executed, no traceback
    assert again.digest == first.digest and verify(Manifest.read(again.path)) is None
    (line,) = [m for m in heard if "manifest.json" in m]
    assert str(path) in line and "cache miss" in line


def test_a_full_disk_in_a_stage_commit_is_one_line_naming_the_path(tmp_path, monkeypatch):
    from platonic.core.contract import StageInstance
    from platonic.core.stages import RUN
    from platonic.tasks.executor import execute

    calls: list[str] = []
    cfg, ctx = _world_ctx(tmp_path, monkeypatch, calls)
    run_ctx = ctx()
    monkeypatch.setattr("platonic.core.artifacts.write_atomic", _enospc)
    with pytest.raises(DiskFullError) as e:
        execute(StageInstance("world"), cfg, {}, RUN, run_ctx)
    final = run_ctx.store.root / "world"
    assert str(e.value).startswith("no space left on device") and str(final) in str(e.value)
    assert not list(final.glob("*/manifest.json"))
    monkeypatch.undo()
    assert disk_full(RuntimeError("(sqlite3.OperationalError) database or disk is full"), database="sqlite:///x.db")
    assert disk_full(ValueError("bad")) is None


def test_platonic_verify_rehashes_every_file_and_catches_what_the_fast_path_trusts(tmp_path):
    """The size+mtime fast path's blind spot: bytes rewritten in place, same size, mtime set
    back. A cache hit trusts the file; `verify(full=True)` and `platonic verify` rehash every
    file and name it, exit 1; a sound store exits 0."""
    from typer.testing import CliRunner

    from platonic.flows.cli import app

    m = _commit(ArtifactStore(tmp_path / "artifacts"), {"t.bin": b"abcd", "u.bin": b"xy"})
    ok = CliRunner().invoke(app, ["verify", "--out-dir", str(tmp_path)])
    assert ok.exit_code == 0 and "1 artifacts verified (every file rehashed): 0 changed" in ok.output
    path = m.path / "t.bin"
    st = path.stat()
    path.write_bytes(b"abce")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert verify(Manifest.read(m.path)) is None  # the fast path trusts it
    assert verify(Manifest.read(m.path), full=True) == "t.bin changed after it was committed (sha256 differs)"
    r = CliRunner().invoke(app, ["verify", "--out-dir", str(tmp_path)])
    assert r.exit_code == 1
    assert f"changed: {m.path}: t.bin changed after it was committed (sha256 differs); rebuild it: " in r.output
    assert "platonic run RECIPE --force views" in r.output and "1 changed" in r.output
    missing = CliRunner().invoke(app, ["verify", "--out-dir", str(tmp_path / "nothing")])
    assert missing.exit_code == 2


# ---- issue 43: verify on the default store, symlinked artifact folders ----------------------


def _tamper_in_place(path) -> None:
    """The fast path's blind spot: one byte changed, size kept, mtime set back."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_platonic_verify_checks_the_default_store_in_a_dot_folder(tmp_path, monkeypatch):
    """`.platonic` (the default out_dir) is a dot folder: verify skipped every artifact of it,
    because it tested the parts of the absolute path for a leading dot, not those below the
    artifact root. It printed `0 artifacts verified` and exited 0 over a tampered file."""
    from typer.testing import CliRunner

    from platonic.flows.cli import app

    monkeypatch.delenv("PLATONIC_OUT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    m = _commit(ArtifactStore(tmp_path / ".platonic" / "artifacts"), {"model.safetensors": b"weights" * 100})
    # staging scratch below the root is still not an artifact
    (m.path.parent / ".k2.tmp-elsewhere-1").mkdir()
    (m.path.parent / ".k2.tmp-elsewhere-1" / "manifest.json").write_text("{}")
    ok = CliRunner().invoke(app, ["verify"])
    assert ok.exit_code == 0 and "1 artifacts verified (every file rehashed): 0 changed" in ok.output
    _tamper_in_place(m.path / "model.safetensors")
    r = CliRunner().invoke(app, ["verify"])
    assert r.exit_code == 1, r.output
    assert f"changed: {m.path}: model.safetensors changed after it was committed (sha256 differs)" in r.output
    assert "1 artifacts verified (every file rehashed): 1 changed" in r.output


def test_a_symlinked_artifact_folder_is_named_by_verify_and_replaced_by_the_next_commit(tmp_path):
    """An artifact folder replaced by a symbolic link: verify skipped it without a word, and
    every rerun failed with `Cannot call rmtree on a symbolic link` (no path named). Now verify
    names the link (exit 1), a lookup is a miss that says why, and the commit replaces the
    link, leaving what it pointed to untouched."""
    from typer.testing import CliRunner

    from platonic.flows.cli import app

    store = ArtifactStore(tmp_path / "out" / "artifacts")
    m = _commit(store, {"t.bin": b"abcd"})
    elsewhere = tmp_path / "elsewhere"
    m.path.rename(elsewhere)
    m.path.symlink_to(elsewhere, target_is_directory=True)
    _tamper_in_place(elsewhere / "t.bin")
    r = CliRunner().invoke(app, ["verify", "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 1, r.output
    assert f"{m.path}: a symbolic link to {elsewhere}" in r.output
    heard: list[str] = []
    assert store.lookup("views", "k1", heard.append) is None
    (line,) = heard
    assert str(m.path) in line and "symbolic link" in line and "cache miss" in line
    again = _commit(store, {"t.bin": b"abcd"})  # what the rerun's commit does
    assert not again.path.is_symlink() and verify(again, full=True) is None
    assert (elsewhere / "t.bin").exists()  # the link's target is not the store's to delete
    ok = CliRunner().invoke(app, ["verify", "--out-dir", str(tmp_path / "out")])
    assert ok.exit_code == 0 and "1 artifacts verified (every file rehashed): 0 changed" in ok.output
