"""Contamination audit at corpus scale: throughput, peak memory, recall/precision on planted
near-duplicates.

    python benchmarks/bench_dedup.py                      # 5M texts x 7k eval captions
    python benchmarks/bench_dedup.py --texts 200000 --levels exact,near --threshold 0.6

Generates (once, in a child process, so its memory is not counted) a corpus of `--texts`
texts in the text schema with `--planted` edited copies of eval captions
(benchmarks/contamination_bench.py), then runs the audit (the code `platonic audit` and
the dedup stage use) and prints, per level: seconds, texts per second, and recall per edit
kind / precision on the planted copies; and the audit process's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from contamination_bench import score_planted, write_benchmark  # benchmarks/, beside this script

from platonic.core.config import AuditConfig
from platonic.core.data.evalsets import load_caption_file
from platonic.core.dedup import audit, eval_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=5_000_000)
    ap.add_argument("--eval", type=int, default=7_000)
    ap.add_argument("--planted", type=int, default=2_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--levels", default="exact,near")
    ap.add_argument("--threshold", type=float, default=None, help="near.threshold (default: the recipe default)")
    ap.add_argument("--batch-rows", type=int, default=None)
    ap.add_argument(
        "--dir", type=Path, default=None, help="where the corpus lives (default /tmp/platonic-bench-<texts>-<seed>)"
    )
    ap.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    d = a.dir or Path(f"/tmp/platonic-bench-{a.texts}-{a.seed}")
    if a.generate_only:
        t0 = time.perf_counter()
        write_benchmark(d, a.texts, a.eval, a.planted, a.seed)
        print(
            f"generated {a.texts:,} texts, {a.eval:,} eval captions, {a.planted:,} planted copies in "
            f"{time.perf_counter() - t0:.1f}s -> {d}"
        )
        return
    if not (d / "planted.parquet").is_file():
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--generate-only",
                "--texts",
                str(a.texts),
                "--eval",
                str(a.eval),
                "--planted",
                str(a.planted),
                "--seed",
                str(a.seed),
                "--dir",
                str(d),
            ],
            check=True,
        )
    near = {k: v for k, v in (("threshold", a.threshold), ("batch_rows", a.batch_rows)) if v is not None}
    cfg = AuditConfig(
        corpus=[str(d / "corpus.parquet")],
        eval=[f"captions:{d / 'eval.parquet'}"],
        levels=a.levels.split(","),
        near=near,
    )
    ev = load_caption_file(d / "eval.parquet")
    out = d / "audit"
    out.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    summary = audit(cfg.corpus, eval_table({"bench": ev}), cfg, out)
    total = time.perf_counter() - t0
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    matches, planted = pq.read_table(out / "matches.parquet"), pq.read_table(d / "planted.parquet")
    n = summary["corpus_texts"]
    print(
        f"corpus {n:,} texts x {ev.captions.__len__():,} eval captions; {len(planted):,} planted copies "
        f"(near threshold {cfg.near.threshold}, LSH {cfg.near.bands}x{cfg.near.rows}, batch {cfg.near.batch_rows:,})"
    )
    result = {
        "texts": n,
        "eval": len(ev.captions),
        "planted": len(planted),
        "seconds": round(total, 1),
        "peak_rss_mib": round(peak_mib),
        "levels": {},
    }
    for lv in summary["levels"]:
        sec = summary["stats"][f"{lv}_seconds"]
        score = score_planted(matches, planted, ev.caption_image, lv)
        result["levels"][lv] = {"seconds": sec, "texts_per_s": round(n / sec), **score}
        print(
            f"{lv:6s} {sec:8.1f}s  {n / sec:10,.0f} texts/s  recall {score['recall']:.4f}  "
            f"precision {score['precision']:.4f}  found {score['found_pairs']:,}  by edit {score['recall_by_edit']}"
        )
    print(f"total  {total:8.1f}s  peak RSS {peak_mib:,.0f} MiB")
    (out / "bench.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
