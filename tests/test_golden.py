"""Golden checks: `configs/tiny.yaml` through the real pipeline flow, stage by stage, against
pins that hold on any machine. Each part catches a different change:

1. Data stages (world, ingest, positives, dedup, views): content pins (`content_digest`: the
   files' bytes, each Parquet file by its table). These stages do no float reductions whose
   order a CPU chooses, so their content is the same everywhere. Catches any change to the
   world's generator, ingest's normalisation and quarantine, the positives' texts, dedup's
   decisions or the views' shards.
2. Trained stages (train:*, embed:*, ceiling, evaluate), portably: a fingerprint of what
   each computed, within stated tolerances of pinned values (`tests/fixtures/golden_tiny.json`):
   - train: every final loss term (rtol 1e-3) and every weight tensor's name, shape and L2
     norm (|Δ| ≤ 0.03 + 1e-3·norm). Catches a change to the loss, SIGReg, the optimiser, the
     schedule, initialisation, the sampler's order, the model's layout.
   - embed: every feature array's shape and RMS (rtol 3e-2). Catches a change of pooling,
     layer selection, tokenisation at embedding time.
   - ceiling and evaluate: the oracle scores and each model's mutual kNN (|Δ| ≤ 0.04: at
     n = 64, k = 5 one neighbour is 1/320 ≈ 0.003). Not the bootstrap CI: at 50 resamples
     one neighbour moved its lower bound by 0.016. Catches a gross change to a metric or to
     which features are scored; the metrics' fine behaviour is pinned by their unit tests
     (test_metrics*.py).
   The tolerances come from a measurement: the same recipe with torch's kernels forced to
   another ISA (`ATEN_CPU_CAPABILITY=default` against AVX2, AMD EPYC family 25 model 1) moved
   the final losses by at most 1e-5 (relative), weight norms of the matrices by at most 1e-5,
   but the biases that feed a BatchNorm (their gradient is zero up to rounding, so Adam turns
   rounding into ±lr steps) by up to 0.012 in norm, feature RMS by up to 4e-3 (relative), and
   mutual kNN by one neighbour (0.003), an oracle score by three (0.009). Every tolerance is
   several times that and far below what a change to the computation moves: SIGReg's
   trapezoid end weights set to 2·dt (a 0.2% change of SIGReg) fails part 2 on 9 loss terms
   (docs/benchmarks.md, "Golden checks").
3. Determinism on this machine: each trained stage retrained in this process from the
   pipeline's own input artifacts writes the same weight bytes as the pipeline did. Catches
   an unseeded draw, a thread- or order-dependent reduction, a dict-order dependence.
4. Where this CPU kind has byte pins of its own (TRAINED_PINS, keyed by `cpu_kind()`), the
   trained stages' content digests must match them exactly: an extra check, never required.

Why Parquet by its table: a Parquet file's footer names its writer (`created_by:
parquet-cpp-arrow version 26.0.1`), so one table written by two pyarrow versions has two
byte digests. pyarrow 26 (released while these pins were pinned at 25) moved every data pin
and every embed pin in CI, the content being the same.

Re-pinning after an intended change (bump the stage's version): `PLATONIC_GOLDEN_REPIN=1
pytest tests/test_golden.py` rewrites the fingerprint file from this machine's run, then say
why in the commit with the scores before and after.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.e2e

FINGERPRINT = Path(__file__).parent / "fixtures" / "golden_tiny.json"
TRAINED = ("train:", "embed:", "ceiling", "evaluate")

# part 1: the data stages, the same bytes on every machine
PINNED = {
    "world": "8014e6a1cb152e523fdafa3631d2071ecc8988e8f94199580fd3cd9faa9c8192",
    "ingest": "47173d7693a6cb4b73bfaf67d6d4f98f382c643b395c62241bd0f299cd4531e8",
    "positives": "3fd6030f1677fbb3f440f2d9bacaa9a315d6abd4bf805fb6f898183b465e6f13",
    "dedup": "ed969536f380404c264fd7da23d7448891b726ecdc254ffb437b92f0f9298757",
    "views": "377ea11f05c503751e5f2118dc2ec8ee7afb120de6c7bb05f6c27989b7831c66",
}

# part 4: trained bytes where a CPU kind's pins are known (torch==2.13.0, CPU build). The
# AMD EPYC family 25 model 1 pins are the project's first (its kind was recorded later).
_AVX2_EPYC = {
    "train:image": "43e6c33d3d30692232465790ae23c372ab95663b3269d7146df9454e1b20ba3c",
    # embed:image: its pin was of the files' bytes (before content_digest); none of this kind
    # was at hand to take it again
    # ceiling 2 and evaluate 4: BCa bootstrap intervals (scipy), re-pinned on this kind
    "ceiling": "c787e5b11cff23142d7b1ca4cb106e7a1bb562c5dd01f0f2864ab755846dea90",
}
# train 3 (next-token's fused cross-entropy, padding-free forwards) moved the text models'
# bytes: the kinds pinned before it keep their image-side pins only (PARTIAL_PINS) until a
# machine of theirs re-pins; family 25 model 17 was pinned at train 3, and its next-token
# pins again at train 5 (the output layer's fused softmax; the fingerprint of part 2 held).
TRAINED_PINS = {
    "AuthenticAMD family 25 model 17 AVX512": {
        "train:image": "a79360ff26b1dbeb0c5d4e03f54e8a9216432f8939091f6e3b497b6d595df8bd",
        "train:good": "37e6d01ccbcca599596d3ad4786abd579242fd44878dc688355a96ff901ef83d",
        "train:ntp": "29673f9c35a72d8085ea07b4516d88a0042025a3ecf4360d5ce5b86f6a828ce9",
        "train:bad": "5dd8f2b796b8fd1f5c3cc719aa16e3021d050d43ccff972941b7d09bfc386132",
        "embed:image": "86b8d7461809037b9021b242b2e36841762a140d10b62f12d37fd75e12c94320",
        "embed:good": "a123d73bed2a233485e1cd3cc5f3371d8d6daa622f02c27033de1c8eb99cc2a9",
        "embed:ntp": "800a98bc220fceb70c6819f8ba3f09458bf19fae4389319cbe3f8e54d021a5dd",
        "embed:bad": "f20dd72be95fa02dc03b3d1db0519b34587bc8c20aa832f4937c042b9c54de6b",
        "ceiling": "cdfcc5e5ec108afedb4473edcd8b4fe235cc40572f2969b1a417d9bb772458e5",
        "evaluate": "63a123444b28bff038990e3ac29c16ad31d1eb8d6808c4eae0b23e6470895d4c",
    },
    "AuthenticAMD family 25 model 1 AVX2": _AVX2_EPYC,
    "AuthenticAMD family 26 model 2 AVX512": {
        "train:image": "a79360ff26b1dbeb0c5d4e03f54e8a9216432f8939091f6e3b497b6d595df8bd",
        # embed:image: its byte pin equalled family 25 model 17's, so its content digest does too
        "embed:image": "86b8d7461809037b9021b242b2e36841762a140d10b62f12d37fd75e12c94320",
        # ceiling and evaluate: not re-pinned since their BCa intervals (ceiling 2, evaluate 4);
        # no machine of this kind was at hand. Re-pin there: drop the kind from PARTIAL_PINS, run, copy.
    },
}


PARTIAL_PINS = {"AuthenticAMD family 25 model 1 AVX2", "AuthenticAMD family 26 model 2 AVX512"}


# rows name their upstream artifact by its byte digest (ingest: `world:99d96d4f311f8bb5/
# alt_texts.parquet#199`, carried on by positives and dedup): masked (`world:*/...`), since
# that digest moves with the writer's version as the files' bytes do; it is pinned upstream
UPSTREAM_REF = re.compile(r"([a-z][a-z_:]*):[0-9a-f]{16}/")
TEXT_SUFFIXES = (".json", ".md", ".txt")


def table_digest(path: Path) -> str:
    """sha256 of a Parquet file's table: each column's name, type and values, in order; not
    the file's bytes (the writer's name and version, row groups, compression)."""
    import pyarrow.parquet as pq

    h = hashlib.sha256()
    for field, column in zip((t := pq.read_table(path)).schema, t.columns, strict=True):
        h.update(UPSTREAM_REF.sub(r"\1:*/", f"{field.name}\0{field.type}\0{column.to_pylist()!r}\n").encode())
    return h.hexdigest()


def content_digest(stage: dict) -> str:
    """A stage's digest as the manifest combines it, from each file's content: a Parquet
    file's table, a text file's text, both with upstream references masked; else its bytes."""
    from platonic.core.artifacts import combined_digest

    def digest(name: str, recorded: str) -> str:
        if name.endswith(".parquet"):
            return table_digest(where / name)
        if name.endswith(TEXT_SUFFIXES):
            return hashlib.sha256(UPSTREAM_REF.sub(r"\1:*/", (where / name).read_text()).encode()).hexdigest()
        return recorded

    where = Path(stage["uri"])
    files = json.loads((where / "manifest.json").read_text())["files"]
    return combined_digest({n: digest(n, d) for n, d in files.items()})


def cpu_kind() -> str:
    """What trained bytes depend on beyond torch's version: the CPU (vendor, family, model:
    its kernels' reduction order) and the vector ISA torch dispatches to."""
    import torch

    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""

    def field(name: str) -> str:
        found = re.search(rf"^{name}\s*:\s*(.*)$", info, re.M)
        return found.group(1).strip() if found else platform.processor() or "?"

    return (
        f"{field('vendor_id')} family {field('cpu family')} model {field('model')} "
        f"{torch.backends.cpu.get_cpu_capability()}"
    )


