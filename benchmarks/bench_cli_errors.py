"""A user's mistake: how long each command takes to refuse one, typed as a user types it.

    python benchmarks/bench_cli_errors.py               # one run of each case
    python benchmarks/bench_cli_errors.py --repeats 3   # the best of 3 (a shared machine's noise)

Each case is a real `platonic ...` subprocess (the installed console script, as a shell
starts it) in a scratch folder holding the files the cases name: a feature file, a folder, a
recipe with a YAML error, one with an unknown field, a store. Prints a Markdown table:
command -> seconds (wall, from spawn to exit) -> exit code. Target (issue 40): every mistake
answered in under a second. `platonic --help` is the floor: the CLI's own start.

The rows marked "(MLflow)" are not mistakes that can be told without the store: a
well-formed run id that the store does not hold is looked up in MLflow, which takes its
import and the store's opening; they are here for scale.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN_ID = "0123456789abcdef0123456789abcdef"  # well formed (uuid hex), in no store

CASES: list[tuple[str, list[str]]] = [
    ("--help", ["--help"]),
    ("align: a missing file", ["align", "missing.npy", "b.npy"]),
    ("align: a folder", ["align", "folder", "b.npy"]),
    ("align: an unknown format", ["align", "recipe.yaml", "b.npy"]),
    ("align: an unknown metric", ["align", "b.npy", "b.npy", "--metric", "nope"]),
    ("run: a missing recipe", ["run", "missing.yaml"]),
    ("run: a bad --set key", ["run", "tiny.yaml", "--set", "world.nope=1"]),
    ("run: an unknown --only stage", ["run", "tiny.yaml", "--only", "nope"]),
    ("run: an unknown --from stage", ["run", "tiny.yaml", "--from", "nope"]),
    ("run: an unknown --force stage", ["run", "tiny.yaml", "--force", "nope"]),
    ("run: --only on an empty store", ["run", "tiny.yaml", "--only", "evaluate", "--out-dir", "empty"]),
    ("run: a YAML error", ["run", "broken.yaml"]),
    ("run: an unknown field", ["run", "typo.yaml"]),
    ("ingest: a missing path", ["ingest", "missing.jsonl", "--format", "jsonl"]),
    ("ingest: an unknown --format", ["ingest", "data.jsonl", "--format", "nope"]),
    ("export: a malformed run id", ["export", "not/a-run", "dest", "--out-dir", "store"]),
    ("export: DEST is a file", ["export", RUN_ID, "b.npy", "--out-dir", "store"]),
    ("lineage: a malformed run id", ["lineage", "not/a-run", "--out-dir", "store"]),
    ("lineage: no store there", ["lineage", RUN_ID, "--out-dir", "nostore"]),
    ("lineage: a run not in the store (MLflow)", ["lineage", RUN_ID, "--out-dir", "store"]),
]


def platonic() -> str:
    """The console script beside this interpreter (a venv's bin/), else the one on PATH."""
    here = Path(sys.executable).with_name("platonic")
    found = str(here) if here.is_file() else shutil.which("platonic")
    if not found:
        sys.exit("no `platonic` command: pip install -e . first")
    return found


def scratch(root: Path) -> None:
    """The files the cases name (tiny.yaml: the packaged tiny recipe)."""
    import numpy as np

    np.save(root / "b.npy", np.zeros((4, 3), dtype=np.float32))
    (root / "folder").mkdir()
    (root / "data.jsonl").write_text('{"image_id": "a", "text": "a cat"}\n')
    shutil.copy(Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml", root / "tiny.yaml")
    (root / "recipe.yaml").write_text("seed: 0\n")
    (root / "broken.yaml").write_text("world: [unclosed\n")
    (root / "typo.yaml").write_text((root / "tiny.yaml").read_text() + "\nseeed: 1\n")  # a typo
    (root / "store" / "artifacts").mkdir(parents=True)  # a store: what a run writes first


def warm_store(exe: str, root: Path, env: dict) -> None:
    """Open the store's MLflow database once (untimed): as a store a run has left."""
    subprocess.run([exe, "lineage", RUN_ID, "--out-dir", "store"], cwd=root, env=env, capture_output=True)
    if not (root / "store" / "mlflow.db").is_file():
        sys.exit("could not create the store's mlflow.db")


def time_case(exe: str, args: list[str], root: Path, env: dict) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    p = subprocess.run([exe, *args], cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    last = (p.stderr.strip().splitlines() or [""])[-1]
    return wall, p.returncode, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=1, help="the best of N runs per case")
    ap.add_argument("--show", action="store_true", help="print each case's last stderr line too")
    args = ap.parse_args()
    exe = platonic()
    env = {k: v for k, v in os.environ.items() if k not in ("PLATONIC_OUT_DIR", "MLFLOW_TRACKING_URI")}
    with tempfile.TemporaryDirectory(prefix="platonic-errors-") as tmp:
        root = Path(tmp)
        scratch(root)
        warm_store(exe, root, env)
        print("| command | seconds | exit |")
        print("|---|---:|---:|")
        for name, case in CASES:
            runs = [time_case(exe, case, root, env) for _ in range(max(1, args.repeats))]
            wall, code, last = min(runs)
            line = f"| `platonic {' '.join(case)}` ({name}) | {wall:.2f} | {code} |"
            print(line + (f" {last[:120]}" if args.show else ""), flush=True)


if __name__ == "__main__":
    main()
