"""Positives from real models: requests, chat messages, the resumable shard loop, assembly
(the job types a backend sees: jobs.py; a whole corpus, fanned out or not: corpus.py).

Every backend (`openai_http`, `transformers_backend`, `vllm_offline`) takes the same input:
OpenAI chat messages. A recaption request is one user turn with the image as a base64
data-URL `image_url` part and the recaption prompt; a paraphrase request is one user turn
of text only (the paraphrase prompt with the alt-text in it) and never carries the image.

Work layout (per input shard, under a work folder that survives a crash):

    <work>/<shard>/part-<seq>-<uuid>.parquet   one per finished batch (GEN_SCHEMA rows)
    <work>/<shard>/_DONE.json                  the shard's counts, written last

A part file appears by atomic rename, so a kill loses at most the in-flight batch; a rerun
skips shards with `_DONE.json` and, inside a shard, every (image_id, task, index) already
in a part. Failed generations are rows too (status "failed", a reason), so
requested == generated + failed holds per shard and overall.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from ..data.schema import QUARANTINE_SCHEMA, TEXT_SCHEMA, text_table
from .jobs import TASKS, ChatBackend, Completion, ImageSource, Job, Request

if TYPE_CHECKING:
    from ..config import PositivesConfig

DONE = "_DONE.json"

# one row per requested generation, ok or failed: the provenance of every generated text
GEN_SCHEMA = pa.schema(
    [
        ("shard", pa.string()),
        ("image_id", pa.string()),
        ("task", pa.string()),  # recap | paraphrase
        ("index", pa.int64()),
        ("text_id", pa.string()),
        ("source_row", pa.int64()),  # the input row: the alt-text (paraphrase), the image's first text (recap)
        ("status", pa.string()),  # ok | failed
        ("reason", pa.string()),  # failed: timeout | http_<code> | refusal | empty_output | image_unavailable | error
        ("text", pa.string()),
        ("backend", pa.string()),
        ("model", pa.string()),
        ("revision", pa.string()),
        ("prompt_sha256", pa.string()),
        ("temperature", pa.float64()),
        ("top_p", pa.float64()),
        ("max_tokens", pa.int64()),
        ("seed", pa.int64()),  # positives.seed
        ("request_seed", pa.int64()),  # the per-request seed derived from it (sent to the backend)
        ("generated_at", pa.timestamp("ms", tz="UTC")),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("seconds", pa.float64()),  # backend latency of this request (batch time / batch size in process)
    ]
)


# ---- prompts and provenance --------------------------------------------------------------


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def request_seed(seed: int, key: tuple[str, str, int]) -> int:
    """A per-request seed: the same request gets the same seed on every run and backend."""
    h = hashlib.sha256(json.dumps([seed, *key]).encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def recaption_messages(prompt: str, image: bytes, mime: str) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": data_url(image, mime)}},
                {"type": "text", "text": prompt},
            ],
        }
    ]


def paraphrase_messages(template: str, text: str) -> list[dict]:
    # str.replace, not str.format: alt-texts and templates may hold braces
    return [{"role": "user", "content": template.replace("{text}", text)}]


def clean_output(text: str | None) -> str | None:
    """One line of text, or None when nothing is left (empty_output)."""
    if text is None:
        return None
    out = " ".join(text.split())
    return out or None


def provenance(cfg: PositivesConfig, task: str, backend: str) -> dict:
    """What every row of `task` records about how it was made (GEN_SCHEMA columns)."""
    m = getattr(cfg.models, TASKS[task])
    return {
        "backend": backend,
        "model": m.id,
        "revision": m.revision or "",
        "prompt_sha256": sha256(getattr(cfg.prompts, TASKS[task])),
        "temperature": cfg.sampling.temperature,
        "top_p": cfg.sampling.top_p,
        "max_tokens": cfg.sampling.max_tokens,
        "seed": cfg.seed,
    }


# ---- requests ------------------------------------------------------------------------------


def plan_requests(rows: list[dict], cfg: PositivesConfig, items: set[str] | None = None) -> list[Request]:
    """Every generation a shard asks for, in a fixed order. `rows`: the shard's texts
    (TEXT_SCHEMA); recaptions per image, paraphrases per text of a `paraphrase_sources` kind
    (the alt-texts by default). An image with several such texts gets `paraphrases` per
    text: index = text ordinal * paraphrases + i. `items`: only these images (the sample)."""
    first_row: dict[str, int] = {}
    alts: dict[str, list[tuple[int, str]]] = {}
    kinds = set(cfg.paraphrase_sources)
    for r, row in enumerate(rows):
        if items is not None and row["image_id"] not in items:
            continue
        first_row.setdefault(row["image_id"], r)
        if row["source_kind"] in kinds:
            alts.setdefault(row["image_id"], []).append((r, row["text"]))
    out = []
    for image_id in sorted(first_row):
        out += [Request(image_id, "recap", i, first_row[image_id]) for i in range(cfg.recaptions)]
    for image_id in sorted(alts):
        for j, (r, text) in enumerate(alts[image_id]):
            out += [Request(image_id, "paraphrase", j * cfg.paraphrases + i, r, text) for i in range(cfg.paraphrases)]
    return out


def _jobs(
    reqs: list[Request], cfg: PositivesConfig, images: ImageSource | None, failed: list[tuple[Request, str]]
) -> Iterator[Job]:
    for r in reqs:
        if r.task == "paraphrase":
            msgs = paraphrase_messages(cfg.prompts.paraphrase, r.text or "")
        else:
            try:
                if images is None:
                    raise LookupError("no image source")
                data, mime = images(r.image_id)
            except Exception as e:  # a missing/unreadable image fails this request, not the shard
                failed.append((r, f"image_unavailable: {type(e).__name__}: {e}"[:200]))
                continue
            msgs = recaption_messages(cfg.prompts.recaption, data, mime)
        yield Job(r, msgs, request_seed(cfg.seed, r.key))


def sample_items(image_ids: set[str], cfg: PositivesConfig) -> set[str] | None:
    """positives.sample_items of the corpus's images (None: all): the first in the order of
    a hash of (positives.seed, image id), so the sample depends on neither shard layout nor
    corpus order, and a smaller sample is part of a larger one."""
    if cfg.sample_items is None:
        return None
    rank = sorted(image_ids, key=lambda i: hashlib.sha256(json.dumps([cfg.seed, i]).encode()).digest())
    return set(rank[: cfg.sample_items])


# ---- the shard loop ------------------------------------------------------------------------


def finished_keys(shard_dir: Path) -> set[tuple[str, str, int]]:
    keys: set[tuple[str, str, int]] = set()
    for p in sorted(shard_dir.glob("part-*.parquet")):
        t = pq.read_table(p, columns=["image_id", "task", "index"]).to_pydict()
        keys.update(zip(t["image_id"], t["task"], t["index"], strict=True))
    return keys


def _write_part(shard_dir: Path, rows: list[dict]) -> None:
    """Atomic: a reader (or a rerun after a kill) sees the whole part or none of it."""
    seq = len(list(shard_dir.glob("part-*.parquet")))
    name = f"part-{seq:05d}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = shard_dir / f".{name}.tmp"
    pq.write_table(pa.Table.from_pylist(rows, schema=GEN_SCHEMA), tmp)
    os.replace(tmp, shard_dir / name)


def _row(shard: str, r: Request, c: Completion, prov: dict, seed: int) -> dict:
    text = clean_output(c.text) if c.reason is None else None
    reason = c.reason if c.reason is not None else (None if text else "empty_output")
    return {
        "shard": shard,
        "image_id": r.image_id,
        "task": r.task,
        "index": r.index,
        "text_id": r.text_id,
        "source_row": r.source_row,
        "status": "failed" if reason else "ok",
        "reason": reason,
        "text": text,
        **prov,
        "request_seed": seed,
        "generated_at": int(time.time() * 1000),
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "seconds": c.seconds,
    }


def shard_counts(shard_dir: Path) -> dict[str, int]:
    parts = sorted(shard_dir.glob("part-*.parquet"))
    t = (
        pa.concat_tables([pq.read_table(p, columns=["status", "completion_tokens"]) for p in parts])
        if parts
        else GEN_SCHEMA.empty_table()
    )
    status = t["status"].to_pylist()
    return {
        "requested": len(status),
        "generated": status.count("ok"),
        "failed": status.count("failed"),
        "completion_tokens": int(sum(t["completion_tokens"].to_pylist())),
    }


@dataclass
class ShardRun:
    shard: str
    status: str  # generated | done (skipped: finished earlier)
    counts: dict[str, int]
    new_rows: int = 0  # generated (ok) in this run
    new_tokens: int = 0
    seconds: float = 0.0
    resumed_from: int = 0  # rows found finished in parts when this run started
    reasons: dict[str, int] = field(default_factory=dict)


def generate_shard(
    shard: str,
    rows: list[dict],
    cfg: PositivesConfig,
    backend: ChatBackend,
    work: Path,
    images: ImageSource | None = None,
    on_batch: Callable[[str, int, int], None] | None = None,
    items: set[str] | None = None,
) -> ShardRun:
    """One input shard -> part files under `work/<shard>/`, then its done marker.

    Pure in what it writes: a function of the shard's rows, the recipe and the backend's
    answers. Resumes: rows already in a part are not asked again; a shard with a done
    marker is not touched. `on_batch(shard, answered, to_ask)` follows progress; `items`:
    only these images (positives.sample_items, drawn over the corpus by `sample_items`)."""
    d = Path(work) / shard
    if (d / DONE).is_file():
        return ShardRun(shard, "done", json.loads((d / DONE).read_text()))
    d.mkdir(parents=True, exist_ok=True)
    for stale in d.glob(".part-*.tmp"):  # a part the kill caught half-written
        stale.unlink()
    reqs = plan_requests(rows, cfg, items)
    done = finished_keys(d)
    todo = [r for r in reqs if r.key not in done]
    t0 = time.perf_counter()
    new_rows = new_tokens = answered = 0
    for task in TASKS:
        task_reqs = [r for r in todo if r.task == task]
        if not task_reqs:
            continue
        prov = provenance(cfg, task, backend.name)
        failed: list[tuple[Request, str]] = []
        for batch in backend.generate(task, _jobs(task_reqs, cfg, images, failed), cfg.batch_size):
            out = [_row(shard, j.request, c, prov, j.seed) for j, c in batch]
            _write_part(d, out)
            new_rows += sum(r["status"] == "ok" for r in out)
            new_tokens += sum(r["completion_tokens"] for r in out if r["status"] == "ok")
            answered += len(out)
            if on_batch:
                on_batch(shard, answered, len(todo))
        if failed:
            _write_part(
                d,
                [_row(shard, r, Completion(None, reason), prov, request_seed(cfg.seed, r.key)) for r, reason in failed],
            )
    seconds = time.perf_counter() - t0
    have = finished_keys(d)
    missing = {r.key for r in reqs} - have
    if missing:  # a backend that dropped requests is a bug, not a failure to record
        raise RuntimeError(f"shard {shard}: {len(missing)} requests got no answer (e.g. {sorted(missing)[0]})")
    counts = shard_counts(d)
    if counts["requested"] != len(reqs):
        raise RuntimeError(f"shard {shard}: {counts['requested']} rows in parts for {len(reqs)} requests (duplicates?)")
    assert counts["requested"] == counts["generated"] + counts["failed"], counts
    tmp = d / f".{DONE}.tmp"
    tmp.write_text(json.dumps(counts))
    os.replace(tmp, d / DONE)
    return ShardRun(shard, "generated", counts, new_rows, new_tokens, seconds, resumed_from=len(done))


# ---- assembly ------------------------------------------------------------------------------


def read_generations(work: Path, shards: list[str]) -> pa.Table:
    parts = [p for s in shards for p in sorted((Path(work) / s).glob("part-*.parquet"))]
    if not parts:
        return GEN_SCHEMA.empty_table()
    return pa.concat_tables([pq.read_table(p, schema=GEN_SCHEMA) for p in parts])


def assemble(inputs: list[pa.Table], gens: pa.Table, out: Path) -> dict[str, int]:
    """The stage's output from the input texts and every shard's parts:
    texts.parquet (inputs + generated rows, TEXT_SCHEMA: what dedup and views read; the
    provenance as JSON in `generator_params`), generations.parquet (every request with its
    provenance as columns, ok or failed) and failures.parquet (the failed ones, a reason)."""
    order = {t: i for i, t in enumerate(TASKS)}
    g = sorted(gens.to_pylist(), key=lambda r: (r["shard"], order[r["task"]], r["image_id"], r["index"]))
    keys = [(r["image_id"], r["task"], r["index"]) for r in g]
    if len(set(keys)) != len(keys):
        raise RuntimeError(
            f"positives: {len(keys) - len(set(keys))} duplicate (image_id, task, index) rows in the parts"
        )
    rows: list[dict] = []
    failures: list[dict] = []
    for r in g:
        uri = f"{r['task']}:{r['backend']}:{r['model']}"
        if r["status"] != "ok":
            failures.append(
                {
                    "source_uri": uri,
                    "source_row": r["source_row"],
                    "field": "text",
                    "reason": r["reason"],
                    "raw": r["text_id"],
                }
            )
            continue
        params = {
            k: r[k] for k in ("revision", "prompt_sha256", "temperature", "top_p", "max_tokens", "seed", "request_seed")
        }
        params |= {"task": r["task"], "generated_at": r["generated_at"].isoformat()}
        rows.append(
            {
                "image_id": r["image_id"],
                "text_id": r["text_id"],
                "source_kind": r["task"],
                "text": r["text"],
                "source_uri": uri,
                "source_row": r["source_row"],
                "generator": r["backend"],
                "generator_model": r["model"],
                "generator_params": json.dumps(params, sort_keys=True),
            }
        )
    base = (
        pa.concat_tables([t.select(TEXT_SCHEMA.names).cast(TEXT_SCHEMA) for t in inputs])
        if inputs
        else TEXT_SCHEMA.empty_table()
    )
    pq.write_table(pa.concat_tables([base, text_table(rows)]), out / "texts.parquet")
    pq.write_table(pa.Table.from_pylist(g, schema=GEN_SCHEMA), out / "generations.parquet")
    pq.write_table(pa.Table.from_pylist(failures, schema=QUARANTINE_SCHEMA), out / "failures.parquet")
    counts = {
        "input_texts": base.num_rows,
        "requested": len(g),
        "generated": len(rows),
        "failed": len(failures),
        "texts": base.num_rows + len(rows),
    }
    assert counts["requested"] == counts["generated"] + counts["failed"], counts
    for r in failures:
        k = "failed_" + r["reason"].split(":")[0]
        counts[k] = counts.get(k, 0) + 1
    return counts
