"""Real-corpus ingest: every reader on small fixtures written here in the exact real
schemas (Recap-DataComp parquet, webdataset tars, Karpathy / COCO caption JSON, JSONL/CSV),
and bad variants of each. Every input text is kept or quarantined with a reason."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import dead_pid

from platonic.core.artifacts import folder_digest
from platonic.core.config import IngestConfig, load_config
from platonic.core.data.catalog import corpus_report, open_catalog
from platonic.core.data.corpus import ingest_corpus
from platonic.core.data.readers import (
    JsonStream,
    ShardError,
    SourceError,
    read_image_member,
    resolve_sources,
)

RECAP_COLUMNS = [
    "url",
    "re_caption",
    "org_caption",
    "sha256",
    "key",
    "re_clip_score",
    "org_clip_score",
    "re_length",
    "org_length",
    "re_gpt4v_score",
    "org_gpt4v_score",
]
NEW_COLUMNS = ["re_caption_condition_diverse_topk", "re_condition_length"]


def recap_table(rows: list[dict], diverse: bool = True) -> pa.Table:
    """Rows in the Recap-DataComp-1B schema (the newer files add the diverse top-k recaption)."""
    cols = RECAP_COLUMNS + (NEW_COLUMNS if diverse else [])
    types = {
        "re_clip_score": pa.float64(),
        "org_clip_score": pa.float64(),
        "re_length": pa.int64(),
        "org_length": pa.int64(),
        "re_gpt4v_score": pa.int64(),
        "org_gpt4v_score": pa.int64(),
        "re_condition_length": pa.int64(),
    }
    data = {}
    for c in cols:
        vals = [r.get(c) for r in rows]
        if c in ("re_caption", "org_caption", "re_caption_condition_diverse_topk"):
            # bytes let a test plant invalid UTF-8, as a broken writer would
            data[c] = pa.array(
                [v if isinstance(v, bytes) or v is None else v.encode() for v in vals], pa.binary()
            ).view(pa.string())
        else:
            data[c] = pa.array(vals, types.get(c, pa.string()))
    return pa.table(data)


def recap_row(
    i: int,
    alt="a dog on a beach",
    recap="A brown dog runs along a sandy beach.",
    diverse="A dog playing near the sea.",
    key=None,
) -> dict:
    return {
        "url": f"https://img.example/{i}.jpg",
        "re_caption": recap,
        "org_caption": alt,
        "sha256": f"{i:064x}",
        "key": f"{i:09d}" if key is None else key,
        "re_clip_score": 0.3,
        "org_clip_score": 0.25,
        "re_length": 40,
        "org_length": 16,
        "re_gpt4v_score": 7,
        "org_gpt4v_score": 4,
        "re_caption_condition_diverse_topk": diverse,
        "re_condition_length": 30,
    }


def run(paths, tmp: Path, fmt: str = "recap", **cfg):
    """Ingest with tiny batches (2 rows) so every reader's batch boundaries are crossed; the
    command and pipeline tests below use the default size."""
    ic = IngestConfig(source=fmt, paths=[str(p) for p in paths], **{"batch_rows": 2, **cfg})
    shards = resolve_sources(ic.paths, fmt, ic.revision, ic.allow_patterns or None)
    counts, results = ingest_corpus(shards, ic, tmp / "out", tmp / "cache")
    return counts, results


def texts(tmp: Path) -> list[dict]:
    con = open_catalog(tmp / "out" / "catalog.duckdb")
    try:
        cur = con.execute("SELECT * FROM texts ORDER BY shard, source_row, text_id")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def quarantine(tmp: Path) -> list[tuple]:
    con = open_catalog(tmp / "out" / "catalog.duckdb")
    try:
        return con.execute(
            "SELECT shard, source_row, field, reason, raw FROM quarantine ORDER BY shard, source_row, field"
        ).fetchall()
    finally:
        con.close()


def add_up(counts: dict) -> None:
    assert counts["in"] == counts["kept"] + counts["quarantined"]
    assert counts["quarantined"] == sum(v for k, v in counts.items() if k.startswith("quarantined_"))


# ---- Recap-DataComp ---------------------------------------------------------------------------


@pytest.mark.parametrize("batch_rows", [2, 3, 100])
def test_repeated_keys_quarantined_within_and_across_batches(tmp_path, batch_rows):
    """The first row with a key keeps it, whether the repeat is in its batch or a later one."""
    keys = ["a", "b", "a", "c", "b", "a", "d"]
    rows = [recap_row(i, key=k) for i, k in enumerate(keys)]
    pq.write_table(recap_table(rows), tmp_path / "s.parquet")
    counts, _ = run([tmp_path / "s.parquet"], tmp_path, batch_rows=batch_rows)
    add_up(counts)
    assert counts["quarantined_duplicate_key"] == 3 * 3  # rows 2, 4, 5: their three texts each
    assert {r[1] for r in quarantine(tmp_path)} == {2, 4, 5}
    assert sorted({t["source_row"] for t in texts(tmp_path)}) == [0, 1, 3, 6]


def test_recap_rows_kept_or_quarantined_with_reasons(tmp_path):
    rows = [
        recap_row(0, alt="  a dog\ton the\n beach "),  # kept, whitespace normalised
        recap_row(1, alt=""),  # alt empty -> quarantined, recaps kept
        recap_row(2, recap=" \u3000 "),  # recap whitespace only
        recap_row(3, alt=None),  # alt missing
        recap_row(4, recap="x" * 1001),  # over-long
        recap_row(5, alt=b"caf\xe9 photo"),  # Latin-1 byte: invalid UTF-8
        recap_row(6, key=""),  # no key: every text of the row
        recap_row(0, alt="the same key again"),  # duplicate key: every text of the row
        recap_row(7, diverse=None),  # the second recaption missing
    ]
    pq.write_table(recap_table(rows), tmp_path / "train-00000-of-03550.parquet")
    counts, results = run([tmp_path / "train-00000-of-03550.parquet"], tmp_path)
    add_up(counts)
    assert counts["rows_in"] == 9 and counts["in"] == 27
    assert counts["quarantined_empty_text"] == 2
    assert counts["quarantined_missing_field"] == 1 + 3 + 1  # alt None, the row without key, diverse None
    assert counts["quarantined_over_long_text"] == 1
    assert counts["quarantined_invalid_utf8"] == 1
    assert counts["quarantined_duplicate_key"] == 3
    assert counts["kept"] == 27 - 12
    q = quarantine(tmp_path)
    assert ("train-00000-of-03550", 5, "org_caption", "invalid_utf8", "caf\\xe9 photo") in q
    assert ("train-00000-of-03550", 6, "key", "missing_field", "a dog on a beach") in q
    assert {(r[1], r[2], r[3]) for r in q if r[1] == 7} == {(7, "key", "duplicate_key")}
    kept = texts(tmp_path)
    first = [t for t in kept if t["source_row"] == 0]
    assert [t["text_id"] for t in first] == ["000000000:alt:0", "000000000:recap:0", "000000000:recap:1"]
    assert first[0]["text"] == "a dog on the beach" and first[0]["source_kind"] == "alt"
    # provenance: key, sha256, url, scores travel with every text
    assert first[1]["url"] == "https://img.example/0.jpg" and first[1]["sha256"] == f"{0:064x}"
    assert first[1]["key"] == "000000000" and first[1]["re_clip_score"] == 0.3
    assert first[0]["source_uri"] == "train-00000-of-03550.parquet"  # the file, not where it lives
    assert len({t["text_id"] for t in kept}) == len(kept)


def test_recap_schema_variants(tmp_path):
    """Older shards lack the diverse recaption (not an input text there); a mistyped or
    missing text column quarantines its texts as schema_mismatch, nothing is dropped."""
    old = tmp_path / "src" / "old.parquet"
    old.parent.mkdir()
    pq.write_table(recap_table([recap_row(i) for i in range(3)], diverse=False), old)
    bad = recap_table([recap_row(i) for i in range(10, 12)])
    bad = bad.set_column(bad.schema.get_field_index("org_caption"), "org_caption", pa.array([1, 2], pa.int64()))
    pq.write_table(bad, tmp_path / "src" / "mistyped.parquet")
    pq.write_table(recap_table([recap_row(20)]).drop_columns(["re_caption"]), tmp_path / "src" / "nocol.parquet")
    counts, _ = run([tmp_path / "src"], tmp_path)
    add_up(counts)
    assert counts["rows_in"] == 6
    assert counts["in"] == 3 * 2 + 2 * 3 + 1 * 3
    assert counts["quarantined_schema_mismatch"] == 2 + 1
    q = quarantine(tmp_path)
    assert ("mistyped", 0, "org_caption", "schema_mismatch", "1") in q
    assert ("nocol", 0, "re_caption", "schema_mismatch", None) in q
    assert {t["source_kind"] for t in texts(tmp_path) if t["shard"] == "old"} == {"alt", "recap"}


def test_corrupt_shard_is_reported_others_complete_and_cached_shards_are_not_redone(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(2):
        pq.write_table(recap_table([recap_row(10 * i + j) for j in range(4)]), src / f"train-{i:05d}.parquet")
    good = (src / "train-00001.parquet").read_bytes()
    (src / "train-00002.parquet").write_bytes(good[: len(good) // 2])  # truncated download
    counts, results = run([src], tmp_path)
    status = {r.shard.id: r.status for r in results}
    assert status == {"train-00000": "ingested", "train-00001": "ingested", "train-00002": "failed"}
    failed = next(r for r in results if r.status == "failed")
    assert "train-00002.parquet" in failed.error
    assert counts["shards_failed"] == 1 and counts["kept"] == 2 * 4 * 3
    add_up(counts)
    shards = pq.read_table(tmp_path / "out" / "shards.parquet").to_pylist()
    assert [s["status"] for s in shards] == ["ok", "ok", "failed"]
    digest = folder_digest(tmp_path / "out")
    # fix the shard: only it is ingested, the others come from the shard cache
    (src / "train-00002.parquet").write_bytes(good)
    counts2, results2 = run([src], tmp_path)
    assert [r.status for r in results2] == ["cached", "cached", "ingested"]
    # the fixed shard repeats shard 1's keys: its texts are cross-shard duplicates
    assert counts2["quarantined_duplicate_key"] == 12 and counts2["kept"] == 24
    add_up(counts2)
    # the same sources again: nothing redone, the same bytes
    counts3, results3 = run([src], tmp_path)
    assert {r.status for r in results3} == {"cached"} and counts3["kept"] == counts2["kept"]
    assert folder_digest(tmp_path / "out") != digest
    d3 = folder_digest(tmp_path / "out")
    run([src], tmp_path)
    assert folder_digest(tmp_path / "out") == d3


def test_cross_shard_duplicates_keep_the_first_shard(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(recap_table([recap_row(1), recap_row(2)]), a)
    pq.write_table(recap_table([recap_row(2, alt="another alt"), recap_row(3)]), b)
    counts, _ = run([a, b], tmp_path)
    add_up(counts)
    assert counts["quarantined_duplicate_key"] == 3
    q = quarantine(tmp_path)
    assert {(s, r, reason) for s, r, _f, reason, _raw in q} == {("b", 0, "duplicate_key")}
    assert ("b", 0, "text_id", "duplicate_key", "another alt") in q
    kept = texts(tmp_path)
    assert [t["text"] for t in kept if t["text_id"] == "000000002:alt:0"] == ["a dog on a beach"]
    rep = corpus_report(tmp_path / "out" / "catalog.duckdb")
    assert sum(r["texts"] for r in rep["sources"]) == counts["kept"]
    assert rep["texts_per_image"] == [{"texts_per_image": 3, "images": 3}]
    assert rep["quarantine"] == [{"reason": "duplicate_key", "field": "text_id", "texts": 3}]
    # the partitions: a later stage reads one shard only
    assert pq.read_table(tmp_path / "out" / "texts" / "shard=b" / "data.parquet").num_rows == 3


def test_parallel_workers_write_the_same_bytes(tmp_path):
    for i in range(3):
        pq.write_table(
            recap_table([recap_row(10 * i + j) for j in range(5)] + [recap_row(0)]), tmp_path / f"s{i}.parquet"
        )
    paths = [tmp_path / f"s{i}.parquet" for i in range(3)]
    c1, _ = run(paths, tmp_path / "one")
    c2, r2 = run(paths, tmp_path / "two", workers=2)
    assert c1 == c2 and c1["quarantined_duplicate_key"] == 3 + 3 + 3  # s0 repeats key 0 itself
    assert [r.status for r in r2] == ["ingested"] * 3
    assert folder_digest(tmp_path / "one" / "out") == folder_digest(tmp_path / "two" / "out")


def test_every_shard_failing_still_gives_a_catalog(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    counts, results = run([tmp_path / "bad.parquet"], tmp_path)
    assert results[0].status == "failed" and "bad.parquet" in results[0].error
    assert counts["in"] == counts["kept"] == 0 and counts["shards_failed"] == 1
    rep = corpus_report(tmp_path / "out" / "catalog.duckdb")
    assert rep["sources"] == [] and rep["quarantine"] == []


def test_catalog_survives_a_move(tmp_path):
    pq.write_table(recap_table([recap_row(1)]), tmp_path / "s.parquet")
    run([tmp_path / "s.parquet"], tmp_path)
    (tmp_path / "out").rename(tmp_path / "moved")
    con = open_catalog(tmp_path / "moved" / "catalog.duckdb")
    assert con.execute("SELECT count(*) FROM texts WHERE shard = 's'").fetchone()[0] == 3
    con.close()


def test_hub_snapshot_layout_offline(tmp_path, monkeypatch):
    """`hf://datasets/<repo>@<rev>` goes through huggingface_hub.snapshot_download (offline
    here: a cache folder in the hub layout), allow_patterns pick the shards, and the digest
    is the blob's sha256 name."""
    import hashlib

    from huggingface_hub import constants

    repo = tmp_path / "hub" / "datasets--UCSC-VLAA--Recap-DataComp-1B"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    for name in ("train-00000-of-03550", "train-00001-of-03550"):
        buf = io.BytesIO()
        pq.write_table(recap_table([recap_row(int(name[6:11]))]), buf)
        sha = hashlib.sha256(buf.getvalue()).hexdigest()
        (repo / "blobs" / sha).write_bytes(buf.getvalue())
        link = repo / "snapshots" / commit / "data" / "train_data" / f"{name}.parquet"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(repo / "blobs" / sha)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    shards = resolve_sources(
        ["hf://datasets/UCSC-VLAA/Recap-DataComp-1B@main"],
        "recap",
        allow_patterns=["data/train_data/train-00001-*.parquet"],
    )
    assert [s.id for s in shards] == ["train-00001-of-03550"]
    assert shards[0].digest == hashlib.sha256(Path(shards[0].uri).read_bytes()).hexdigest()
    with pytest.raises(SourceError, match="UCSC-VLAA/Nope.*hub"):
        resolve_sources(["hf://datasets/UCSC-VLAA/Nope"], "recap")


