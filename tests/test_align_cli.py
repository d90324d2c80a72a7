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

pytestmark = pytest.mark.e2e  # the CLI as a subprocess (the error table: in this process, one line each)


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
    np.save(tmp_path / "flat.npy", np.ones((120, 16), np.float32))  # every sample one point (issue 33)
    # files from anywhere: corrupt, forged, pickled
    (tmp_path / "corrupt.pt").write_bytes(b"PK\x03\x04" + b"\x00" * 60)
    with open(tmp_path / "huge.npy", "wb") as f:  # the header claims 36 TB, the file holds 64 bytes
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (3_000_000,) * 2})
        f.write(b"\x00" * 64)
    torch.save({"features": Pickled()}, tmp_path / "pickle.pt")
    torch.save(torch.zeros(1).expand(200_000, 200_000), tmp_path / "expanded.pt")  # 160 GB view of 4 bytes
    return tmp_path


class Pickled:
    """Not a tensor: weights_only refuses to unpickle it."""


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
        (("a.npy", "flat.npy"), "every sample is the same point"),
        (("a.npy", "short.npy"), "sample counts differ"),
        (("short.npy", "short.npy", "--k", "50"), "at least k+1"),
        (("a.npy", "missing.npy"), "no such feature file"),
        (("a.npy", "a.npy", "--k", "0"), "k = 0"),
        (("a.npy", "a.npy", "--k", "-3"), "k = -3"),
        (("a.npy", "a.npy", "--k", "120"), "at least k+1"),
        (("a.npy", "corrupt.pt"), "corrupt.pt: not a readable torch file"),
        (("huge.npy", "a.npy"), "huge.npy: header declares shape (3000000, 3000000)"),
        (("a.npy", "pickle.pt"), "pickle.pt: holds pickled Python objects"),
        (("a.npy", "expanded.pt"), "expanded.pt: a tensor of shape (200000, 200000)"),
    ],
)
def test_errors_are_one_line_exit_2(files, args, needle):
    from typer.testing import CliRunner

    from platonic.flows.cli import app

    argv = [str(files / a) if a.endswith(("npy", "npz", "pt", "parquet")) else a for a in args]
    p = CliRunner().invoke(app, ["align", *argv])
    assert p.exit_code == 2 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith("error: ") and not p.stdout, p.stdout
