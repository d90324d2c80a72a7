"""The artifact store (platonic_core/artifacts.py): per-file digests, verification of a
cache hit, staging scratch of dead producers, locations relative to the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from platonic.core.artifacts import _HOST as HOST
from platonic.core.artifacts import ArtifactStore, Manifest, folder_digest, verify


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
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    parent = store.folder("views", "k0").parent
    stale = parent / f".k0.tmp-{HOST}-{int(dead.stdout)}"
    live = parent / f".k2.tmp-{HOST}-{os.getppid()}"
    other_host = parent / f".k3.tmp-elsewhere-{int(dead.stdout)}"
    for d in (stale, live, other_host):
        d.mkdir(parents=True)
    store.staging("views", "k1")
    assert not stale.exists()
    assert live.exists() and other_host.exists()
