"""Ingest (quarantine), dedup (normalisation, policies) and views on tiny inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platonic.core.config import DedupConfig, IngestConfig, ViewsConfig, WorldConfig
from platonic.core.data.ingest import check_text, ingest_stats, ingest_world
from platonic.core.data.schema import text_table
from platonic.core.dedup import dedup, normalize_text
from platonic.core.views import build_views
from platonic.core.world import generate_world

# ---- ingest ------------------------------------------------------------------------------

MAX_CHARS = 1000  # the default; eval captions (~100-250 chars) stay well below
# (scene_id, text, expected reason or None if kept)
ALT_ROWS = [
    ("s0000000", "red circle", None),
    ("s0000001", "", "empty_text"),
    ("s0000002", "  \t \n ", "empty_text"),
    ("s0000003", None, "missing_field"),
    ("s0000004", "x" * (MAX_CHARS + 1), "over_long_text"),
    ("s0000005", "first text", None),
    ("s0000005", "second text", "duplicate_key"),  # same scene -> same text id
    ("", "orphan text", "missing_field"),  # no scene id
    ("s0000006", "  spaced \t  out\ntext ", None),
    ("s0000001", "now a good one", None),  # its first row was quarantined: not a duplicate
    ("s0000007", "x" * MAX_CHARS, None),  # exactly at the limit
]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("world")
    generate_world(WorldConfig(n_train=16, n_eval=16), out)
    pq.write_table(
        pa.table({"scene_id": [r[0] for r in ALT_ROWS], "text": pa.array([r[1] for r in ALT_ROWS], pa.string())}),
        out / "alt_texts.parquet",
    )
    return out


def test_ingest_quarantines_bad_rows_with_reasons(world, tmp_path):
    counts = ingest_world(world, IngestConfig(max_text_chars=MAX_CHARS), tmp_path)
    n_eval = pq.read_metadata(world / "eval_captions.parquet").num_rows
    n_bad = sum(r[2] is not None for r in ALT_ROWS)
    assert counts["in"] == len(ALT_ROWS) + n_eval
    assert counts["quarantined"] == n_bad == 6
    assert counts["train_texts"] == len(ALT_ROWS) - n_bad
    assert counts["eval_texts"] == n_eval
    assert counts["in"] == counts["kept"] + counts["quarantined"]
    assert counts["images"] == 32

    q = pq.read_table(tmp_path / "quarantine.parquet").to_pylist()
    assert [(r["source_row"], r["reason"]) for r in q] == [
        (i, r[2]) for i, r in enumerate(ALT_ROWS) if r[2] is not None
    ]
    assert all(r["source_uri"].endswith("alt_texts.parquet") and r["field"] == "text" for r in q)
    assert q[0]["raw"] == "" and q[2]["raw"] is None  # a missing text stays null, not "None"

    corpus = pq.read_table(tmp_path / "corpus.parquet").to_pylist()
    kept_rows = [i for i, r in enumerate(ALT_ROWS) if r[2] is None]
    assert [r["source_row"] for r in corpus] == kept_rows
    assert len({r["text_id"] for r in corpus}) == len(corpus)  # text ids unique
    by_row = {r["source_row"]: r for r in corpus}
    assert by_row[8]["text"] == "spaced out text"  # whitespace collapsed
    assert by_row[5]["text"] == "first text"  # the first of the duplicates is the one kept
    assert by_row[9]["text_id"] == "s0000001:alt:0"
    assert all(r["source_kind"] == "alt" and r["text_id"] == f"{r['image_id']}:alt:0" for r in corpus)

    ev = pq.read_table(tmp_path / "eval.parquet").to_pylist()
    assert len(ev) == n_eval and all(r["source_kind"] == "eval" for r in ev)
    stats = {r["source_kind"]: r for r in ingest_stats(tmp_path)}
    assert stats["alt"]["texts"] == len(corpus)


def test_check_text_reasons():
    assert check_text("ok", 10) is None
    assert check_text(None, 10) == "missing_field"
    assert check_text(3, 10) == "schema_mismatch"
    assert check_text(" \u3000\n", 10) == "empty_text"  # unicode whitespace too
    assert check_text("x" * 11, 10) == "over_long_text"
    assert check_text("bad \ud800 surrogate", 100) == "invalid_utf8"


# ---- dedup -------------------------------------------------------------------------------


def test_normalize_text():
    assert normalize_text("Ｈｅｌｌｏ，　Ｗｏｒｌｄ！") == "hello world"  # NFKC full-width
    assert normalize_text("ﬁne") == "fine"  # NFKC ligature
    assert normalize_text("Straße") == "strasse"  # casefold, not just lower()
    assert normalize_text("  A\tred\n\ncircle. ") == "a red circle"
    assert normalize_text("mid-sized, (big)!") == "mid sized big"  # punctuation -> space
    assert normalize_text("cafe\u0301") == normalize_text("café") == "café"  # composed
    assert normalize_text("x²") == "x2"
    assert normalize_text("img_1234.jpg") == "img_1234 jpg"  # underscore is a word char
    assert normalize_text("...") == ""


def test_normalize_text_removes_invisible_characters_and_folds_look_alikes():
    plain = normalize_text("a red cube left of a blue ball")
    assert normalize_text("a r\u0435d cub\u0435 l\u0435ft of a blu\u0435 ball") == plain  # Cyrillic е
    assert normalize_text("A RED CUBE LEFT OF A BLUE BALL".replace("E", "\u0395")) == plain  # Greek Ε
    assert normalize_text("a red cu\u00adbe left of a blue ball") == plain  # soft hyphen: not "cu be"
    assert normalize_text("a red cu\u200bbe le\u200dft of a\ufeff blue ball\ufe0f") == plain  # ZWSP, ZWJ, BOM, VS16
    assert normalize_text("cafe\u00ad\u0301") == normalize_text("café")  # recomposed once the hyphen is gone
    assert normalize_text("ΗΕΛΛΟ") == "heλλo" and normalize_text("ο") == "o"  # upper and lower case look-alikes
    # Unicode's prototype of η is n̩ (a letter with a mark), not n: left alone since issue 43
    assert normalize_text("η") == "η"
    assert normalize_text("\u1fb3") == normalize_text("αι") == "ai"  # folded after case folding too
    # each step can be switched off (the audit's per-step counts): `()` is case/punctuation only
    assert normalize_text("cu\u00adbe", ()) == "cu be" and normalize_text("ｒｅｄ", ()) == "ｒｅｄ"
    assert normalize_text("r\u0435d", ("nfkc", "ignorables")) == "r\u0435d"


def test_look_alikes_fold_as_unicode_s_confusables_data_folds_them():
    from platonic.core.matchnorm import CONFUSABLES

    assert normalize_text("ɢʀᴇᴇɴ ᴄᴜʙᴇ") == "green cube"  # small capitals, by name
    assert normalize_text("\u0251 red cube") == "a red cube"  # Latin alpha
    assert normalize_text("\u0585\u057d\u0581") == "oug"  # Armenian օ ս ց
    assert normalize_text("\u0501\u050d") == "dg"  # Cyrillic ԁ, and ԍ whose prototype is the small capital ɢ
    assert normalize_text("\u0399\u0406\u0661\u07c0") == "ii10"  # the l/I/1 and O/0 classes: by category
    # a mark that composes a letter stays (café is not cafe); one that composes none is dropped
    assert normalize_text("cafe\u0301") == normalize_text("café") == "café"
    assert normalize_text("c\u0336u\u0335b\u0337e\u20dd x\u0301") == "cube x"
    assert normalize_text("c\u0336ube", ("nfkc", "ignorables")) == "c ube"  # the confusables step drops it
    t = "\u0915\u093f \u00e9\u0301"  # marks over other letters: the step leaves them to the plain rules
    assert normalize_text(t) == normalize_text(t, ("nfkc", "ignorables"))
    # the table holds non-ASCII keys only, each folded to one ASCII letter or digit
    assert len(CONFUSABLES) > 1300
    assert all(not k.isascii() and len(v) == 1 and v.isascii() and v.isalnum() for k, v in CONFUSABLES.items())


def test_the_confusables_table_is_what_its_generator_makes():
    """platonic_core/confusables.json is generated (benchmarks/gen_confusables.py) from the
    `confusable-homoglyphs` package, which the runtime does not need: where the package is
    installed, the committed file is the generator's output for that version, byte for byte."""
    ch = pytest.importorskip("confusable_homoglyphs", reason="pip install confusable-homoglyphs==3.3.1")
    import importlib.metadata
    import sys
    import unicodedata
    from importlib.resources import files

    from platonic.core.matchnorm import CONFUSABLES_DATA as committed

    version = importlib.metadata.version("confusable-homoglyphs")
    if f"confusable-homoglyphs {version}" != committed["source"]:
        pytest.skip(f"another confusable-homoglyphs than the table's ({committed['source']})")
    if unicodedata.unidata_version != committed["unidata_version"]:
        pytest.skip(f"Unicode {unicodedata.unidata_version}, not the table's {committed['unidata_version']}")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from gen_confusables import OUT, document, render

    data = json.loads((files(ch.__name__) / "confusables.json").read_text("utf-8"))
    assert OUT.read_text("utf-8") == render(document(data, version))
    assert json.loads(render(document(data, version))) == committed


