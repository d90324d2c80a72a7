"""The everyday loop: rerun one stage on cached artifacts. Prints what `platonic run RECIPE
--only evaluate` costs beyond the evaluate stage itself, cold (no Prefect server up: the
command starts a temporary one) and warm (`platonic server` up: the command reports to it).

    python benchmarks/bench_rerun.py                          # configs/tiny.yaml, 3 repeats
    python benchmarks/bench_rerun.py --recipe configs/demo.yaml --repeats 2

Fills a fresh out_dir first (one full run, not timed), then times each rerun as a user does,
a CLI subprocess; the stage's own time is its manifest's `stats.seconds`. Overhead = wall −
stage. Targets (issue 22): warm ≤ 10 s, cold ≤ 25 s. The machine's load is printed beside
them: on a shared 2-core box both move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def platonic(*args: str, cwd: Path) -> float:
    """Wall seconds of one CLI command (fails loudly)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "platonic.flows.cli", *args], cwd=cwd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"platonic {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return time.perf_counter() - t0


def rerun_overhead(recipe: str, out: Path) -> tuple[float, float]:
    """(wall, stage seconds) of one `--only evaluate`."""
    wall = platonic("run", recipe, "--only", "evaluate", "--set", f"out_dir={out}", cwd=out.parent)
    newest = max((out / "artifacts" / "evaluate").glob("*/manifest.json"), key=lambda p: p.stat().st_mtime)
    return wall, json.loads(newest.read_text())["stats"]["seconds"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default=str(ROOT / "configs" / "tiny.yaml"))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if os.environ.get("PREFECT_API_URL"):
        sys.exit("PREFECT_API_URL is set: unset it (the cold case is the temporary server)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        fill = platonic("run", args.recipe, "--set", f"out_dir={out}", cwd=Path(tmp))
        print(f"filled the cache: {fill:.1f} s ({Path(args.recipe).name})")
        rows = {}
        cold = [rerun_overhead(args.recipe, out) for _ in range(args.repeats)]
        rows["cold (temporary server)"] = cold
        t0 = time.perf_counter()
        platonic("server", "--out-dir", str(out), cwd=Path(tmp))  # the store's own server
        print(f"platonic server: up in {time.perf_counter() - t0:.1f} s (paid once)")
        try:
            rows["warm (platonic server)"] = [rerun_overhead(args.recipe, out) for _ in range(args.repeats)]
        finally:
            platonic("server", "--stop", "--out-dir", str(out), cwd=Path(tmp))
    print(f"\n--only evaluate, median of {args.repeats} (load average {os.getloadavg()[0]:.1f}):")
    print(f"{'':26s} {'wall s':>8s} {'stage s':>8s} {'overhead s':>11s}  target")
    for (name, runs), target in zip(rows.items(), (25, 10), strict=True):
        wall = statistics.median(w for w, _ in runs)
        stage = statistics.median(s for _, s in runs)
        over = statistics.median(w - s for w, s in runs)
        print(f"{name:26s} {wall:8.1f} {stage:8.1f} {over:11.1f}  ≤ {target} s {'ok' if over <= target else 'MISSED'}")
    cold_o = statistics.median(w - s for w, s in rows["cold (temporary server)"])
    warm_o = statistics.median(w - s for w, s in rows["warm (platonic server)"])
    print(f"warm / cold overhead: {warm_o / cold_o:.2f}")


if __name__ == "__main__":
    main()
