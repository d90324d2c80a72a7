"""Positives for a whole corpus: every input shard through the shard loop (generate.py), in
this process with the caller's backend or fanned out with a backend per worker (backends.py
builds it from the recipe), then the stage's files. The one module that knows both the loop
and the backends, so neither imports the other."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from .backends import make_backend
from .generate import ShardRun, assemble, generate_shard, read_generations, sample_items
from .jobs import ChatBackend, ImageSource

if TYPE_CHECKING:
    from ..config import PositivesConfig


def _shard_images(
    shard: str, cfg: PositivesConfig, images_for: Callable[[str], ImageSource | None] | None
) -> ImageSource | None:
    images = images_for(shard) if images_for is not None and cfg.recaptions else None
    if cfg.recaptions and images is None:
        raise ValueError(
            f"positives: recaptions need images, and the ingest located none for shard {shard!r} "
            "(images are located for the world and for webdataset corpora); set "
            "positives.recaptions=0 to paraphrase only"
        )
    return images


def generate_shard_with_own_backend(
    shard: str,
    path: Path,
    cfg: PositivesConfig,
    work: Path,
    images_for: Callable[[str], ImageSource | None] | None,
    items: set[str] | None = None,
) -> ShardRun:
    """`generate_shard` in a fan-out worker: it builds its own backend (an HTTP client, a
    model, a vLLM runner) from the recipe, since none of those travel between processes."""
    rows = pq.read_table(path).to_pylist()
    images = _shard_images(shard, cfg, images_for)
    return generate_shard(shard, rows, cfg, make_backend(cfg), work, images, items=items)


def generate_corpus(
    shards: list[tuple[str, Path]],
    cfg: PositivesConfig,
    backend: ChatBackend | None,
    work: Path,
    out: Path,
    images_for: Callable[[str], ImageSource | None] | None = None,
    progress: Callable[[ShardRun], None] | None = None,
    on_batch: Callable[[str, int, int], None] | None = None,
    mapper: Callable[[Callable, list[tuple]], list] | None = None,
) -> tuple[dict[str, int], dict]:
    """Every input shard through `generate_shard` (finished shards skipped), then the
    stage's files (`assemble`). Returns (counts, stats); stats carry this run's throughput:
    generated texts and completion tokens per second of generation (shards finished by an
    earlier run do not count). `mapper(fn, calls) -> results in call order` runs the shards
    elsewhere (the pipeline's Dask fan-out), each worker with a backend of its own."""
    runs, inputs = [], [pq.read_table(path) for _, path in shards]
    # positives.sample_items: drawn over the whole corpus, so every shard asks for its part of one sample
    items = sample_items({i for t in inputs for i in t["image_id"].to_pylist()}, cfg)
    if mapper is not None:
        for shard, _ in shards:
            _shard_images(shard, cfg, images_for)  # fail before anything is sent out
        calls = [(shard, path, cfg, work, images_for, items) for shard, path in shards]
        runs = mapper(generate_shard_with_own_backend, calls)
        for r in runs:
            if progress:
                progress(r)
    else:
        for (shard, _), table in zip(shards, inputs, strict=True):
            runs.append(
                generate_shard(
                    shard, table.to_pylist(), cfg, backend, work, _shard_images(shard, cfg, images_for), on_batch, items
                )
            )
            if progress:
                progress(runs[-1])
    counts = assemble(inputs, read_generations(work, [s for s, _ in shards]), out)
    counts |= {
        "shards": len(runs),
        "shards_skipped": sum(r.status == "done" for r in runs),
        "resumed_rows": sum(r.resumed_from for r in runs),
    }
    seconds = sum(r.seconds for r in runs)
    new_rows, new_tokens = sum(r.new_rows for r in runs), sum(r.new_tokens for r in runs)
    stats = {
        "generation_seconds": round(seconds, 3),
        "generated_this_run": new_rows,
        "texts_per_s": round(new_rows / seconds, 3) if seconds > 0 else 0.0,
        "tokens_per_s": round(new_tokens / seconds, 3) if seconds > 0 else 0.0,
    }
    return counts, stats
