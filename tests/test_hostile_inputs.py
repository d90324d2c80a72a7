"""Hostile inputs to ingest and the corpus readers (issue 19): an output folder holding the
user's files, a tar member far past the text limit, a CSV quote that never closes, control
characters in a caption, paths with glob characters. Each fixture is written here, tiny,
except the memory-bound one, generated on the fly."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import textwrap
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import platonic_cli, quiet_env
from test_corpus import _tar  # one tar writer for the reader tests

from platonic.core.config import IngestConfig
from platonic.core.data.catalog import open_catalog
from platonic.core.data.corpus import ingest_corpus
from platonic.core.data.readers import resolve_sources


def run(paths, tmp: Path, fmt: str, out: Path | None = None, **cfg):
    """Ingest with tiny batches (2 rows), as tests/test_corpus.py does."""
    ic = IngestConfig(source=fmt, paths=[str(p) for p in paths], **{"batch_rows": 2, **cfg})
    shards = resolve_sources(ic.paths, fmt, ic.revision, ic.allow_patterns or None)
    counts, results = ingest_corpus(shards, ic, out or tmp / "out", tmp / "cache")
    assert counts["in"] == counts["kept"] + counts["quarantined"]
    assert counts["quarantined"] == sum(v for k, v in counts.items() if k.startswith("quarantined_"))
    return counts, results


def rows(out: Path, view: str, cols: str) -> list[tuple]:
    con = open_catalog(out / "catalog.duckdb")
    try:
        return con.execute(f"SELECT {cols} FROM {view} ORDER BY shard, source_row").fetchall()
    finally:
        con.close()


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- 3. the output folder: never delete what ingest did not write ---------------------------------


def _cli_ingest(args: list[str]):
    # Prefect binds its log handlers to the streams of its import: import it before CliRunner
    # swaps (and then closes) stdout/stderr, as a real process does
    from typer.testing import CliRunner

    import platonic.tasks.executor  # noqa: F401
    from platonic.flows.cli import app

    return CliRunner().invoke(app, ["ingest", *args])


def test_ingest_out_refuses_a_folder_it_did_not_write_and_deletes_nothing(tmp_path):
    src = tmp_path / "caps.jsonl"
    src.write_text(json.dumps({"image_id": "a", "text": "a red bus"}) + "\n")
    store = tmp_path / "store"
    # a folder of the user's that happens to use ingest's partition names
    mine = tmp_path / "mine"
    for rel, data in {
        "texts/notes.txt": b"my notes",  # a file where ingest keeps its partitions
        "quarantine/2024/keep.parquet": b"PAR1 mine",  # a folder that is no shard partition
        "images/photo.jpg": b"\xff\xd8 mine",
        "manifest.json": b'{"mine": true}',  # not an artifact manifest
        "thesis.tex": b"\\documentclass{article}",
    }.items():
        (mine / rel).parent.mkdir(parents=True, exist_ok=True)
        (mine / rel).write_bytes(data)
    before = files_under(mine)
    r = _cli_ingest([str(src), "--format", "jsonl", "--out", str(mine), "--out-dir", str(store)])
    assert r.exit_code == 2, r.output
    err = [line for line in r.stderr.splitlines() if line.startswith("error")]  # MLflow logs there too
    assert len(err) == 1 and err[0].startswith("error: ") and str(mine.resolve()) in err[0], r.stderr
    assert "thesis.tex" in err[0] and "texts/" in err[0]  # what is there
    assert files_under(mine) == before  # nothing deleted, nothing added

    # ingest's own output folder: a rerun replaces its partitions, but a file the user put
    # among them is not deleted: the run is refused, naming it
    out = tmp_path / "corpus"
    r = _cli_ingest([str(src), "--format", "jsonl", "--out", str(out), "--out-dir", str(store)])
    assert r.exit_code == 0, r.output
    (out / "texts" / "README.txt").write_text("what these files are")
    (out / "images" / "mine").mkdir(parents=True)
    (out / "images" / "mine" / "cat.png").write_bytes(b"\x89PNG mine")
    src2 = tmp_path / "other.jsonl"
    src2.write_text(json.dumps({"image_id": "b", "text": "a blue car"}) + "\n")
    before = files_under(out)
    r = _cli_ingest([str(src2), "--format", "jsonl", "--out", str(out), "--out-dir", str(store)])
    assert r.exit_code == 2, r.output
    err = [line for line in r.stderr.splitlines() if line.startswith("error")]
    assert len(err) == 1 and err[0].startswith("error: ") and "README.txt" in err[0], r.stderr
    assert files_under(out) == before
    # without the user's files the rerun goes through and drops only its own stale partition
    (out / "texts" / "README.txt").unlink()
    (out / "images" / "mine" / "cat.png").unlink()
    (out / "images" / "mine").rmdir()
    r = _cli_ingest([str(src2), "--format", "jsonl", "--out", str(out), "--out-dir", str(store)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (out / "texts").iterdir()) == ["shard=other"]


def test_ingest_corpus_keeps_foreign_files_among_its_partitions(tmp_path):
    """The core function, as a notebook calls it: a stray entry among the partitions is
    refused before anything is read or written."""
    from platonic.core.artifacts import ForeignFolderError

    src = tmp_path / "caps.jsonl"
    src.write_text(json.dumps({"image_id": "a", "text": "a red bus"}) + "\n")
    out = tmp_path / "out"
    (out / "quarantine").mkdir(parents=True)
    (out / "quarantine" / "todo.txt").write_text("look at these")
    with pytest.raises(ForeignFolderError, match=r"quarantine/todo\.txt"):
        run([src], tmp_path, "jsonl")
    assert (out / "quarantine" / "todo.txt").read_text() == "look at these"
    assert not (out / "texts").exists()


# ---- 4. a tar member far past the text limit: bounded memory ------------------------------------

_RSS_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    from pathlib import Path
    from platonic.core.config import IngestConfig
    from platonic.core.data.corpus import ingest_corpus
    from platonic.core.data.readers import resolve_sources

    tmp = Path(sys.argv[1])

    def ingest(name):
        ic = IngestConfig(source="wds", paths=[str(tmp / name)], max_text_chars=1000)
        return ingest_corpus(resolve_sources(ic.paths, "wds"), ic, tmp / ("out-" + name), tmp / "cache")[0]

    ingest("small.tar.gz")  # warm up: every module and pool the big one needs is loaded
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    counts = ingest("big.tar.gz")
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"counts": counts, "growth_kb": after - before}))
    """
)