def test_fsspec_uri(tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    with fs.open("/corpus/shard-a.parquet", "wb") as f:
        pq.write_table(recap_table([recap_row(5)]), f)
    counts, results = run(["memory://corpus"], tmp_path)
    assert results[0].shard.uri == "memory:///corpus/shard-a.parquet"
    assert counts["kept"] == 3
    with pytest.raises(SourceError, match="no such file"):
        resolve_sources(["memory://corpus/none.parquet"], "recap")


# ---- webdataset -----------------------------------------------------------------------------


def _tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


JPEG = b"\xff\xd8\xff\xe0fake-jpeg-bytes\xff\xd9"
PNG = b"\x89PNG\r\n\x1a\nfake-png"


def test_webdataset_texts_and_addressable_images(tmp_path):
    meta = {"url": "https://img.example/1.jpg", "key": "000000001", "caption": "a red bus", "sha256": "ab" * 32}
    _tar(
        tmp_path / "00000.tar",
        [
            ("000000001.jpg", JPEG),
            ("000000001.txt", b"a red bus  in town"),
            ("000000001.json", json.dumps(meta).encode()),
            ("000000002.png", PNG),
            ("000000002.txt", b"caf\xe9"),  # invalid UTF-8
            ("000000003.jpg", JPEG),
            ("000000003.txt", b"   "),  # empty
            ("000000004.jpg", JPEG),
            ("000000004.json", b'{"caption": 3}'),  # no .txt: missing
            ("sub/000000005.jpg", JPEG),
            ("sub/000000005.txt", b"a cat"),
        ],
    )
    counts, _ = run([tmp_path / "00000.tar"], tmp_path, "wds")
    add_up(counts)
    assert counts["rows_in"] == 5 and counts["kept"] == 2 and counts["images"] == 5
    assert counts["quarantined_invalid_utf8"] == 1 and counts["quarantined_empty_text"] == 1
    assert counts["quarantined_missing_field"] == 1
    kept = texts(tmp_path)
    assert [(t["image_id"], t["text"]) for t in kept] == [
        ("000000001", "a red bus in town"),
        ("sub/000000005", "a cat"),
    ]
    assert kept[0]["url"] == meta["url"] and kept[0]["sha256"] == meta["sha256"]
    con = open_catalog(tmp_path / "out" / "catalog.duckdb")
    images = con.execute(
        'SELECT image_id, uri, member, "offset", size, ext, tar FROM images ORDER BY image_id'
    ).fetchall()
    con.close()
    assert [i[0] for i in images] == ["000000001", "000000002", "000000003", "000000004", "sub/000000005"]
    png = images[1]
    assert png[2] == "000000002.png" and png[5] == "png" and png[6] == "00000.tar"
    assert read_image_member(png[1], png[3], png[4]) == PNG  # the bytes, never decoded at ingest


def test_webdataset_json_fields_and_corrupt_tar(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _tar(
        src / "a.tar",
        [
            ("k1.jpg", JPEG),
            ("k1.json", json.dumps({"caption": "alt one", "re_caption": "recap one"}).encode()),
            ("k2.jpg", JPEG),
            ("k2.json", b"{not json"),
        ],
    )
    good = (src / "a.tar").read_bytes()
    (src / "b.tar").write_bytes(good[:700])  # truncated mid-member
    counts, results = run([src], tmp_path, "wds", text_columns={"json.caption": "alt", "json.re_caption": "recap"})
    assert [r.status for r in results] == ["ingested", "failed"]
    assert "b.tar" in results[1].error and "truncated or corrupt" in results[1].error
    add_up(counts)
    assert counts["in"] == 4 and counts["kept"] == 2 and counts["quarantined_schema_mismatch"] == 2
    assert [t["text_id"] for t in texts(tmp_path)] == ["k1:alt:0", "k1:recap:0"]


# ---- COCO / Flickr ----------------------------------------------------------------------------


def karpathy(images: list[dict], dataset: str = "coco") -> dict:
    return {"images": images, "dataset": dataset}


def kimg(i: int, sents: list, split: str = "train", coco: bool = True) -> dict:
    im = {
        "filename": f"COCO_val2014_{i:012d}.jpg" if coco else f"{i}.jpg",
        "imgid": i,
        "split": split,
        "sentids": [10 * i + s for s in range(len(sents))],
        "sentences": [
            {"tokens": str(s).lower().split(), "raw": s, "imgid": i, "sentid": 10 * i + k} for k, s in enumerate(sents)
        ],
    }
    if coco:
        im.update({"filepath": "val2014", "cocoid": 1000 + i})
    return im


def test_karpathy_coco_and_flickr(tmp_path):
    coco = karpathy(
        [
            kimg(0, ["A man riding a horse.", "A person on a horse."], split="test"),
            kimg(1, ["", "Two dogs play."]),
            {"filename": "x.jpg", "imgid": 2, "split": "train"},  # no sentences
            kimg(0, ["A man riding a horse."], split="test"),  # repeated image: duplicate sentence id
        ]
    )
    (tmp_path / "dataset_coco.json").write_text(json.dumps(coco))
    flickr = karpathy([kimg(7, ["A girl jumps.", "A child leaps."], coco=False)], "flickr30k")
    (tmp_path / "dataset_flickr30k.json").write_text(json.dumps(flickr))
    counts, _ = run([tmp_path / "dataset_coco.json", tmp_path / "dataset_flickr30k.json"], tmp_path, "coco")
    add_up(counts)
    assert counts["rows_in"] == 2 + 2 + 1 + 1 + 2
    assert counts["quarantined_empty_text"] == 1 and counts["quarantined_missing_field"] == 1
    assert counts["quarantined_duplicate_key"] == 1
    kept = texts(tmp_path)
    by_id = {t["text_id"]: t for t in kept}
    assert set(by_id) == {"1000:caption:0", "1000:caption:1", "1001:caption:11", "7:caption:70", "7:caption:71"}
    assert by_id["1000:caption:0"]["split"] == "test" and by_id["1000:caption:0"]["filepath"] == "val2014"
    assert by_id["7:caption:71"]["text"] == "A child leaps." and by_id["7:caption:71"]["source_kind"] == "caption"
    rep = corpus_report(tmp_path / "out" / "catalog.duckdb")
    assert {r["texts_per_image"]: r["images"] for r in rep["texts_per_image"]} == {1: 1, 2: 2}


def test_coco_captions_layout_and_truncated_json(tmp_path):
    caps = {
        "info": {"year": 2014},
        "licenses": [],
        "images": [{"id": 42, "file_name": "COCO_val2014_000000000042.jpg", "height": 480, "width": 640}],
        "annotations": [
            {"image_id": 42, "id": 1, "caption": "A cat on a sofa."},
            {"image_id": 42, "id": 2, "caption": "A sleeping cat."},
            {"image_id": 99, "id": 3, "caption": "No such image."},
            {"image_id": 42, "id": 4},
            {"image_id": 42, "id": 1, "caption": "Repeated annotation id."},
        ],
    }
    (tmp_path / "captions_val2014.json").write_text(json.dumps(caps))
    text = json.dumps(caps)
    (tmp_path / "captions_cut.json").write_text(text[: len(text) - 40])
    counts, results = run([tmp_path / "captions_val2014.json", tmp_path / "captions_cut.json"], tmp_path, "coco")
    assert results[1].status == "failed" and "captions_cut.json" in results[1].error
    add_up(counts)
    assert counts["in"] == 5 and counts["kept"] == 2
    assert counts["quarantined_unknown_image"] == 1 and counts["quarantined_missing_field"] == 1
    assert counts["quarantined_duplicate_key"] == 1
    kept = texts(tmp_path)
    assert [(t["text_id"], t["file_name"]) for t in kept] == [
        ("42:caption:1", "COCO_val2014_000000000042.jpg"),
        ("42:caption:2", "COCO_val2014_000000000042.jpg"),
    ]


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_streaming_json_across_chunk_boundaries(chunk):
    doc = {
        "info": {"a": [1, 2, {"b": "}]"}]},
        "images": [{"x": 1.5e3, "s": "é ü — \u4e2d"}, {"x": 12345678}, []],
        "other": None,
        "annotations": [],
        "n": 123456789,
    }
    data = json.dumps(doc, ensure_ascii=False).encode()
    got = list(JsonStream(io.BytesIO(data), "doc.json", chunk=chunk).arrays({"images", "annotations"}))
    assert got == [("images", it) for it in doc["images"]]
    with pytest.raises(ShardError, match="doc.json"):
        list(JsonStream(io.BytesIO(data[:-9]), "doc.json", chunk=chunk).arrays({"images", "n"}))


# ---- JSONL / CSV ------------------------------------------------------------------------------


def test_jsonl_and_csv_with_column_mapping(tmp_path):
    lines = [
        json.dumps({"img": "a", "cap_id": 1, "caption": "first caption of a"}),
        json.dumps({"img": "a", "cap_id": 2, "caption": "second caption of a"}),
        "this line is not json",
        json.dumps({"img": "b", "cap_id": 1, "caption": 17}),
        json.dumps({"img": "c", "cap_id": 1}),
        json.dumps({"img": "a", "cap_id": 1, "caption": "repeated caption id"}),
        "",
    ]
    (tmp_path / "caps.jsonl").write_bytes(
        "\n".join(lines).encode()
        + b"\n"
        + json.dumps({"img": "d", "cap_id": 1, "caption": "bad "}).encode()[:-3]
        + b'\xff"}\n'
    )
    (tmp_path / "caps.csv").write_text('img,cap_id,caption\ne,1,"a caption, with a comma"\nf,1\ng,1,\n')
    cfg = dict(id_column="img", index_column="cap_id", text_columns={"caption": "caption"})
    counts, _ = run([tmp_path / "caps.jsonl", tmp_path / "caps.csv"], tmp_path, "jsonl", **cfg)
    add_up(counts)
    assert counts["rows_in"] == 7 + 3
    assert counts["quarantined_schema_mismatch"] == 2 + 1  # not json, number text; CSV short row
    assert counts["quarantined_missing_field"] == 1 + 1  # no caption; empty CSV cell
    assert counts["quarantined_duplicate_key"] == 1 and counts["quarantined_invalid_utf8"] == 1
    kept = texts(tmp_path)
    assert [(t["text_id"], t["text"]) for t in kept] == [
        ("a:caption:1", "first caption of a"),
        ("a:caption:2", "second caption of a"),
        ("e:caption:1", "a caption, with a comma"),
    ]
    q = quarantine(tmp_path)
    assert ("caps", 2, "img", "schema_mismatch", "this line is not json") in q
    assert ("caps", 3, "caption", "schema_mismatch", "17") in q


def test_sources_that_cannot_be_read_are_one_clear_error(tmp_path):
    with pytest.raises(SourceError, match="nope.parquet: no such file"):
        resolve_sources([str(tmp_path / "nope.parquet")], "recap")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no recap shards"):
        resolve_sources([str(tmp_path / "empty")], "recap")


def test_config_validation():
    from platonic.core.config import ConfigError

    with pytest.raises(ConfigError, match="paths are read by corpus sources"):
        load_config(None, ["ingest.paths=[a.parquet]"])
    with pytest.raises(ConfigError, match="source kind 'nope'"):
        load_config(None, ["ingest.source=jsonl", "ingest.text_columns={t: nope}"])
    with pytest.raises(ConfigError, match="ingest.source"):
        load_config(None, ["ingest.source=tfrecord"])


def test_plan_for_a_real_corpus_needs_no_world():
    from platonic.core.stages import FORCE, SKIP, plan

    cfg = load_config(None, ["ingest.source=recap", "ingest.paths=[x.parquet]"])
    modes = plan(cfg, only="ingest")
    assert modes["ingest"] == FORCE and modes["world"] == SKIP


# ---- the command -----------------------------------------------------------------------------


def test_a_shard_that_keeps_no_text_fails_the_command_in_one_line(tmp_path):
    """Issue 43 (by class: readers): a file of random bytes given as JSONL was read, every
    line quarantined (schema_mismatch), counts adding up, and the command exited 0 with no
    word. A shard read whole that kept nothing now ends the command with one line naming it,
    its reasons and where to look, exit 1; the good shard beside it is kept and counted."""
    import random

    from typer.testing import CliRunner

    import platonic.tasks.executor  # noqa: F401
    from platonic.flows.cli import app

    src = tmp_path / "src"
    src.mkdir()
    (src / "good.jsonl").write_text(json.dumps({"image_id": "a", "text": "a red cube"}) + "\n")
    (src / "noise.jsonl").write_bytes(random.Random(0).randbytes(20_000))
    store = tmp_path / "store"
    r = CliRunner().invoke(app, ["ingest", str(src), "--format", "jsonl", "--out-dir", str(store), "--json"])
    assert r.exit_code == 1, r.output
    c = json.loads(r.stdout[: r.stdout.rindex("}") + 1])["counts"]
    assert c["kept"] == 1 and c["in"] == c["kept"] + c["quarantined"] and c["quarantined"] > 10
    err = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "1 of 2 shards kept no text" in err[0] and "noise" in err[0], r.stderr
    assert "is the input jsonl?" in err[0] and "platonic corpus stats --dir" in err[0]


def test_platonic_ingest_command_counts_mlflow_and_stats(tmp_path):
    # Prefect binds its log handlers to the streams of its import: import it before CliRunner
    # swaps (and then closes) stdout/stderr, as a real process does
    from mlflow.tracking import MlflowClient
    from typer.testing import CliRunner

    import platonic.tasks.executor  # noqa: F401
    from platonic.flows.cli import app

    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(recap_table([recap_row(0), recap_row(1, alt="  ")]), src / "train-00000.parquet")
    (src / "train-00001.parquet").write_bytes(b"PAR1 this is not parquet")
    store, out = tmp_path / "store", tmp_path / "corpus"
    r = CliRunner().invoke(
        app, ["ingest", str(src), "--format", "recap", "--out", str(out), "--out-dir", str(store), "--json"]
    )
    assert r.exit_code == 1, r.output
    report = json.loads(r.stdout[: r.stdout.rindex("}") + 1])
    c = report["counts"]
    assert c["in"] == 6 and c["kept"] == 5 and c["quarantined"] == 1 and c["quarantined_empty_text"] == 1
    assert c["shards_failed"] == 1 and "train-00001.parquet" in report["failed_shards"][0]["error"]
    assert "error: 1 of 2 shards failed" in r.stderr and "train-00001.parquet" in r.stderr
    # MLflow: the stage's nested run records counts that add up
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    run_ = client.get_run(report["run_id"])
    m = run_.data.metrics
    assert m["in"] == m["kept"] + m["quarantined"] == 6
    assert run_.data.tags["platonic.stage"] == "ingest"
    assert [d.dataset.name for d in run_.inputs.dataset_inputs] == ["source"]
    # fix the bad shard: the good one is not redone, the stage completes
    (src / "train-00001.parquet").unlink()
    pq.write_table(recap_table([recap_row(5)]), src / "train-00001.parquet")
    r = CliRunner().invoke(
        app, ["ingest", str(src), "--format", "recap", "--out", str(out), "--out-dir", str(store), "--json"]
    )
    assert r.exit_code == 0, r.output
    c = json.loads(r.stdout)["counts"]
    assert (c["shards_cached"], c["shards_ingested"], c["kept"]) == (1, 1, 8)
    assert (out / "manifest.json").is_file()
    r = CliRunner().invoke(app, ["corpus", "stats", "--out-dir", str(store), "--json"])  # the latest: DIR
    assert r.exit_code == 0, r.output
    stats = json.loads(r.stdout)
    assert {s["source_kind"]: s["texts"] for s in stats["sources"]} == {"alt": 2, "recap": 6}
    assert stats["quarantine"] == [{"reason": "empty_text", "field": "org_caption", "texts": 1}]
    assert stats["dir"] == str(out.resolve())
    # a JSON-array file with its own column names, mapped on the command line
    (tmp_path / "caps.json").write_text(
        json.dumps([{"img": "p", "n": 0, "cap": "a plane"}, {"img": "p", "n": 1, "cap": "an aircraft"}])
    )
    r = CliRunner().invoke(
        app,
        [
            "ingest",
            str(tmp_path / "caps.json"),
            "--format",
            "jsonl",
            "--id-column",
            "img",
            "--index-column",
            "n",
            "--text-column",
            "cap=caption",
            "--out-dir",
            str(store),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["counts"]["kept"] == 2 and rep["out"].startswith(str(store.resolve() / "artifacts" / "ingest"))
    r = CliRunner().invoke(app, ["corpus", "stats", "--out-dir", str(store), "--json"])
    assert json.loads(r.stdout)["sources"][0]["source_kind"] == "caption"
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "caps.json"), "--format", "jsonl", "--text-column", "cap"])
    assert r.exit_code == 2 and "expected COLUMN=KIND" in r.stderr
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "missing"), "--format", "recap", "--out-dir", str(store)])
    assert r.exit_code == 2 and "missing: no such file or folder" in r.stderr
    assert duckdb.__version__  # the catalog is plain DuckDB


