"""Ingest throughput on a Recap-DataComp-schema file vs a plain DuckDB copy, same run.

    python benchmarks/bench_ingest.py                    # 2M rows (about 580 MB), written once
    python benchmarks/bench_ingest.py --rows 200000      # smaller
    python benchmarks/bench_ingest.py --file F.parquet   # an existing Recap shard

Writes a Parquet file with the exact Recap-DataComp-1B columns (random captions of
realistic lengths), then times, each in a fresh process (so peak RSS is its own):
- DuckDB: `COPY (SELECT * FROM read_parquet(F)) TO 'x.parquet' (FORMAT parquet)`;
- platonic: `ingest_corpus` (digest, read, check, normalise, write three texts per row +
  quarantine, catalog), the shard cache empty.
Each runs `--repeat` times (3), alternating, and the fastest run of each is compared: on a
shared machine one run of either can take 1.5x its usual time, and the minimum is the
estimate least moved by that. Prints input rows/s, the ratio platonic/DuckDB throughput
(target >= 0.5) and each peak RSS (target < 1.5 GB). Compare the ratio, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

RECAP_SCHEMA = pa.schema(
    [
        ("url", pa.string()),
        ("re_caption", pa.string()),
        ("org_caption", pa.string()),
        ("sha256", pa.string()),
        ("key", pa.string()),
        ("re_clip_score", pa.float64()),
        ("org_clip_score", pa.float64()),
        ("re_length", pa.int64()),
        ("org_length", pa.int64()),
        ("re_gpt4v_score", pa.int64()),
        ("org_gpt4v_score", pa.int64()),
        ("re_caption_condition_diverse_topk", pa.string()),
        ("re_condition_length", pa.int64()),
    ]
)
WORDS = np.array(
    (
        "a an the photo picture image of with and on in near under over large small red blue green white "
        "black wooden metal dog cat man woman child street car tree sky building table sitting standing "
        "holding shows features background foreground bright dark colorful vintage modern close-up view"
    ).split()
)


def _captions(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[str]:
    lens = rng.integers(lo, hi, n)
    words = WORDS[rng.integers(0, len(WORDS), int(lens.sum()))]
    cuts = np.concatenate([[0], np.cumsum(lens)])
    return [" ".join(words[cuts[i] : cuts[i + 1]]) for i in range(n)]


def write_recap(path: Path, rows: int, seed: int = 0, chunk: int = 100_000) -> None:
    """A Recap-DataComp-schema shard: alt-texts of 3-15 words, recaptions of 30-90."""
    rng = np.random.default_rng(seed)
    with pq.ParquetWriter(path, RECAP_SCHEMA) as w:
        for s in range(0, rows, chunk):
            m = min(chunk, rows - s)
            re_cap, org, div = _captions(rng, m, 40, 90), _captions(rng, m, 3, 15), _captions(rng, m, 30, 70)
            ids = np.arange(s, s + m)
            w.write_table(
                pa.table(
                    {
                        "url": [f"https://images.example.com/{i:x}/{i}.jpg" for i in ids],
                        "re_caption": re_cap,
                        "org_caption": org,
                        "sha256": [f"{(int(i) * 0x9E3779B97F4A7C15) % (1 << 256):064x}" for i in ids],
                        "key": [f"{i:09d}" for i in ids],
                        "re_clip_score": rng.random(m),
                        "org_clip_score": rng.random(m),
                        "re_length": [len(x) for x in re_cap],
                        "org_length": [len(x) for x in org],
                        "re_gpt4v_score": rng.integers(0, 100, m),
                        "org_gpt4v_score": rng.integers(0, 100, m),
                        "re_caption_condition_diverse_topk": div,
                        "re_condition_length": [len(x) for x in div],
                    },
                    schema=RECAP_SCHEMA,
                )
            )


CHILD = r"""
import json, resource, sys, time
from pathlib import Path
which, src, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
if which == "duckdb":
    import duckdb
    duckdb.sql("SELECT 1").fetchall()  # warm
    t0 = time.perf_counter()
    duckdb.sql(f"COPY (SELECT * FROM read_parquet('{src}')) TO '{out / 'duckdb.parquet'}' (FORMAT parquet)")
    seconds, extra = time.perf_counter() - t0, {}
else:
    from platonic.core.config import IngestConfig
    from platonic.core.data.corpus import ingest_corpus
    from platonic.core.data.readers import resolve_sources
    cfg = IngestConfig(source="recap", paths=[src])
    t0 = time.perf_counter()
    shards = resolve_sources(cfg.paths, "recap")
    counts, _ = ingest_corpus(shards, cfg, out / "ingest", out / "cache")
    seconds, extra = time.perf_counter() - t0, counts
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "peak_rss_mb": peak, **extra}))
"""


def run(which: str, src: Path, work: Path) -> dict:
    out = work / which
    out.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([sys.executable, "-c", CHILD, which, str(src), str(out)], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{which} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--file", type=Path, default=None, help="an existing Recap shard (else one is generated)")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each, alternating; the fastest of each is compared")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        src = args.file
        if src is None:
            src = work / f"recap-{args.rows}.parquet"
            t0 = time.perf_counter()
            write_recap(src, args.rows)
            print(
                f"wrote {src.name}: {args.rows:,} rows, {src.stat().st_size / 1e6:.0f} MB "
                f"in {time.perf_counter() - t0:.0f}s"
            )
        rows = pq.read_metadata(src).num_rows
        best: dict[str, dict] = {}
        for i in range(args.repeat):
            for which in ("duckdb", "platonic"):
                r = run(which, src, work / f"{which}-{i}")
                if which not in best or r["seconds"] < best[which]["seconds"]:
                    best[which] = r
        d, p = best["duckdb"], best["platonic"]
        assert p["in"] == p["kept"] + p["quarantined"]
        print(
            f"input rows:            {rows:,} ({p['in']:,} texts in, {p['kept']:,} kept, "
            f"{p['quarantined']:,} quarantined)"
        )
        print(
            f"DuckDB COPY:           {d['seconds']:.2f}s  {rows / d['seconds']:,.0f} rows/s  "
            f"peak RSS {d['peak_rss_mb']:.0f} MB"
        )
        print(
            f"platonic ingest:       {p['seconds']:.2f}s  {rows / p['seconds']:,.0f} rows/s  "
            f"({p['in'] / p['seconds']:,.0f} texts/s)  peak RSS {p['peak_rss_mb']:.0f} MB"
        )
        print(f"throughput ratio:      {d['seconds'] / p['seconds']:.2f}x DuckDB (target >= 0.5)")


if __name__ == "__main__":
    main()
