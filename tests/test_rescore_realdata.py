"""benchmarks/rescore_realdata.py, the independent re-scorer of a real-data run: its own mutual
k-NN against the definition's two fixed points, its own WordNet reading on the fixture, and
the script on the session's wordnet_tiny run (PASS, exit 0; a changed reported score is a
FAIL, exit 1). The e2e tests skip, saying what to install, like the other real-data tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "rescore_realdata.py"
sys.path.insert(0, str(SCRIPT.parent))

import rescore_realdata as rescore  # noqa: E402


def test_mutual_knn_is_one_for_the_same_features_and_chance_for_random_ones():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 16))
    assert rescore.mutual_knn(x, x, k=10) == 1.0
    assert rescore.mutual_knn(x, 3.0 * x, k=10) == 1.0  # cosine: the scale of a row does not matter
    scores = [rescore.mutual_knn(x, rng.standard_normal((300, 32)), k=10) for _ in range(5)]
    assert np.mean(scores) == pytest.approx(10 / 299, abs=0.006)  # chance: k / (n - 1)
    with pytest.raises(ValueError):
        rescore.mutual_knn(x[:10], x[:10], k=10)  # k neighbours need k + 1 samples


def test_the_own_wordnet_reading_gives_the_hyponym_closure():
    parents, glosses, malformed = rescore.read_data_noun(REPO / "tests" / "fixtures" / "wordnet" / "data.noun")
    assert parents and all(w.startswith("n") and len(w) == 9 for w in parents) and set(glosses) == set(parents)
    assert malformed  # the fixture's deliberately broken lines are skipped and counted, not read
    roots = [w for w, ps in parents.items() if not ps]
    below = rescore.hyponym_closure(roots, parents)
    assert set(roots) <= below <= set(parents) | {p for ps in parents.values() for p in ps}
    toy = {"n1": [], "n2": ["n1"], "n3": ["n2"], "n4": []}  # n3 -@-> n2 -@-> n1
    assert rescore.hyponym_closure(["n2"], toy) == {"n2", "n3"}


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=REPO)


@pytest.mark.e2e
def test_the_rescorer_passes_the_tiny_real_run(wordnet_tiny_run):
    out, _ = wordnet_tiny_run
    r = run_script("--out-dir", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "FAIL" not in r.stdout and lines[-1].startswith("PASS")
    for m in ("good", "bad", "ntp"):  # every model on all 1,000 classes and on the 118 dogs
        assert any(x.startswith(m) and " all " in x and x.endswith("PASS") for x in lines)
        assert any(x.startswith(m) and " dogs " in x and " 118 " in x and x.endswith("PASS") for x in lines)
    assert "held-out synsets 2474, violations 0" in r.stdout


@pytest.mark.e2e
def test_a_changed_reported_score_fails(wordnet_tiny_run, tmp_path):
    out = shutil.copytree(wordnet_tiny_run[0], tmp_path / "out")
    (scores,) = (out / "artifacts" / "evaluate").glob("*/scores.json")
    s = json.loads(scores.read_text())
    s["models"]["good"]["mutual_knn"] += 0.01
    scores.write_text(json.dumps(s))
    r = run_script("--out-dir", str(out))
    assert r.returncode == 1 and "FAIL" in r.stdout


def test_a_missing_store_is_named():
    r = run_script("--out-dir", "/nonexistent/out")
    assert r.returncode == 2 and "/nonexistent/out/artifacts" in r.stderr


@pytest.mark.e2e
def test_an_exported_encoder_read_by_automodel_gives_the_reported_score(wordnet_tiny_run, tmp_path):
    """`platonic export` of the tiny run's good model, re-scored from that folder through
    transformers' AutoModel (--exported): the run's reported scores; another model's folder in
    its place fails."""
    out, res = wordnet_tiny_run
    dest = tmp_path / "good"
    for m in ("good", "bad"):
        cmd = [sys.executable, "-m", "platonic.flows.cli", "export", res["stages"][f"train:{m}"]["run_id"]]
        e = subprocess.run([*cmd, str(tmp_path / m), "--out-dir", str(out)], capture_output=True, text=True)
        assert e.returncode == 0, e.stderr
    (ev,) = (out / "artifacts" / "evaluate").glob("*/scores.json")
    r = run_script("--out-dir", str(out), "--evaluate", str(ev.parent), "--exported", f"good={dest}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"good: features recomputed from {dest}" in r.stdout
    r = run_script("--out-dir", str(out), "--evaluate", str(ev.parent), "--exported", f"good={tmp_path / 'bad'}")
    assert r.returncode == 1 and "FAIL" in r.stdout