# ---- part 2: the portable fingerprint ------------------------------------------------------

# (relative, absolute) tolerance per kind of value: |got - pinned| <= abs + rel * |pinned|
TOLERANCE = {"loss": (1e-3, 0.0), "norm": (1e-3, 0.03), "rms": (3e-2, 0.0), "score": (0.0, 0.04)}


def fingerprint(res: dict) -> dict[str, tuple[str, float]]:
    """name -> (kind of value, value) for everything the trained stages computed that is
    portable across CPUs within TOLERANCE; shapes ride in the names, so a shape change is a
    missing and an unexpected entry."""
    from safetensors.numpy import load_file

    fp: dict[str, tuple[str, float]] = {}
    for inst, stage in res["stages"].items():
        where = Path(stage["uri"])
        if inst.startswith("train:"):
            stats = json.loads((where / "manifest.json").read_text())["stats"]
            fp |= {f"{inst} {k}": ("loss", v) for k, v in stats.items() if k.startswith("final_")}
            for name, t in load_file(where / "model.safetensors").items():
                fp[f"{inst} norm {name} {list(t.shape)}"] = ("norm", float(np.linalg.norm(t.astype(np.float64))))
        elif inst.startswith("embed:"):
            with np.load(where / "features.npz") as z:
                for name in z.files:
                    a = z[name].astype(np.float64)
                    fp[f"{inst} rms {name} {list(a.shape)}"] = ("rms", float(np.sqrt(np.mean(a**2))))
    fp |= {f"ceiling {k}": ("score", v) for k, v in res["ceilings"].items()}
    for model, m in res["models"].items():
        fp[f"evaluate {model} mutual_knn"] = ("score", m["mutual_knn"])
    return fp