def test_ascii_keys_are_unchanged_by_the_new_steps():
    import re

    ascii_texts = ["".join(map(chr, range(32, 127))), "  A\tred\n\ncircle. ", "img_1234.jpg", "Two dogs, (big)!"]
    for t in ascii_texts:
        today = " ".join(re.sub(r"[^\w\s]", " ", t.casefold()).split())  # the key before issue 33
        assert normalize_text(t) == normalize_text(t, ()) == normalize_text(t, ("nfkc",)) == today


def test_default_ignorable_ranges_are_unicode_s():
    regex = pytest.importorskip("regex")
    from platonic.core.matchnorm import DEFAULT_IGNORABLE_RANGES

    di = regex.compile(r"\p{Default_Ignorable_Code_Point}")
    ours = {cp for lo, hi in DEFAULT_IGNORABLE_RANGES for cp in range(lo, hi + 1)}
    assert ours == {cp for cp in range(0x110000) if di.match(chr(cp))}


TRAIN = [  # (image_id, text_id, source_kind, text, matches eval?)
    ("A", "A:alt:0", "alt", "A red circle.", "e1"),
    ("A", "A:recap:0", "recap", "a  RED circle!!", "e1"),
    ("A", "A:paraphrase:0", "paraphrase", "a blue square", None),
    ("B", "B:alt:0", "alt", "Ｇｒｅｅｎ ring", "e2"),
    ("B", "B:recap:0", "recap", "something else", None),
    ("C", "C:recap:0", "recap", "red circles", None),  # near miss: not exact
    ("C", "C:recap:1", "recap", "a red-circle", "e1"),
    ("D", "D:alt:0", "alt", "nothing to see", None),
    ("D", "D:recap:0", "recap", "a red", None),
]
EVAL = [("e1", "X", "a red circle"), ("e2", "Y", "green, ring"), ("e3", "Z", "unmatched caption")]


