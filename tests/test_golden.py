"""Golden digests: `configs/tiny.yaml` through the real pipeline flow gives, stage by
stage, the same content digest as the pinned reference run.

A digest is a hash of a stage's output bytes, so a change here means a stage now writes
different bytes. If that is intended (a semantic change, and the stage's version was
bumped), update PINNED in the same commit and say why in the commit message. Trained
weights (train:*, and so embed:* and evaluate) are only byte-stable on the same CPU kind
and torch version: these pins come from torch==2.13.0 (CPU).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

PINNED = {
    "world": "99d96d4f311f8bb5de16e78165119901c228afa4d8d415a8fe72081c21a68bf1",
    "ingest": "d5d001de8d3ade64e7e91a857069e90419502ef4c9c9737341113df61ff36368",
    "positives": "6f834ed095229810dc9dd76652f4e1193635884a37d2b9d50eb1fe86ca4d8f36",
    "dedup": "6493f19b8b8142d7459c2cf0401e72af1329b73b6978f2d58aac78011a7a61fa",
    "views": "bf8244f416140bb8e5355801185b4ac23d8535ddb75c204f2b1af5afa0cc9c1d",
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
}


def test_every_stage_digest_matches_its_pin(tiny_run):
    _, res = tiny_run
    got = {k: v["digest"] for k, v in res["stages"].items()}
    diffs = [
        f"  {k}: expected {PINNED.get(k, '<not pinned>')}\n  {' ' * len(k)}       got {got.get(k, '<no such stage>')}"
        for k in [*PINNED, *(k for k in got if k not in PINNED)]
        if PINNED.get(k) != got.get(k)
    ]
    assert not diffs, (
        f"{len(diffs)} stage digest(s) of configs/tiny.yaml differ from the pins:\n" + "\n".join(diffs) + "\n"
        "A digest change means the stage's bytes changed. If intended (a semantic change, stage version bumped), "
        "update PINNED in tests/test_golden.py in the same commit and say why in the commit message. "
        "Trained weights are only byte-stable on the same CPU kind and torch version (pins: torch==2.13.0 CPU)."
    )
