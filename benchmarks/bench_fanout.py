"""Shard fan-out: ingest of N JSONL shards in process vs Prefect's Dask task runner
(LocalCluster) at 1 and 2 workers, interleaved, in one run.

    python benchmarks/bench_fanout.py                       # 8 shards x 50,000 rows
    python benchmarks/bench_fanout.py --shards 4 --rows 20000 --repeats 2
    python benchmarks/bench_fanout.py --stage dedup         # the dedup near level, N row ranges

Every ingest starts from an empty shard cache. Dask times include starting the cluster
(a few seconds): that is what a stage pays. Prints seconds per configuration (median over
repeats) and the ratio in-process / Dask (> 1 means the fan-out is faster). With 2 cores
here, 2 workers can at best halve the time; on a cluster, workers = cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")  # shard tasks run outside a flow here

from platonic.core.config import FanoutConfig, IngestConfig  # noqa: E402
from platonic.core.data.corpus import ingest_corpus  # noqa: E402
from platonic.core.data.readers import resolve_sources  # noqa: E402
from platonic.tasks.fanout import mapper_for  # noqa: E402

WORDS = "a the red blue green small large circle square star left right top bottom of in on with near".split()


def write_corpus(folder: Path, shards: int, rows: int) -> list[str]:
    import random

    rnd = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(shards):
        p = folder / f"part-{s:03d}.jsonl"
        with p.open("w") as f:
            for i in range(rows):
                f.write(
                    json.dumps({"image_id": f"{s}-{i}", "text": " ".join(rnd.choices(WORDS, k=rnd.randint(6, 24)))})
                    + "\n"
                )
        paths.append(str(p))
    return paths


def run(paths: list[str], work: Path, engine: str, workers: int) -> float:
    shutil.rmtree(work, ignore_errors=True)
    ic = IngestConfig(source="jsonl", paths=paths)
    t0 = time.perf_counter()
    counts, _ = ingest_corpus(
        resolve_sources(ic.paths, "jsonl"),
        ic,
        work / "out",
        work / "cache",
        mapper=mapper_for(FanoutConfig(engine=engine, workers=workers)),
    )
    dt = time.perf_counter() - t0
    assert counts["in"] == counts["kept"] + counts["quarantined"]
    return dt


def write_texts(folder: Path, paths: list[str]) -> tuple[Path, Path]:
    """The dedup stage's inputs: the shards' texts as one texts.parquet, 500 eval captions."""
    import pyarrow.parquet as pq

    from platonic.core.data.schema import text_table

    rows = [
        {"image_id": r["image_id"], "text_id": f"{r['image_id']}:alt:0", "source_kind": "alt", "text": r["text"]}
        for p in paths
        for r in map(json.loads, Path(p).read_text().splitlines())
    ]
    pq.write_table(text_table(rows), folder / "texts.parquet")
    pq.write_table(
        text_table(
            [
                {**r, "text_id": f"{r['image_id']}:eval:0", "source_kind": "eval"}
                for r in rows[:: max(1, len(rows) // 500)]
            ]
        ),
        folder / "eval.parquet",
    )
    return folder / "texts.parquet", folder / "eval.parquet"


def run_dedup(inputs: tuple[Path, Path], rows: int, work: Path, engine: str, workers: int) -> float:
    from platonic.core.config import DedupConfig
    from platonic.core.dedup import dedup

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    dc = DedupConfig(levels=["exact", "near"], near={"batch_rows": rows})  # one unit per input shard
    t0 = time.perf_counter()
    counts = dedup(*inputs, dc, work, mapper=mapper_for(FanoutConfig(engine=engine, workers=workers)))
    dt = time.perf_counter() - t0
    assert counts["in"] == counts["kept"] + counts["removed"]
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--stage", choices=["ingest", "dedup"], default="ingest")
    a = ap.parse_args()
    from prefect.testing.utilities import prefect_test_harness

    with tempfile.TemporaryDirectory() as tmp, prefect_test_harness(server_startup_timeout=180):
        tmp = Path(tmp)
        paths = write_corpus(tmp / "src", a.shards, a.rows)
        inputs = write_texts(tmp, paths) if a.stage == "dedup" else None
        configs = {"in-process": ("inline", 1), "dask x1": ("dask", 1), "dask x2": ("dask", 2)}
        times: dict[str, list[float]] = {k: [] for k in configs}
        for r in range(a.repeats):  # interleaved: a noisy neighbour hits every configuration alike
            for name, (engine, workers) in configs.items():
                times[name].append(
                    run(paths, tmp / "work", engine, workers)
                    if inputs is None
                    else run_dedup(inputs, a.rows, tmp / "work", engine, workers)
                )
                print(f"repeat {r}: {name:<10} {times[name][-1]:6.2f}s", flush=True)
        base = statistics.median(times["in-process"])
        print(f"\n{a.stage}: {a.shards} shards x {a.rows:,} rows, median of {a.repeats}, cores: {os.cpu_count()}")
        for name in configs:
            m = statistics.median(times[name])
            print(f"{name:<10} {m:6.2f}s   in-process/this = {base / m:.2f}x")


if __name__ == "__main__":
    main()