@pytest.fixture()
def dedup_inputs(tmp_path) -> tuple[Path, Path]:
    rows = [{"image_id": i, "text_id": t, "source_kind": k, "text": x} for i, t, k, x, _ in TRAIN]
    pq.write_table(text_table(rows), tmp_path / "texts.parquet")
    pq.write_table(
        pa.table({"text_id": [e[0] for e in EVAL], "image_id": [e[1] for e in EVAL], "text": [e[2] for e in EVAL]}),
        tmp_path / "eval.parquet",
    )
    (tmp_path / "out").mkdir()
    return tmp_path / "texts.parquet", tmp_path / "eval.parquet"


def test_dedup_drop_text_removes_exactly_the_matches(dedup_inputs):
    texts, ev = dedup_inputs
    out = texts.parent / "out"
    counts = dedup(texts, ev, DedupConfig(policy="drop_text"), out)
    planted = {t: e for _i, t, _k, _x, e in TRAIN if e}
    removed = pq.read_table(out / "removed.parquet").to_pylist()
    assert {r["text_id"]: r["eval_text_id"] for r in removed} == planted
    assert {r["reason"] for r in removed} == {"exact_match"}
    kept = pq.read_table(out / "texts.parquet")["text_id"].to_pylist()
    assert kept == [t for _i, t, _k, _x, e in TRAIN if not e]  # order preserved
    assert counts["in"] == len(TRAIN) == counts["kept"] + counts["removed"]
    assert counts["removed"] == 4
    assert counts["removed_alt"] == 2 and counts["removed_recap"] == 2 and "removed_paraphrase" not in counts
    assert counts["eval_captions"] == 3 and counts["eval_captions_matched"] == 2
    report = json.loads((out / "report.json").read_text())
    assert report["policy"] == "drop_text" and report["removed"] == 4
    # the kept table keeps every column of the input
    assert pq.read_schema(out / "texts.parquet").names == pq.read_schema(texts).names


def test_dedup_drop_image_removes_whole_groups(dedup_inputs):
    texts, ev = dedup_inputs
    out = texts.parent / "out"
    counts = dedup(texts, ev, DedupConfig(policy="drop_image"), out)
    hit_images = {i for i, _t, _k, _x, e in TRAIN if e}  # A, B, C
    assert hit_images == {"A", "B", "C"}
    removed = {r["text_id"]: r for r in pq.read_table(out / "removed.parquet").to_pylist()}
    assert set(removed) == {t for i, t, _k, _x, _e in TRAIN if i in hit_images}
    for i, t, _k, _x, e in TRAIN:
        if i in hit_images:
            assert removed[t]["reason"] == ("exact_match" if e else "image_group_of_match")
    assert removed["A:paraphrase:0"]["eval_text_id"] == "e1"
    assert removed["B:recap:0"]["eval_text_id"] == "e2"
    kept = pq.read_table(out / "texts.parquet")["text_id"].to_pylist()
    assert kept == ["D:alt:0", "D:recap:0"]
    assert counts["in"] == counts["kept"] + counts["removed"] == len(TRAIN)
    assert counts["removed"] == 7
    assert counts["removed_alt"] + counts["removed_recap"] + counts["removed_paraphrase"] == 7
    assert counts["eval_captions_matched"] == 2