def fingerprint_diffs(got: dict[str, tuple[str, float]], pinned: dict[str, tuple[str, float]]) -> list[str]:
    diffs = []
    for name in sorted(pinned.keys() | got.keys()):
        if name not in got or name not in pinned:
            diffs.append(f"  {name}: {'missing' if name not in got else 'not pinned'}")
            continue
        kind, want = pinned[name]
        rel, ab = TOLERANCE[kind]
        value = got[name][1]
        if not math.isfinite(value) or abs(value - want) > ab + rel * abs(want):
            diffs.append(f"  {name}: pinned {want:.6g}, got {value:.6g} (tolerance {ab:g} + {rel:g}·|pinned|)")
    return diffs


def test_data_stages_match_their_byte_pins(tiny_run):
    """Part 1 (see the module docstring)."""
    _, res = tiny_run
    got = {k: content_digest(res["stages"][k]) for k in PINNED}
    diffs = [f"  {k}: expected {PINNED[k]}\n  {' ' * len(k)}       got {got[k]}" for k in PINNED if got[k] != PINNED[k]]
    assert not diffs, (
        f"{len(diffs)} data stage digest(s) of configs/tiny.yaml differ from the pins (the same on every machine):\n"
        + "\n".join(diffs)
        + "\nIf intended (a semantic change, stage version bumped), update PINNED in tests/test_golden.py in the "
        "same commit and say why."
    )
    trained = {k for k in res["stages"] if k.startswith(TRAINED)}
    assert set(res["stages"]) == set(PINNED) | trained, (
        f"stages neither pinned nor fingerprinted: {sorted(res['stages'])}"
    )