# ---- the pipeline on a real source -------------------------------------------------------------


@pytest.mark.e2e  # a real flow
def test_pipeline_ingests_a_real_corpus_then_stops_clearly(tmp_path, prefect_harness):
    """A recipe with `ingest.source: recap` runs the ingest stage in the flow (Prefect task,
    MLflow nested run, store artifact); `--only ingest` completes, a full run is refused
    before anything runs, with a message saying why (real corpora need a positives backend
    and images)."""
    from platonic.core.config import ConfigError
    from platonic.flows.pipeline import pipeline

    pq.write_table(recap_table([recap_row(i) for i in range(3)]), tmp_path / "train-00000.parquet")
    tiny = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"
    cfg = load_config(
        tiny,
        [f"out_dir={tmp_path / 'store'}", "ingest.source=recap", f"ingest.paths=[{tmp_path / 'train-00000.parquet'}]"],
    )
    res = pipeline(cfg.model_dump(mode="json"), only="ingest")
    ing = res["stages"]["ingest"]
    assert set(res["stages"]) == {"ingest"}
    m = json.loads((Path(ing["uri"]) / "manifest.json").read_text())
    assert m["counts"]["kept"] == 9 and m["upstream"] == {"source": m["upstream"]["source"]}
    assert (Path(ing["uri"]) / "texts" / "shard=train-00000" / "data.parquet").is_file()
    with pytest.raises(ConfigError, match=r"need a positives backend and images for a real corpus \(recap\)"):
        pipeline(cfg.model_dump(mode="json"))


