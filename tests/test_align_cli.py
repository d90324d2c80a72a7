"""`platonic align` on feature files in every supported format."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

pytestmark = pytest.mark.e2e  # every test runs the CLI as a subprocess


def align(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "platonic.flows.cli", "align", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 120, 16)).astype(np.float32)  # (L, N, D)
    noise = rng.standard_normal((120, 16)).astype(np.float32)
    np.save(tmp_path / "a.npy", x)
    np.savez(tmp_path / "b.npz", layer_0=noise, layer_1=x[1] + 0.01 * noise)
    torch.save(torch.from_numpy(x[2]), tmp_path / "c.pt")
    pq.write_table(pa.table({f"layer_{i}": list(x[i]) for i in range(3)}), tmp_path / "d.parquet")
    np.save(tmp_path / "nan.npy", np.full((120, 16), np.nan, np.float32))
    np.save(tmp_path / "short.npy", x[0, :50])
    return tmp_path


def test_best_layer_pair_across_formats(files):
    p = align(files / "a.npy", files / "b.npz", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert (out["layer_a"], out["layer_b"]) == (1, 1) and out["mutual_knn"] > 0.8
    out = json.loads(align(files / "a.npy", files / "c.pt", "--json", "--metric", "cka").stdout)
    assert out["layer_a"] == 2 and out["cka"] == pytest.approx(1.0, abs=1e-3)  # .pt holds layer 2
    out = json.loads(align(files / "a.npy", files / "d.parquet", "--json", "--metric", "cka").stdout)
    assert out["layer_a"] == out["layer_b"] and out["cka"] == pytest.approx(1.0, abs=1e-3)  # same stack


@pytest.mark.parametrize(
    "args,needle",
    [
        (("a.npy", "nan.npy"), "NaN"),
        (("a.npy", "short.npy"), "sample counts differ"),
        (("short.npy", "short.npy", "--k", "50"), "at least k+1"),
        (("a.npy", "missing.npy"), "no such feature file"),
        (("a.npy", "a.npy", "--metric", "svcca"), "unknown metric"),
    ],
)
def test_errors_are_one_line_exit_2(files, args, needle):
    p = align(*[files / a if a.endswith(("npy", "npz", "pt", "parquet")) else a for a in args])
    assert p.returncode == 2 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
