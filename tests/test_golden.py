"""Golden digests: `configs/tiny.yaml` through the real pipeline flow gives, stage by
stage, the same content digest as the pinned reference run.

A digest is a hash of a stage's output bytes, so a change here means a stage now writes
different bytes. If that is intended (a semantic change, and the stage's version was
bumped), update the pins in the same commit and say why in the commit message. Trained
weights (train:*, and so embed:*, ceiling and evaluate) are only byte-stable on the same
CPU kind and torch version: they are pinned per CPU kind (TRAINED_PINS), all from
torch==2.13.0 (CPU).
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

# the data stages: the same bytes on every machine
PINNED = {
    "world": "99d96d4f311f8bb5de16e78165119901c228afa4d8d415a8fe72081c21a68bf1",
    "ingest": "d5d001de8d3ade64e7e91a857069e90419502ef4c9c9737341113df61ff36368",
    "positives": "6f834ed095229810dc9dd76652f4e1193635884a37d2b9d50eb1fe86ca4d8f36",
    "dedup": "6493f19b8b8142d7459c2cf0401e72af1329b73b6978f2d58aac78011a7a61fa",
    "views": "bf8244f416140bb8e5355801185b4ac23d8535ddb75c204f2b1af5afa0cc9c1d",
}

# trained weights and what is computed from them, per CPU kind (`cpu_kind()`): float
# reductions differ between kernels, so these bytes are stable only on one kind. The
# first pins came from a machine whose kind was not recorded: they stand for any kind
# not listed.
TRAINED_PINS = {
    "reference": {
        "train:image": "43e6c33d3d30692232465790ae23c372ab95663b3269d7146df9454e1b20ba3c",
        "train:good": "1d3eb3393a2c806d065d68bb5382d34566e8c25733359a7601d531fc39c3ee15",
        "train:ntp": "383b6b0d9b9fe77e92af27950a7ec4ad1ff76829f15c2c01c789049e489353f4",
        "train:bad": "ade0432d2ea1ed8465c08f75ca89f9af068aa2cea5d168ff3f973af1959b7b6f",
        "embed:image": "15ceb25a5ec126c9f952c587802c974d83acefa2acdf94dc9aa56d33e1b42f03",
        "embed:good": "b2f3d05ec1267761c6dbe9ab9b3f32f63c5af9d528f185db6250337e076eba93",
        "embed:ntp": "0d05f22b3beab2fffca97cb5ce120ddc6c8775f6a9758862ee069a381b4b3176",
        "embed:bad": "5876578ed31ce819ef017673aa00c182fa531c1ccae8c82da8fe628fc49e5253",
        "ceiling": "c9abc444c68ba973a6dd3bd7056a2dbfb223284df2a92dabf6a8d8b2c274bb22",
        "evaluate": "a7e8b5a2ef8511eb63b082c9f57ac097c598b1b4153951ff6ce51beaf0efd6e9",
    },
    "AuthenticAMD family 26 model 2 AVX512": {
        "train:image": "a79360ff26b1dbeb0c5d4e03f54e8a9216432f8939091f6e3b497b6d595df8bd",
        "train:good": "7460c8b5dd3047f9292d6eb6bc98334b3ce552abaa60cd747d22fd58e90de546",
        "train:ntp": "5abf3c20eddaf9d0fa7cfea2ae23310b9a700e8d829adeffbac29b2893bc678d",
        "train:bad": "c3750cec768178fb506d4e7695d5a9c4afa2e50c8f14c99e48883af1bf2d5e9d",
        "embed:image": "a5c311794af63e5a92165f1b46ab9495026a2451bc59e0adf34ac90eaf0d8373",
        "embed:good": "218b7203299e6b4a93aeb81429bdd5f525a4dce3e253dae60cd34744cbfd8946",
        "embed:ntp": "7b91ce47b0f20cba59404505ec6223d17c62efdfa6af1ab58b17e0db9b81dda3",
        "embed:bad": "e3c757bb30481554ef3a4446b5704af0ebc6ab695ec09bb89b8746230804a60f",
        "ceiling": "3623cc7d88a5ab40a95b4044c5c618a22e311cc3c4c22b060334666749dcb2dd",
        "evaluate": "caf929c20aecc78e9770cca3affb1e5f2efc8f0a16ab27033e08419022e41f4e",
    },
}


def cpu_kind() -> str:
    """What trained bytes depend on beyond torch's version: the CPU (vendor, family, model:
    its kernels' reduction order) and the widest vector ISA torch dispatches to."""
    import torch

    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""

    def field(name: str) -> str:
        found = re.search(rf"^{name}\s*:\s*(.*)$", info, re.M)
        return found.group(1).strip() if found else platform.processor() or "?"

    return (
        f"{field('vendor_id')} family {field('cpu family')} model {field('model')} "
        f"{torch.backends.cpu.get_cpu_capability()}"
    )


def test_every_stage_digest_matches_its_pin(tiny_run):
    _, res = tiny_run
    kind = cpu_kind()
    pinned = PINNED | TRAINED_PINS.get(kind, TRAINED_PINS["reference"])
    got = {k: v["digest"] for k, v in res["stages"].items()}
    diffs = [
        f"  {k}: expected {pinned.get(k, '<not pinned>')}\n  {' ' * len(k)}       got {got.get(k, '<no such stage>')}"
        for k in [*pinned, *(k for k in got if k not in pinned)]
        if pinned.get(k) != got.get(k)
    ]
    which = kind if kind in TRAINED_PINS else f"reference (this CPU, {kind!r}, has no pins of its own)"
    assert not diffs, (
        f"{len(diffs)} stage digest(s) of configs/tiny.yaml differ from the pins (trained stages: {which}):\n"
        + "\n".join(diffs)
        + "\nA digest change means the stage's bytes changed. If intended (a semantic change, stage version "
        "bumped), update the pins in tests/test_golden.py in the same commit and say why in the commit message. "
        "If only the trained stages differ and this CPU kind has no pins, the difference is the CPU's (float "
        "reductions): add its digests to TRAINED_PINS under its kind (pins: torch==2.13.0 CPU)."
    )