def test_suspect_prefilter_covers_the_rules_regex():
    """The cheap pass that picks texts for the rules (`_suspects`) misses nothing the full
    RE2 pattern matches, whatever the code point, position or slice; its double-space scan
    is exact."""
    import random

    import numpy as np
    import pyarrow.compute as pc

    from platonic.core.data.ingest import _SUSPECT, _double_spaces, _suspects

    rng = random.Random(0)
    alphabet = [
        " ",
        "  ",
        "a",
        "~",
        "\t",
        "\n",
        "\r",
        "\x00",
        "\x1b",
        "\x1f",
        "\x7f",
        "\x85",
        "\xa0",
        "é",
        "\u2028",
        "\u3000",
    ]
    probes = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(20_000)]
    probes += [None, "", " ", "a  b", " a", "a "] + [f"a{chr(c)}b" for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    texts = pa.array(probes)
    for part in (texts, texts.slice(1), texts.slice(3, 5_000), texts.cast(pa.large_string()).slice(2)):
        fast = _suspects(part).to_numpy(zero_copy_only=False)
        full = pc.fill_null(pc.match_substring_regex(part, _SUSPECT), False).to_numpy(zero_copy_only=False)
        missed = [t for t, f, r in zip(part.to_pylist(), fast, full, strict=True) if r and not f]
        assert not missed, missed[:5]
        expected = np.array([t is not None and "  " in t for t in part.to_pylist()])
        assert (_double_spaces(part) == expected).all()
    assert fast[: 20_000 - 3].any() and not fast.all()  # it does select, and it does leave some out


def test_vectorised_whitespace_rule_is_pythons():
    """`normalize_whitespace` (RE2, vectorised) == `" ".join(t.split())` for every code
    point Python calls whitespace, and leaves the others alone."""
    from platonic.core.data.ingest import check_texts, normalize_whitespace

    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace()]
    probes = [f"a{s}b" for s in spaces] + [f"{s}a{s}{s}b{s}" for s in spaces] + ["a\u200bb", "a_b", "a\u00adb"]
    got = normalize_whitespace(pa.array(probes)).to_pylist()
    assert got == [" ".join(p.split()) for p in probes]
    reasons, norm = check_texts(pa.array([" ".join(spaces), "ok", None]), 100)
    assert reasons.to_pylist() == ["empty_text", None, "missing_field"]


def test_the_shard_cache_sweeps_the_scratch_of_killed_workers_on_this_host_only(tmp_path):
    """A worker killed mid-shard left `.<key>.tmp-<pid>` in the shard cache for good (no sweep
    covered it). Its scratch is now named after host and pid, and the next shard ingested
    there sweeps the scratch of dead processes of this host."""
    import os

    from platonic.core.durable import HOST

    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(recap_table([recap_row(j) for j in range(4)]), src / "train-00000.parquet")
    cache = tmp_path / "cache"
    dead, live, elsewhere = (cache / f".k.tmp-{h}-{p}" for h, p in ((HOST, dead_pid()), (HOST, os.getppid()), ("b", 1)))
    for d in (dead, live, elsewhere):
        (d / "texts").mkdir(parents=True)
    counts, results = run([src], tmp_path)
    assert [r.status for r in results] == ["ingested"]
    assert not dead.exists() and live.exists() and elsewhere.exists()
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 1  # the shard's cache entry