def test_trained_stages_match_their_portable_fingerprint(tiny_run):
    """Part 2 (see the module docstring)."""
    _, res = tiny_run
    got = fingerprint(res)
    if os.environ.get("PLATONIC_GOLDEN_REPIN") == "1":
        FINGERPRINT.write_text(json.dumps({"cpu_kind": cpu_kind(), "values": got}, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"re-pinned {FINGERPRINT.name} from this run ({cpu_kind()}): commit it with the reason")
    pinned = {k: tuple(v) for k, v in json.loads(FINGERPRINT.read_text())["values"].items()}
    diffs = fingerprint_diffs(got, pinned)
    assert not diffs, (
        f"{len(diffs)} value(s) the trained stages of configs/tiny.yaml computed are outside their tolerance "
        f"(CPU: {cpu_kind()}):\n" + "\n".join(diffs) + "\nA change to what training, embedding or evaluation "
        "computes. If intended (stage version bumped): PLATONIC_GOLDEN_REPIN=1 pytest tests/test_golden.py, and "
        "say why in the commit."
    )


def test_trained_stages_are_deterministic_on_this_machine(tiny_run, tmp_path):
    """Part 3: each trained stage, retrained here from the pipeline's input artifact, writes
    the pipeline's weight bytes."""
    from platonic.core.config import load_config
    from platonic.core.train import run_train

    _, res = tiny_run
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml")
    differ = []
    for model, mcfg in cfg.train.models.items():
        data = res["stages"]["world" if mcfg.kind == "image_jepa" else "views"]["uri"]
        out = tmp_path / model
        out.mkdir()
        run_train(mcfg, cfg.seed, Path(data), out, show_progress=False)
        ours = Path(res["stages"][f"train:{model}"]["uri"]) / "model.safetensors"
        if ours.read_bytes() != (out / "model.safetensors").read_bytes():
            differ.append(model)
    assert not differ, f"retrained from the same inputs on this machine, {differ} wrote other weight bytes"


def test_trained_stages_match_this_cpu_kinds_byte_pins(tiny_run):
    """Part 4: only where this CPU kind has byte pins."""
    kind = cpu_kind()
    if kind not in TRAINED_PINS:
        pytest.skip(f"this CPU kind ({kind!r}) has no trained byte pins: parts 2 and 3 cover it")
    _, res = tiny_run
    pinned = TRAINED_PINS[kind]
    got = {k: content_digest(v) for k, v in res["stages"].items() if k.startswith(TRAINED)}
    # a kind whose pins lag a stage's new version leaves that stage out (PARTIAL_PINS): parts 2
    # and 3 still cover it
    diffs = [
        f"  {k}: expected {pinned.get(k)}\n  {' ' * len(k)}       got {got.get(k)}"
        for k in (pinned if kind in PARTIAL_PINS else pinned | got)
        if pinned.get(k) != got.get(k)
    ]
    assert not diffs, f"{len(diffs)} trained stage digest(s) differ from {kind}'s byte pins:\n" + "\n".join(diffs)
