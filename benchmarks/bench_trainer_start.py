"""What a lone trainer's start costs: forked from the trainer fork server against a fresh
`python -m platonic.core.train` process, measured side by side in one run.

    platonic demo                                                # any store with a views artifact
    python benchmarks/bench_trainer_start.py --views .platonic/artifacts/views/KEY
    python benchmarks/bench_trainer_start.py --views DIR --model ntp --steps 1 --rounds 5

Each round runs the same short training (the demo's `--model`, `--steps` steps, one thread)
both ways, alternating which goes first, and times it from the request to the exit: the
trainer's imports, its data loading, its steps, its save. The steps are the same both ways,
so the difference is the start. `train_in_subprocess` (the stage's own launcher) runs both.
Prints one JSON line and the median difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from platonic.core.config import load_config
from platonic.core.forkserver import trainer_server
from platonic.core.train import launch


def _one(fork: bool, args: argparse.Namespace, tmp: Path, k: int) -> float:
    os.environ["PLATONIC_TRAIN_FORKSERVER"] = "1" if fork else "0"
    mcfg = load_config("demo", [f"train.models.{args.model}.steps={args.steps}"]).train.models[args.model]
    out = tmp / f"out-{fork}-{k}"
    out.mkdir()
    t0 = time.perf_counter()
    launch.train_in_subprocess(0, 1, args.model, mcfg, args.views, out, tmp / f"state-{fork}-{k}", lambda s, m: None)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--views", type=Path, required=True, help="a views artifact (text models)")
    ap.add_argument("--model", default="good", help="a text model of configs/demo.yaml")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    trainer_server()  # started (and its imports paid) before the first timing, as a flow does
    times: dict[str, list[float]] = {"fork": [], "fresh": []}
    with tempfile.TemporaryDirectory() as d:
        for k in range(args.rounds):
            for fork in (k % 2 == 0, k % 2 == 1):
                times["fork" if fork else "fresh"].append(_one(fork, args, Path(d), k))
    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    print(json.dumps({"model": args.model, "steps": args.steps, "median_s": med, "all_s": times}))
    saved = med["fresh"] - med["fork"]
    print(f"a trainer's start: fresh process {med['fresh']} s, forked {med['fork']} s, saved {saved:.2f} s")


if __name__ == "__main__":
    main()