class _Repeat(io.RawIOBase):
    """`n` bytes of a repeated pattern, produced as they are read (never held whole)."""

    def __init__(self, pattern: bytes, n: int):
        self.pattern, self.left = pattern, n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        k = min(len(b), self.left)
        reps = self.pattern * (k // len(self.pattern) + 1)
        b[:k] = reps[:k]
        self.left -= k
        return k


def test_huge_tar_members_are_never_read_whole(tmp_path):
    big = 200 * 1024 * 1024
    with tarfile.open(tmp_path / "big.tar.gz", "w:gz", compresslevel=1) as tf:
        for name, pattern, size in (
            ("a.txt", b"a red bus in town ", big),  # far past max_text_chars
            ("b.txt", b"a small caption", 15),
            ("b.bin", b"\0\1\2\3", big),  # a member no text column reads
        ):
            info = tarfile.TarInfo(name)
            info.size = size
            tf.addfile(info, _Repeat(pattern, size))
    with tarfile.open(tmp_path / "small.tar.gz", "w:gz") as tf:
        info = tarfile.TarInfo("s.txt")
        info.size = 7
        tf.addfile(info, io.BytesIO(b"a caption"))
    assert (tmp_path / "big.tar.gz").stat().st_size < 4 * 1024 * 1024  # 400 MB that compress away
    proc = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    c = res["counts"]
    assert (c["rows_in"], c["kept"], c["quarantined"], c.get("quarantined_over_long_text")) == (2, 1, 1, 1)
    assert res["growth_kb"] < 48 * 1024, res  # a 200 MB member read whole grows it by >= 200 MB
    q = rows(tmp_path / "out-big.tar.gz", "quarantine", "source_row, field, reason, length(raw)")
    assert q[0][:3] == (0, "txt", "over_long_text") and q[0][3] <= 4 * 1000  # a bounded prefix as raw


def test_text_member_limit_counts_characters_not_bytes(tmp_path):
    """A member is read up to 4 bytes per allowed character (UTF-8's widest): a text of
    max_text_chars 4-byte characters is kept; one character more is over long, whether it
    is decided on the bytes read or on the prefix."""
    clef = "\U0001d11e"  # 4 bytes in UTF-8
    _tar(
        tmp_path / "t.tar",
        [
            ("k0.txt", (clef * 8).encode()),  # 32 bytes, 8 characters: at the limit, kept
            ("k1.txt", (clef * 9).encode()),  # 36 bytes > 4 x 8: not read past the limit
            ("k2.txt", ("é" * 8).encode()),  # 16 bytes, 8 characters: kept
            ("k3.txt", b"a" * 9),  # 9 bytes, read whole: 9 characters, over long
            ("k4.txt", b" " * 40 + b"x"),  # past the byte bound: over long, however it starts
            ("k5.json", json.dumps({"caption": "x" * 70_000, "url": "u"}).encode()),  # too big to parse
            ("k6.json", json.dumps({"caption": "fine cap"}).encode()),
        ],
    )
    counts, _ = run(
        [tmp_path / "t.tar"], tmp_path, "wds", max_text_chars=8, text_columns={"txt": "alt", "json.caption": "recap"}
    )
    kept = rows(tmp_path / "out", "texts", "image_id, text_id")
    assert kept == [("k0", "k0:alt:0"), ("k2", "k2:alt:0"), ("k6", "k6:recap:0")]
    q = {(r[0], r[1]): r[2] for r in rows(tmp_path / "out", "quarantine", "source_row, field, reason")}
    assert {k: v for k, v in q.items() if v == "over_long_text"} == {
        (1, "txt"): "over_long_text",
        (3, "txt"): "over_long_text",
        (4, "txt"): "over_long_text",
        (5, "json.caption"): "over_long_text",
    }
    assert counts["rows_in"] == 7
    raw = {r[:2]: r[2] for r in rows(tmp_path / "out", "quarantine", "source_row, field, length(raw)")}
    assert raw[(5, "json.caption")] < 70_000  # the member was not read whole


# ---- 5. CSV: a quote that never closes ----------------------------------------------------------


def test_csv_unterminated_quote_does_not_swallow_rows(tmp_path):
    (tmp_path / "eof.csv").write_text(  # the quote runs to the end of the file
        'img,caption\na,"first caption\nb,second caption\nc,third caption\n'
    )
    (tmp_path / "later.csv").write_text(  # the quote closes at the next quoted field
        'img,caption\nd,"fourth caption\ne,"fifth caption"\nf,"a caption\nover two lines"\ng,seventh\n'
        'g2,"a caption, with commas,\nover, two lines"\n'
    )
    (tmp_path / "tabs.tsv").write_text('img\tcaption\nh\t"eighth\ni\tninth\n')
    counts, _ = run(
        [tmp_path / "eof.csv", tmp_path / "later.csv", tmp_path / "tabs.tsv"],
        tmp_path,
        "jsonl",
        id_column="img",
        text_columns={"caption": "alt"},
    )
    kept = [r[:2] for r in rows(tmp_path / "out", "texts", "image_id, text, shard")]
    assert sorted(kept) == [
        ("b", "second caption"),
        ("c", "third caption"),
        ("e", "fifth caption"),
        ("f", "a caption over two lines"),  # a quoted field over two lines is no broken quote
        ("g", "seventh"),
        ("g2", "a caption, with commas, over, two lines"),  # its last line closes a quote: no row
        ("i", "ninth"),
    ]
    q = rows(tmp_path / "out", "quarantine", "shard, source_row, reason, raw")
    assert q == [
        ("eof", 0, "malformed_csv", 'a,"first caption'),
        ("later", 0, "malformed_csv", 'd,"fourth caption'),
        ("tabs", 0, "malformed_csv", 'h\t"eighth'),
    ]
    assert counts["rows_in"] == 3 + 5 + 2 == counts["kept"] + counts["quarantined"]


# ---- 6. control characters ---------------------------------------------------------------------

NUL_CAPTION = "a dog\x00 on a beach"


def test_control_characters_rule():
    """Every control character (Unicode Cc) is quarantined except those Python's
    str.split() calls whitespace (tab, newlines, ...), which normalise to a space."""
    from platonic.core.data.ingest import check_text, check_texts

    controls = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cc"]
    reasons, norm = check_texts(pa.array([f"a{c}b" for c in controls]), 100)
    for c, reason, text in zip(controls, reasons.to_pylist(), norm.to_pylist(), strict=True):
        if c.isspace():
            assert (reason, text) == (None, "a b"), repr(c)
        else:
            assert reason == "control_characters", repr(c)
    assert check_text(NUL_CAPTION, 100) == "control_characters"
    assert check_text("\x00", 100) == "control_characters"  # not empty: something is there
    assert check_text("a\u200bb\u00ad", 100) is None  # format characters are no controls


def test_control_characters_are_quarantined_by_every_reader(tmp_path):
    pq.write_table(
        pa.table({"key": ["r0", "r1"], "org_caption": [NUL_CAPTION, "fine"], "re_caption": ["ok", "bell\x07"]}),
        tmp_path / "recap.parquet",
    )
    _tar(
        tmp_path / "w.tar",
        [("w0.txt", NUL_CAPTION.encode()), ("w1.json", json.dumps({"caption": "esc\x1b[31m red"}).encode())],
    )
    (tmp_path / "k.json").write_text(
        json.dumps({"images": [{"cocoid": 1, "sentences": [{"raw": NUL_CAPTION, "sentid": 5}, {"raw": "ok"}]}]})
    )
    (tmp_path / "l.jsonl").write_text(json.dumps({"image_id": "j0", "text": NUL_CAPTION}) + "\n")
    (tmp_path / "c.csv").write_text(f"image_id,text\nc0,{NUL_CAPTION}\nc1,del\x7f\n")
    cases = [
        ("recap", ["recap.parquet"], {}, 2),
        ("wds", ["w.tar"], {"text_columns": {"txt": "alt", "json.caption": "recap"}}, 2),
        ("coco", ["k.json"], {}, 1),
        ("jsonl", ["l.jsonl", "c.csv"], {}, 3),
    ]
    for fmt, names, cfg, n_bad in cases:
        out = tmp_path / f"out-{fmt}"
        counts, _ = run([tmp_path / n for n in names], tmp_path, fmt, out=out, **cfg)
        assert counts.get("quarantined_control_characters") == n_bad, (fmt, counts)
        assert not any("\x00" in t or "\x07" in t or "\x7f" in t for (t,) in rows(out, "texts", "text")), fmt
        raws = [r for (r,) in rows(out, "quarantine", "raw")]
        assert any("\x00" in r for r in raws), fmt  # the raw value is kept for inspection


def test_control_characters_in_the_world_ingest(tmp_path):
    from platonic.core.config import WorldConfig
    from platonic.core.data.ingest import ingest_world
    from platonic.core.world import generate_world

    world = tmp_path / "world"
    generate_world(WorldConfig(n_train=16, n_eval=16), world)
    pq.write_table(pa.table({"scene_id": ["s0", "s1"], "text": [NUL_CAPTION, "fine"]}), world / "alt_texts.parquet")
    (tmp_path / "out").mkdir()
    counts = ingest_world(world, IngestConfig(), tmp_path / "out")
    q = pq.read_table(tmp_path / "out" / "quarantine.parquet").to_pylist()
    assert [(r["source_row"], r["reason"]) for r in q] == [(0, "control_characters")]
    assert counts["train_texts"] == 1


# ---- 10. paths with glob characters: an existing path is taken literally ----------------------


def test_sources_with_glob_characters_are_taken_literally_when_they_exist(tmp_path):
    line = json.dumps({"image_id": "a", "text": "the real one"}) + "\n"
    decoy = json.dumps({"image_id": "z", "text": "a decoy the glob would match"}) + "\n"
    (tmp_path / "caps[1].jsonl").write_text(line)
    (tmp_path / "caps1.jsonl").write_text(decoy)  # what `caps[1].jsonl` matches as a glob
    (tmp_path / "set[a]").mkdir()
    (tmp_path / "set[a]" / "x.jsonl").write_text(line)
    (tmp_path / "seta").mkdir()
    (tmp_path / "seta" / "y.jsonl").write_text(decoy)
    assert [s.uri for s in resolve_sources([str(tmp_path / "caps[1].jsonl")], "jsonl")] == [
        str(tmp_path / "caps[1].jsonl")
    ]
    assert [s.uri for s in resolve_sources([str(tmp_path / "set[a]")], "jsonl")] == [
        str(tmp_path / "set[a]" / "x.jsonl")
    ]
    # a path that does not exist is still a glob
    assert [s.uri for s in resolve_sources([str(tmp_path / "caps[0-9].jsonl")], "jsonl")] == [
        str(tmp_path / "caps1.jsonl")
    ]
    assert [s.uri for s in resolve_sources([f"file://{tmp_path}/caps[1].jsonl"], "jsonl")] == [
        f"file://{tmp_path}/caps[1].jsonl"
    ]


def test_ingest_out_with_glob_characters(tmp_path):
    """Two shards sharing a text id (the cross-shard check reads every partition) into an
    output folder whose name is a glob matching a decoy folder beside it."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"image_id": "x", "text": f"text from {name}"}) + "\n")
    decoy = tmp_path / "out1" / "texts" / "shard=zz"
    decoy.mkdir(parents=True)
    pq.write_table(pa.table({"text_id": ["q:alt:0"], "source_row": [0]}), decoy / "data.parquet")
    out = tmp_path / "out[1]"
    counts, _ = run([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path, "jsonl", out=out)
    assert (counts["kept"], counts["quarantined_duplicate_key"]) == (1, 1)
    assert rows(out, "texts", "shard, text") == [("a", "text from a")]


def test_audit_corpus_with_glob_characters(tmp_path):
    from platonic.core.config import AuditConfig
    from platonic.core.data.evalsets import load_eval_spec
    from platonic.core.data.schema import text_table
    from platonic.core.dedup import audit, eval_table

    def corpus(folder: Path, text: str) -> None:
        folder.mkdir()
        row = {"image_id": "A", "text_id": "A:alt:0", "source_kind": "alt", "text": text}
        pq.write_table(text_table([row]), folder / "corpus.parquet")

    corpus(tmp_path / "corpus[1]", "a man rides a red bicycle")
    corpus(tmp_path / "corpus1", "an unrelated sentence about tea")  # the glob's match
    (tmp_path / "wit.txt").write_text("A man rides a red bicycle.\n")
    spec = f"captions:{tmp_path / 'wit.txt'}"
    evals = eval_table(dict([load_eval_spec(spec)]))
    cfg = AuditConfig(corpus=[str(tmp_path / "corpus[1]")], eval=[spec], levels=["exact"])
    (tmp_path / "out").mkdir()
    s = audit(cfg.corpus, evals, cfg, tmp_path / "out")
    assert s["corpus_texts"] == 1
    assert s["eval_sets"]["captions:wit"]["levels"]["exact"]["captions"] == 1


def test_world_catalog_in_a_folder_with_glob_characters(tmp_path):
    from platonic.core.config import WorldConfig
    from platonic.core.data.ingest import ingest_stats, ingest_world
    from platonic.core.data.schema import text_table
    from platonic.core.world import generate_world

    world = tmp_path / "world"
    generate_world(WorldConfig(n_train=16, n_eval=16), world)
    for name in ("ingest[1]", "ingest1"):
        (tmp_path / name).mkdir()
    decoy = {"image_id": "z", "text_id": "z:decoy:0", "source_kind": "decoy", "text": "x"}
    pq.write_table(text_table([decoy]), tmp_path / "ingest1" / "corpus.parquet")  # where the glob points
    ingest_world(world, IngestConfig(), tmp_path / "ingest[1]")
    kinds = {s["source_kind"] for s in ingest_stats(tmp_path / "ingest[1]")}
    assert "decoy" not in kinds and "alt" in kinds


# ---- issue 33, item 7 and its classes: bounded records, Unicode edge cases, uncounted drops ----


def _peak_python_bytes(fn) -> int:
    """The peak of Python allocations while `fn` runs (a line or a file read whole shows here)."""
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _reader_peak(path: Path, fmt: str, **cfg) -> int:
    """Peak Python allocations of reading every batch of one shard (ingest's imports excluded)."""
    from platonic.core.data.readers import reader_for

    ic = IngestConfig(source=fmt, paths=[str(path)], **cfg)
    reader, (shard,) = reader_for(ic), resolve_sources(ic.paths, fmt)

    def read() -> None:
        try:
            for _ in reader.batches(shard):
                pass
        except Exception:  # a refused shard: its memory up to the refusal is what counts
            pass

    return _peak_python_bytes(read)


def test_a_jsonl_line_over_max_record_bytes_is_quarantined_without_being_read(tmp_path):
    """Item 7: one 200 MB JSONL line took 2.56 GB; the same with a 64 KiB cap and a 8 MB line."""
    big = tmp_path / "big.jsonl"
    big.write_bytes(b'{"image_id": "a", "text": "' + b"x" * (8 << 20) + b'"}\n{"image_id": "b", "text": "two"}\n')
    c, _ = run([big], tmp_path, "jsonl", max_record_bytes=64 << 10)
    assert (c["in"], c["kept"], c.get("quarantined_over_long_text")) == (2, 1, 1)
    q = rows(tmp_path / "out", "quarantine", "source_row, field, reason, length(raw)")
    assert q[0][:3] == (0, "text", "over_long_text") and q[0][3] <= 4 * 1000  # a bounded prefix as raw
    peak = _reader_peak(big, "jsonl", max_record_bytes=64 << 10)
    assert peak < 6 << 20, peak  # the line read whole is 8 MB as bytes, then as str, then parsed
    # a JSON array's item past the cap fails its shard with one line, never read whole
    arr = tmp_path / "arr" / "big.json"
    arr.parent.mkdir()
    arr.write_bytes(b'[{"image_id": "a", "text": "' + b"x" * (8 << 20) + b'"}]')
    _, (res,) = run([arr], tmp_path / "arr", "jsonl", max_record_bytes=64 << 10)
    assert res.status == "failed" and "max_record_bytes" in res.error and "\n" not in res.error
    assert _reader_peak(arr, "jsonl", max_record_bytes=64 << 10) < 6 << 20


def test_max_record_bytes_has_bounds():
    with pytest.raises(ValueError, match="max_record_bytes"):
        IngestConfig(max_record_bytes=1 << 40)
    with pytest.raises(ValueError, match="workers"):
        IngestConfig(workers=10**6)


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize(
    "name, fmt, data, kept, reasons",
    [
        # a UTF-8 byte-order mark cost the first row, a CSV's id column, a whole JSON array or shard
        ("bom.jsonl", "jsonl", BOM + b'{"image_id": "a", "text": "one"}\n{"image_id": "b", "text": "two"}\n', 2, {}),
        ("bom.json", "jsonl", BOM + b'[{"image_id": "a", "text": "one"}, {"image_id": "b", "text": "two"}]', 2, {}),
        ("bom.csv", "jsonl", BOM + b"image_id,text\na,one\nb,two\n", 2, {}),
        (
            "captions_bom.json",
            "coco",
            BOM + b'{"images": [{"id": 1}], "annotations": [{"image_id": 1, "id": 1, "caption": "hi"}]}',
            1,
            {},
        ),
        # a lone surrogate escape ("\ud800") in a text or an id failed the whole shard to encode
        (
            "sur.jsonl",
            "jsonl",
            b'{"image_id": "a", "text": "x\\ud800y"}\n{"image_id": "b", "text": "two"}\n',
            1,
            {"invalid_utf8": 1},
        ),
        (
            "surid.jsonl",
            "jsonl",
            b'{"image_id": "a\\ud800", "text": "x"}\n{"image_id": "b", "text": "two"}\n',
            1,
            {"invalid_utf8": 1},
        ),
        (
            "captions_sur.json",
            "coco",
            b'{"images": [{"id": 1}], "annotations": [{"image_id": 1, "id": 1, "caption": "h\\ud800i"}, '
            b'{"image_id": 1, "id": 2, "caption": "ok"}, {"image_id": "1\\udfff", "id": 3, "caption": "ok"}]}',
            1,
            {"invalid_utf8": 2},
        ),
        # a record giving a read column twice kept the last value and dropped the first, uncounted
        (
            "twice.jsonl",
            "jsonl",
            b'{"image_id": "a", "text": "one", "text": "two"}\n{"image_id": "b", "text": "x"}\n',
            1,
            {"schema_mismatch": 1},
        ),
        ("nested.jsonl", "jsonl", b'{"image_id": "a", "text": "one", "meta": {"text": "two"}}\n', 1, {}),
    ],
)
def test_unicode_edge_cases_and_repeated_columns_lose_no_row(tmp_path, name, fmt, data, kept, reasons):
    (tmp_path / name).write_bytes(data)
    c, results = run([tmp_path / name], tmp_path, fmt)
    assert [r.error for r in results] == [""]
    assert c["kept"] == kept and {k[12:]: v for k, v in c.items() if k.startswith("quarantined_")} == reasons


def test_a_tar_member_name_that_is_not_utf8_costs_its_sample_not_the_shard(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tf:
        for name, data in (("caf\xe9.txt", b"hello"), ("ok.txt", b"fine")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    (tmp_path / "latin1.tar").write_bytes(buf.getvalue())
    c, results = run([tmp_path / "latin1.tar"], tmp_path, "wds")
    assert [r.error for r in results] == [""]
    assert (c["in"], c["kept"], c.get("quarantined_invalid_utf8")) == (2, 1, 1)
    assert rows(tmp_path / "out", "quarantine", "field, reason") == [("image_id", "invalid_utf8")]


def test_files_that_cannot_be_read_as_records_fail_with_one_line(tmp_path):
    (tmp_path / "u16.jsonl").write_bytes('{"image_id": "a", "text": "one"}\n'.encode("utf-16"))
    (tmp_path / "twice.csv").write_bytes(b"image_id,text,text\na,b,c\n")
    _, results = run([tmp_path / "u16.jsonl", tmp_path / "twice.csv"], tmp_path, "jsonl")
    errors = {r.shard.id: r.error for r in results}
    assert "UTF-16/32" in errors["u16"] and "column 'text' appears twice" in errors["twice"]


def test_key_parts_joined_within_a_shard_cannot_collide(tmp_path):
    """id "a\\x1fb" + index "c" and id "a" + index "b\\x1fc" were one key: a distinct row was
    quarantined as a duplicate."""
    (tmp_path / "sep.jsonl").write_bytes(
        b'{"image_id": "a\\u001fb", "cid": "c", "text": "one"}\n{"image_id": "a", "cid": "b\\u001fc", "text": "two"}\n'
    )
    c, _ = run([tmp_path / "sep.jsonl"], tmp_path, "jsonl", index_column="cid")
    assert (c["kept"], c["quarantined"]) == (2, 0)


def test_a_wordnet_line_over_max_record_bytes_is_one_malformed_row(tmp_path):
    from platonic.core.data.readers.wordnet import iter_data_lines

    line = b"00001740 03 n 01 entity 0 000 | that which is perceived\n"
    (tmp_path / "data.noun").write_bytes(line + b"00001741 03 n 01 x 0 000 | " + b"y" * (8 << 20) + b"\n" + line)
    list(iter_data_lines(str(tmp_path / "data.noun")))  # imports and caches: not counted below
    got = []
    peak = _peak_python_bytes(lambda: got.extend(iter_data_lines(str(tmp_path / "data.noun"), 64 << 10)))
    assert [type(p).__name__ for _, _, p in got] == ["Synset", "MalformedLine", "Synset"]
    assert "max_record_bytes" in str(got[1][2]) and peak < 6 << 20, peak  # the line whole: 8 MB + its str


def _gzip_bomb(path: Path, header: bytes, zeros: int) -> None:
    import zlib

    co = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip container
    parts = [co.compress(header)]
    block = bytes(1 << 20)
    for _ in range(zeros >> 20):
        parts.append(co.compress(block))
    path.write_bytes(b"".join(parts) + co.flush())


def test_a_gzip_bombed_idx_file_is_refused_in_bounded_memory(tmp_path):
    """Item 7: a 1 MB gzip-bombed Fashion-MNIST file took 2.5 GB. The header is checked before
    data is read, and no more than the bytes it declares (+1) are decompressed."""
    from platonic.core.match.data import MatchDataError, read_idx

    header = bytes([0, 0, 8, 3]) + b"".join(d.to_bytes(4, "big") for d in (40, 28, 28))
    _gzip_bomb(tmp_path / "bomb.gz", header, 64 << 20)  # 31 KB declared, 64 MB held
    assert (tmp_path / "bomb.gz").stat().st_size < 1 << 20
    err = []
    peak = _peak_python_bytes(lambda: err.append(pytest.raises(MatchDataError, read_idx, tmp_path / "bomb.gz")))
    assert "holds more than" in str(err[0].value) and peak < 4 << 20, peak
    # a header that declares terabytes is refused before anything is read
    huge = bytes([0, 0, 8, 3]) + b"".join(d.to_bytes(4, "big") for d in (2**32 - 1, 2**32 - 1, 2**32 - 1))
    (tmp_path / "huge").write_bytes(huge)
    with pytest.raises(MatchDataError, match="PLATONIC_IDX_MAX_BYTES"):
        read_idx(tmp_path / "huge")
    (tmp_path / "cut.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(MatchDataError, match="cut.gz"):
        read_idx(tmp_path / "cut.gz")


@pytest.mark.e2e  # the CLI, a real match flow
def test_a_gzip_bomb_under_platonic_match_is_one_error_line_and_the_traceback_in_the_log(prefect_harness, tmp_path):
    """Issue 43 item 8: `platonic match` over a gzip-bombed Fashion-MNIST folder refused it
    after 148 lines and 2 tracebacks (Prefect logs a failed task's exception, then the flow's).
    Now as `run` does: the state changes and one `error:` line naming the refusal and the full
    log under the store, which holds the tracebacks."""
    from prefect.settings import PREFECT_API_URL

    data = tmp_path / "fashion"
    data.mkdir()
    header = bytes([0, 0, 8, 3]) + b"".join(d.to_bytes(4, "big") for d in (40, 28, 28))
    _gzip_bomb(data / "t10k-images-idx3-ubyte.gz", header, 16 << 20)
    labels = bytes([0, 0, 8, 1]) + (40).to_bytes(4, "big") + bytes(range(10)) * 4
    (data / "t10k-labels-idx1-ubyte").write_bytes(labels)
    out = tmp_path / "out"
    env = {**quiet_env(tmp_path), "PREFECT_API_URL": PREFECT_API_URL.value()}  # the session's server
    sets = ["--set", f"data.path={data}", "--set", f"out_dir={out}"]
    # MiniLM alone: the recipe's Gemma comes with the match-real extra, which `match` now asks
    # for before anything starts (test_config.py), and the test extra does not install
    sets += ["--set", "text_models={minilm: {source: packaged, id: all-MiniLM-L6-v2, dtype: float32}}"]
    p = platonic_cli("match", "match_fashion", *sets, cwd=tmp_path, env=env)
    assert p.returncode == 1, p.stderr[-3000:]
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    (error,) = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert "holds more than" in error and "t10k-images-idx3-ubyte.gz" in error, error
    log = Path(error.split("; full log: ")[1])
    assert log.parent == out / "logs"
    assert "Traceback" in log.read_text() and "MatchDataError" in log.read_text()


# ---- issue 33's metric class: no silent non-number or tie-breaking score, no traceback ---------


def test_features_with_no_defined_alignment_are_one_line_errors_not_scores():
    """Constant features (or all rows one point) scored mutual_knn 0.21, cycle_knn 0.90 and CKA
    0.0 with exit 0; (N, 0) features ended in an IndexError; float64 values past float32's
    range were reported as "NaN or inf"."""
    from platonic.core.metrics import METRICS, alignment

    rng = np.random.default_rng(0)
    a = rng.standard_normal((50, 8)).astype(np.float32)
    flat = {
        "constant": np.ones((50, 8), np.float32),
        "zeros": np.zeros((50, 8), np.float32),
        "one row repeated": np.repeat(rng.standard_normal((1, 8)), 50, 0),
    }
    for metric in METRICS:
        for name, b in flat.items():
            with pytest.raises(ValueError, match="every sample is the same point") as e:
                alignment(a, b, metric=metric, n_boot=0)
            assert "\n" not in str(e.value), (metric, name)
    for shape, word in (((50, 0), "no features"), ((0, 8), "no samples")):
        with pytest.raises(ValueError, match=word):
            alignment(np.zeros(shape), np.zeros(shape), n_boot=0)
    with pytest.raises(ValueError, match="past float32's range"):
        alignment(a, np.full((50, 8), 1e200), n_boot=0)
    # one flat layer among several is left out of the best, its cells NaN
    s = alignment(np.stack([a, np.ones_like(a)]), a, n_boot=0)
    assert (s.layer_a, s.layer_b) == (0, 0) and s.score > 0.9 and np.isnan(s.per_layer[1][0])


# ---- issue 33's config class: no value without an upper bound where it sizes memory or time -----

# int fields that need no upper bound: "at most N of the data" (a larger N is all of it), an
# index into a model's layers, a Parquet row group's size (larger is one group)
_UNBOUNDED_BY_DESIGN = {
    ("ViewsConfig", "row_group_rows"),
    ("EmbedConfig", "layer"),
    ("EvalSetConfig", "limit"),
    ("CaptionEncoderConfig", "layer"),
    ("CaptionDataConfig", "eval_limit"),
    ("DecoderConfig", "max_texts"),
    ("CaptionEvalConfig", "examples"),
    ("MatchDataConfig", "per_class"),
    ("MatchModelConfig", "layer"),
}


def test_every_int_a_recipe_sets_has_an_upper_bound():
    """`world.n_train=100000000000000000000` passed validation (the issue: 80 s, then a
    traceback); every int that sizes memory or time now has `le=`."""
    import inspect
    import typing

    import annotated_types as at
    from pydantic import BaseModel

    import platonic.core.config as config

    models = {
        obj
        for mod in [m for n, m in sys.modules.items() if n.startswith(config.__name__)]
        for obj in vars(mod).values()
        if inspect.isclass(obj) and issubclass(obj, BaseModel) and obj.__module__.startswith(config.__name__)
    }
    unbounded = []
    for model in models:
        for name, f in model.model_fields.items():
            args = typing.get_args(f.annotation)
            is_int = f.annotation is int or (int in args and type(None) in args)
            if is_int and not any(isinstance(m, (at.Le, at.Lt)) for m in f.metadata):
                unbounded.append((model.__name__, name))
    assert len(models) > 20
    assert sorted(set(unbounded) - _UNBOUNDED_BY_DESIGN) == []


def test_a_world_whose_renders_cannot_fit_is_refused_at_validation():
    from platonic.core.config import WorldConfig

    with pytest.raises(ValueError, match="n_train"):
        WorldConfig(n_train=10**20)
    with pytest.raises(ValueError, match="the renders would take"):
        WorldConfig(n_train=5_000_000, image_size=256)
    WorldConfig(n_train=1_000_000)  # 6 GB of renders: allowed


# ---- issue 33's report class: bidi overrides and zero-width characters are shown, not printed ----

TROJAN = "a red cube\u202e llab eulb a\u202c\u200b left\u00adof"  # RLO ... PDF, ZWSP, soft hyphen


def test_display_text_shows_every_invisible_or_reordering_character():
    from platonic.core.matchnorm import DEFAULT_IGNORABLE_RANGES
    from platonic.core.report import display_text

    assert display_text(TROJAN) == "a red cube\\u202e llab eulb a\\u202c\\u200b left\\u00adof"
    for lo, hi in DEFAULT_IGNORABLE_RANGES:
        for cp in (lo, hi):
            assert chr(cp) not in display_text(f"x{chr(cp)}y"), hex(cp)
    assert display_text("line\u2028two\nthree\x1b[31m") == "line\\u2028two\\u000athree\\u001b[31m"
    plain = "a rеd cubе, café, 日本語, émoji 🙂, tab-free"  # visible non-ASCII is left alone
    assert display_text(plain) == plain


def test_audit_and_caption_reports_do_not_print_bidi_or_zero_width_characters(tmp_path):
    from platonic.core.dedup import summary_markdown
    from platonic.core.report import caption_examples

    summary = {"corpus_texts": 1, "levels": ["exact"], "eval_sets": {}}
    matches = pa.Table.from_pylist(
        [
            {
                "level": "exact",
                "eval_text": TROJAN,
                "eval_set": "wit",
                "eval_text_id": "e\u202e1",
                "text": TROJAN,
                "source_kind": "alt",
                "text_id": "t:alt:0",
                "source_uri": "shard\u2067.jsonl",
                "source_row": 0,
                "score": 1.0,
            }
        ]
    )
    md = summary_markdown(summary, matches)
    caption_examples(
        [
            {
                "image": np.zeros((4, 4, 3), np.uint8),
                "image_id": "i\u200b1",
                "references": [TROJAN],
                "captions": {"recap": TROJAN},
            }
        ],
        tmp_path,
    )
    for text in (md, (tmp_path / "examples.md").read_text(), (tmp_path / "examples.html").read_text()):
        hidden = [hex(ord(c)) for c in text if c in "\u202e\u202c\u200b\u00ad\u2067"]
        assert hidden == [] and "\\u202e" in text


def test_a_tar_member_repeated_within_a_sample_is_quarantined_not_lost(tmp_path):
    """Issue 43: `dup.txt` twice in a row made one sample whose second text replaced the
    first: 4 text members, `texts in 3 = kept 3 + quarantined 0`. The repeat now starts a
    sample of its own, quarantined as duplicate_key naming the member: the first is kept."""
    _tar(
        tmp_path / "d.tar",
        [("a.txt", b"first a"), ("dup.txt", b"first dup"), ("dup.txt", b"second dup"), ("b.txt", b"first b")],
    )
    c, results = run([tmp_path / "d.tar"], tmp_path, "wds")
    assert [r.error for r in results] == [""]
    assert (c["in"], c["kept"], c.get("quarantined_duplicate_key")) == (4, 3, 1)
    kept = rows(tmp_path / "out", "texts", "image_id, text")
    assert kept == [("a", "first a"), ("dup", "first dup"), ("b", "first b")]
    assert rows(tmp_path / "out", "quarantine", "field, reason, raw") == [("dup.txt", "duplicate_key", "second dup")]


@pytest.mark.parametrize("eol", [b"\r", b"\r\n", b"\n"], ids=["cr", "crlf", "lf"])
def test_jsonl_lines_may_end_in_cr_crlf_or_lf(tmp_path, eol):
    """Issue 43: a 100-row JSONL with old-Mac `\\r` line ends was one line, so one row
    (quarantined); now every line end ingests the same 100 rows. An over-long `\\r` line is
    still cut at the cap, and the rows after it are read."""
    src = tmp_path / "cr.jsonl"
    src.write_bytes(b"".join(json.dumps({"image_id": f"i{n}", "text": f"text {n}"}).encode() + eol for n in range(100)))
    c, results = run([src], tmp_path, "jsonl")
    assert [r.error for r in results] == [""]
    assert (c["in"], c["kept"], c["quarantined"]) == (100, 100, 0)
    assert rows(tmp_path / "out", "texts", "text")[-1] == ("text 99",)
    big = tmp_path / "big" / "big.jsonl"
    big.parent.mkdir()
    big.write_bytes(
        b'{"image_id": "a", "text": "' + b"x" * 5000 + b'"}' + eol + b'{"image_id": "b", "text": "two"}' + eol
    )
    c, _ = run([big], tmp_path / "big", "jsonl", max_record_bytes=1024)
    assert (c["in"], c["kept"], c.get("quarantined_over_long_text")) == (2, 1, 1)


def test_bounded_lines_splits_on_every_line_end_in_bounded_memory():
    from platonic.core.data.readers.base import bounded_lines

    def lines(data: bytes, limit: int = 8, chunk: int = 3) -> list[tuple[bytes, bool]]:
        return list(bounded_lines(io.BytesIO(data), limit, chunk))

    assert lines(b"a\nb\r\nc\rd") == [(b"a\n", False), (b"b\r\n", False), (b"c\r", False), (b"d", False)]
    assert lines(b"ab\r\ncd\r\n", chunk=3) == [(b"ab\r\n", False), (b"cd\r\n", False)]  # \r|\n across reads
    assert lines(b"12345678\r" + b"9" * 20 + b"\rok\n") == [
        (b"12345678\r", False),
        (b"99999999", True),
        (b"ok\n", False),
    ]
    assert lines(b"") == [] and lines(b"\r\r") == [(b"\r", False), (b"\r", False)]