def test_dedup_disabled_removes_nothing(dedup_inputs):
    texts, ev = dedup_inputs
    out = texts.parent / "out"
    counts = dedup(texts, ev, DedupConfig(enabled=False), out)
    assert counts["removed"] == 0 and counts["kept"] == len(TRAIN)
    assert pq.read_table(out / "removed.parquet").num_rows == 0


# ---- views -------------------------------------------------------------------------------


def _write_texts(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    pq.write_table(
        text_table(
            [
                {"image_id": i, "text_id": f"{i}:{k}:{n}", "source_kind": k, "text": x}
                for n, (i, k, x) in enumerate(rows)
            ]
        ),
        path,
    )
    return path


def test_views_unknown_source_kind_is_a_clear_error(tmp_path):
    texts = _write_texts(tmp_path / "texts.parquet", [("A", "recap", "a red circle"), ("A", "alt", "circle")])
    with pytest.raises(
        ValueError, match=r"source kind 'paraphrase' is not in the corpus \(kinds: \['alt', 'recap'\]\)"
    ):
        build_views(texts, ViewsConfig(good_sources=["recap", "paraphrase"]), tmp_path)
    with pytest.raises(ValueError, match="'nope'"):
        build_views(texts, ViewsConfig(text_sources=["nope"]), tmp_path)


def test_views_group_texts_per_image(tmp_path):
    rows = [
        ("A", "recap", "a red circle in the middle"),
        ("A", "recap", "a crimson disc at the centre"),
        ("A", "alt", "red circle"),
        ("B", "recap", "a blue square in the top left"),
        ("B", "recap", "a navy box at the upper left"),
        ("B", "recap", "in the top left a blue tile"),
        ("C", "recap", "a small ring"),  # only one recap: too few for two views
    ]
    texts = _write_texts(tmp_path / "texts.parquet", rows)
    counts = build_views(texts, ViewsConfig(vocab_size=64), tmp_path)
    assert counts["good_images"] == 2 and counts["good_texts"] == 5
    assert counts["images_too_few_texts"] == 1
    assert counts["texts"] == 6  # text_sources = [recap]
    good = pq.read_table(tmp_path / "good_views.parquet").to_pylist()
    assert [g["image_id"] for g in good] == ["A", "B"]
    assert good[0]["texts"] == [r[2] for r in rows[:2]]  # alt-text is not a good view here
    assert json.loads((tmp_path / "meta.json").read_text()) == {"max_len": 48, "n_views": 2}
    assert (tmp_path / "tokenizer.json").is_file()


def test_views_order_images_by_id_and_keep_corpus_order_within_one(tmp_path):
    """The corpus is not grouped by image: good views come out by image id, each image's texts
    in corpus order, and both files have plain string columns (what the trainer and digests read)."""
    rows = [
        ("B", "recap", "b one"),
        ("A", "recap", "a one"),
        ("C", "alt", "c alt"),
        ("B", "recap", "b two"),
        ("A", "recap", "a two"),
        ("A", "recap", "a three"),
    ]
    texts = _write_texts(tmp_path / "texts.parquet", rows)
    build_views(texts, ViewsConfig(vocab_size=64, text_sources=["alt", "recap"]), tmp_path)
    good = pq.read_table(tmp_path / "good_views.parquet")
    assert good.to_pylist() == [
        {"image_id": "A", "texts": ["a one", "a two", "a three"]},
        {"image_id": "B", "texts": ["b one", "b two"]},
    ]
    assert good.schema == pa.schema([("image_id", pa.string()), ("texts", pa.list_(pa.string()))])
    single = pq.read_table(tmp_path / "texts.parquet")
    assert single["text"].to_pylist() == [r[2] for r in rows]  # input order, every text kind
    assert single.schema == pa.schema([(c, pa.string()) for c in ("image_id", "text_id", "source_kind", "text")])


def test_ingest_output_does_not_depend_on_where_the_store_lives(tmp_path):
    """Provenance names the source logically, so the same world ingested from two folders
    gives identical bytes (and the same digest downstream)."""
    from platonic.core.artifacts import folder_digest
    from platonic.core.config import IngestConfig, WorldConfig
    from platonic.core.world import generate_world

    digests = []
    for where in ("a", "b/c"):
        world, out = tmp_path / where / "world", tmp_path / where / "ingest"
        out.mkdir(parents=True)
        generate_world(WorldConfig(n_train=40, n_eval=20), world)
        ingest_world(world, IngestConfig(), out, source="world:abc")
        digests.append(folder_digest(out))
    assert digests[0] == digests[1]
